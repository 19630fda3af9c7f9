"""Stage 3, synthesize: trajectories answered by the teacher against the tools."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, model_validator

from agentune.config.build_templates import AgentProtocolName
from agentune.config.inputs import ARTIFACT, UNTRACKED
from agentune.config.strict import UTC_OFFSET_PATTERN, Strict
from agentune.config.train_retriever import candidate_retriever_field

# What the synthesize stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("synthesis", "environments", "verifier", "llm.teacher",
                          "llm.judge")

TaskTypeName = Literal["tool_selection", "multi_step_planning", "timing_decision", "tool_retrieval"]
GuidedBy = Literal["tools", "calls"]
ScenarioKindName = Literal["single_call", "parallel_calls", "multi_step", "no_tool", "irrelevant",
                           "missing_info"]


class SynthesisConfig(Strict):
    """synthesize: Query x Tools x Template combinations answered step by step by the teacher
    (plan -> tool call -> execute -> observe ... -> conclude), gated, in two forms."""

    scenarios: Annotated[str | None, ARTIFACT] = Field(
        "scenarios", min_length=1,
        description="Input scenarios (`scenarios` or `scenarios@VERSION`): their `train` split "
        "is synthesized in the environments, every attempt verified against its ground truth. "
        "Empty: plain queries only.",
    )
    templates_per_scenario: int = Field(
        2, ge=1, le=100, description="Templates each scenario is rendered under.")
    form: Literal["steps", "messages"] = Field(
        "steps",
        description="How the teacher is asked. steps: each step in its agent template's text "
        "format (MAT's prompts; rows in both forms). messages: in its own chat template, the "
        "offered tools as `tools=` and its native tool calls read back, framed with the rows' "
        "system message: the conversation the student is trained and evaluated on, for a "
        "teacher that reads text protocols poorly (scenarios only; rows in the messages form "
        "alone; the template names the combination's group). A guided attempt's turns are the "
        "ground truth's calls and the teacher writes the rest: a question for missing "
        "information and the final answer, both without tools offered; the verifier checks the "
        "answer's facts (guided_by: calls, no guided_facts).")
    attempts: int = Field(
        3, ge=1, le=64,
        description="Attempts per scenario x template (k): each in a fresh environment and "
        "verified; the first at `temperature`, the others at `attempt_temperature` with their own "
        "seed. Every attempt is kept in `attempts` (the preference pairs read it).")
    attempt_temperature: float = Field(
        0.7, ge=0, le=2, description="Teacher temperature of attempts after the first (and, "
        "with guided_attempts, after the first guided one).")
    guided_attempts: int = Field(
        0, ge=0, le=64,
        description="Of the k attempts, how many (the last ones) are guided by the scenario's "
        "ground truth (STaR-style rationalization, for a teacher too weak to find the calls "
        "alone): the prompt is unchanged, but each step's grammar admits only the tools of the "
        "next ground-truth step (after `ask_user` for missing_info) and the finish only once "
        "they are called. Arguments, thoughts and answer stay the teacher's own, and the "
        "verifier judges the attempt like any other. The first guided attempt runs at "
        "`temperature`, the others at `attempt_temperature`. Rows are marked `guided` in "
        "`trajectories` and `attempts`; pass@k counts only the unguided ones. Needs "
        "`structured_output: all`.")
    guided_by: GuidedBy = Field(
        "tools",
        description="What a guided attempt's grammar fixes. tools: the ground truth's tool "
        "names, the teacher writes the arguments; calls: the whole calls (names and "
        "arguments), the teacher writes only its thoughts, questions to the user and the final "
        "answer, which the verifier still checks against the scenario's facts.")
    guided_facts: bool = Field(
        False,
        description="Also guide a guided attempt's final answer to the facts: the finishing "
        "step's grammar admits only an answer that states every fact of the scenario (one "
        "wording of each `A|B`, in the scenario's order), with the teacher's own text around "
        "and between them (each piece at most `text_max_chars`, and together about "
        "`answer_max_chars`); a two-stage format's concluder (KuaiAgent) answers under the same "
        "grammar, as {\"answer\": ...}, and the row keeps the plain text. The finishing request "
        "may write `step_max_tokens` + `answer_max_tokens` tokens. The verifier still judges "
        "the attempt (a fact no call returned is still made up).")
    stop_at_first_pass: bool = Field(
        True, description="Stop a scenario x template's attempts at the first that passes "
        "(off: run all k, for pass^k and more preference data).")
    max_scenarios: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Most train scenarios used (null: all), drawn by `kind_shares`.")
    kind_shares: dict[ScenarioKindName, float] = Field(
        default_factory=lambda: {"single_call": 0.25, "parallel_calls": 0.15, "multi_step": 0.25,
                                 "missing_info": 0.10, "no_tool": 0.10, "irrelevant": 0.15},
        description="Share of the scenarios used per kind when max_scenarios caps them (a kind "
        "short of scenarios gives its share to the others).")
    judgements: Annotated[str | None, ARTIFACT] = Field(
        "judgements", min_length=1,
        description="build_templates' judged instances (`judgements` or `judgements@VERSION`): "
        "the kept ones join the trajectories as one-step rows (source judged_instance). Empty: "
        "none.")
    use_queries: bool = Field(
        False, description="Also synthesize plain query x template combinations (no ground "
        "truth: gated and judged as before, marked unverified).")
    max_tool_calls: int = Field(
        8, ge=1, le=1000, description="Most tool calls in one trajectory (more: tool_call_cap).")
    max_parallel_calls: int = Field(
        4, ge=1, le=64, description="Most independent calls in one step (parallel tool calls).")
    max_total_response_length: int = Field(
        4096, ge=16, le=1_000_000,
        description="Most teacher tokens in one trajectory's steps and answer, in completion "
        "tokens (more: response_length_cap).")
    max_user_turns: int = Field(
        2, ge=0, le=20,
        description="Questions to the user one trajectory may ask (`ask_user`); the simulated "
        "user (the teacher, given the scenario's hidden information) answers.")
    user_max_chars: int = Field(
        200, ge=8, le=4000, description="Longest answer of the simulated user.")
    pii_action: Literal["scrub", "drop", "off"] = Field(
        "scrub",
        description="Personal data (e-mails, phones, ID and card numbers) in an accepted "
        "trajectory: scrub (typed placeholders, counted), drop (rejected as `pii`), off.")
    queries: Annotated[str, ARTIFACT] = Field(
        "queries", min_length=1,
        description="Input queries: `queries` (latest) or `queries@VERSION`.",
    )
    catalog: Annotated[str, ARTIFACT] = Field(
        "tools", min_length=1,
        description="Input tool catalog: `tools` (latest) or `tools@VERSION`.",
    )
    templates: Annotated[str, ARTIFACT] = Field(
        "templates", min_length=1,
        description="Input templates: `templates` (latest) or `templates@VERSION`; its kept "
        "planner templates are used.",
    )
    templates_per_query: int = Field(
        3, ge=1, le=100, description="Templates each sampled query is rendered under."
    )
    max_combinations: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Most query x template combinations (null: every query, templates_per_query "
        "times).",
    )
    max_uses_per_template: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Most combinations one template is used in (null: no cap; use is balanced "
        "across templates either way).",
    )
    task_weights: dict[TaskTypeName, float] = Field(
        default_factory=lambda: {"tool_selection": 0.35, "multi_step_planning": 0.30,
                                 "timing_decision": 0.20, "tool_retrieval": 0.15},
        description="Share of combinations per task type. tool_selection: the query's tool subset "
        "(needed tools + distractors); multi_step_planning: queries needing several tools; "
        "timing_decision: queries needing no tool (the right step is to finish at once); "
        "tool_retrieval: the needed tools hidden in a large subset. A type with no eligible query "
        "gives its share to the others.",
    )
    retrieval_tools: int = Field(
        16, ge=2, le=10_000, description="Tools offered in a tool_retrieval combination."
    )
    retriever: Annotated[str | None, ARTIFACT] = candidate_retriever_field(
        "of a tool_retrieval combination (its hard distractors) and of a scenario's distractors "
        "(distractor_tools)")
    distractor_tools: int | None = Field(
        3, ge=0, le=1000,
        description="A scenario is offered its environment's tools, the tools its ground truth "
        "calls, ask_user and at most this many other tools of the shared environments (the "
        "ones the retriever ranks highest for its request: BM25, or `retriever`). null: every "
        "shared tool, as before.")
    distractors_from: Literal["shared", "session"] = Field(
        "shared",
        description="Where distractor_tools come from: shared: the shared environments' tools "
        "(the scenario's environment's own tools are always offered); session: every tool of "
        "the scenario's session its ground truth does not call, its environment's own too (a "
        "smaller prompt: the needed tools, ask_user and distractor_tools others).")
    tool_descriptions: Literal["request", "catalog"] = Field(
        "request",
        description="request: a tool's description (and its parameters') in the request's "
        "language only, in the prompts and in the rows' tools (a bilingual catalog's other "
        "sentence left out); catalog: as the catalog writes them.")
    system_prompt: AgentProtocolName | Literal["template"] = Field(
        "react",
        description="The system message of a row's messages form: the Profile of this "
        "benchmark template in the request's language and the current time, the same message "
        "the closed loop frames that scenario with (evaluate.closed_loop, messages form, that "
        "template's group); template: the Profile of the template the row was synthesized in.")
    max_steps: int = Field(
        5, ge=1, le=50,
        description="Planning steps allowed, the finishing one included; a trajectory that has "
        "not finished by then is rejected (step_cap). A guided attempt gets at least its "
        "ground truth's steps + 2 (a question to the user and the finish), whatever this "
        "(or the format's own limit) says.",
    )
    max_step_retries: int = Field(
        2, ge=0, le=20,
        description="Times an invalid step (unreadable, unknown tool, bad arguments, repeated "
        "call) is asked again, with the problem named; each failure is recorded in `rejects`.",
    )
    structured_output: Literal["json_protocols", "all", "off"] = Field(
        "json_protocols",
        description="Constrain the teacher's step answers with a JSON schema (one branch per "
        "offered tool, its arguments' schema inside). json_protocols: for the JSON formats "
        "(AutoGPT, KuaiAgent), whose answer is that JSON; all: also for the text formats, whose "
        "step is then rendered in the template's format (for weak teachers such as the embedded "
        "model); off: free text everywhere.",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Teacher sampling temperature.")
    frequency_penalty: float = Field(
        0.0, ge=0, le=2,
        description="OpenAI's frequency_penalty on the teacher's steps and answers (the guided "
        "writer's too): each token's logit is lowered by this times its count in the answer so "
        "far. Guards a small teacher's greedy decoding against looping on a phrase or a digit; "
        "under a grammar it only reorders what the grammar allows. 0: off (the request does not "
        "carry it).")
    step_max_tokens: int = Field(
        512, ge=16, le=32_768, description="Longest teacher answer for one planning step."
    )
    answer_max_tokens: int = Field(
        512, ge=16, le=32_768, description="Longest final answer (concluder or finish step)."
    )
    text_max_chars: int = Field(
        300, ge=16, le=20_000,
        description="Longest thought / string argument allowed by the structured-output schema.",
    )
    answer_max_chars: int = Field(
        1200, ge=16, le=100_000,
        description="Longest final answer allowed by the structured-output schema.",
    )
    min_answer_chars: int = Field(
        2, ge=1, le=10_000,
        description="A final answer shorter than this (whitespace stripped) is empty_answer.",
    )
    require_tool_call: bool = Field(
        True,
        description="Reject trajectories of tool-needing task types that never call a tool "
        "(no_tool_call), and timing_decision ones that call a tool (unneeded_tool_call).",
    )
    judge: bool = Field(
        True, description="Let the judge score each final answer; below min_judge_score: off_topic."
    )
    min_judge_score: float = Field(
        6.0, ge=1, le=10, description="Lowest judge score (1-10) an accepted trajectory may have."
    )
    judge_rationale_max_chars: int = Field(
        300, ge=20, le=4000, description="Longest rationale the judge may write."
    )
    concurrency: Annotated[int, UNTRACKED] = Field(
        8, ge=1, le=4096,
        description="Trajectories in progress at once (the gateway still bounds LLM calls).",
    )
    current_time: datetime = Field(
        datetime.fromisoformat("2025-06-02T09:30:00+08:00"),
        description="The clock of every trajectory: the time its prompts show and the date and "
        "simulated tools read (it takes precedence over environments.tools.now). Fixed, so a "
        "re-run sends the same requests (cache hits).",
        json_schema_extra=UTC_OFFSET_PATTERN,
    )
    work_dir: Annotated[str, UNTRACKED] = Field(
        "data/cache/synthesis", min_length=1,
        description="Where a running synthesis checkpoints each finished trajectory, in a folder "
        "named by the trajectories version it will publish; a killed run resumes from it.",
    )
    keep_checkpoints: Annotated[bool, UNTRACKED] = Field(
        False, description="Keep the checkpoint folder after the version is published."
    )

    @model_validator(mode="after")
    def _checks(self) -> "SynthesisConfig":
        for name, weights in (("task_weights", self.task_weights),
                              ("kind_shares", self.kind_shares)):
            if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
                raise ValueError(f"{name} must be >= 0 with a positive sum")
        if not self.scenarios and not self.use_queries:
            raise ValueError("nothing to synthesize: set scenarios, or use_queries")
        if self.retriever is not None and not (
                (self.use_queries and self.task_weights.get("tool_retrieval", 0) > 0)
                or (self.scenarios and self.distractor_tools)):
            raise ValueError("retriever ranks the tools of tool_retrieval combinations of plain "
                             "queries and the distractors of scenarios: it needs use_queries "
                             "and a tool_retrieval task weight, or scenarios and "
                             "distractor_tools")
        if self.guided_attempts > self.attempts:
            raise ValueError(f"guided_attempts ({self.guided_attempts}) exceeds attempts "
                             f"({self.attempts})")
        if self.form == "messages":
            if self.use_queries:
                raise ValueError("form messages synthesizes scenarios only: set use_queries "
                                 "false")
            if self.guided_attempts and (self.guided_by != "calls" or self.guided_facts):
                raise ValueError("form messages guides an attempt by making the ground truth's "
                                 "calls for it: guided_by must be calls and guided_facts false")
        elif self.guided_attempts and self.structured_output != "all":
            raise ValueError("guided_attempts steer the teacher through its grammar: they need "
                             "structured_output: all")
        if self.current_time.tzinfo is None:
            raise ValueError("current_time needs a UTC offset, e.g. 2025-06-02T09:30:00+08:00")
        return self
