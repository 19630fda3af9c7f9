"""Stage 6, evaluate: benchmarks answered by every listed model, scored, compared."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, model_validator

from agentune.config.build_templates import AgentProtocolName
from agentune.config.inputs import ARTIFACT, FILE, RESOLVED, UNTRACKED
from agentune.config.strict import UTC_OFFSET_PATTERN, Strict
from agentune.config.train_retriever import candidate_retriever_field

# What the evaluate stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("evaluate", "environments", "verifier", "llm",
                          "templates.unseen_templates", "synthesis.user_max_chars",
                          "synthesis.tool_descriptions")

# What each benchmark reads of it (within READS): the version ids of its outputs come from these
# as a stage's come from READS (agentune.tasks.store.inputs), with the model and the items.
CLOSED_LOOP_READS: tuple[str, ...] = ("evaluate.closed_loop", "environments", "verifier",
                                      "llm.teacher", "llm.judge", "synthesis.user_max_chars",
                                      "synthesis.tool_descriptions")
BFCL_READS: tuple[str, ...] = ("evaluate.bfcl",)
PREDICTION_READS: tuple[str, ...] = ("evaluate.temperature", "evaluate.top_p", "evaluate.top_k",
                                     "evaluate.max_tokens", "evaluate.max_prompt_tokens")


class EvalModelConfig(Strict):
    """One model the evaluate stage answers the benchmark with."""

    label: str = Field(
        min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.+-]+$",
        description="Its name in the report (base, tuned ...).",
    )
    model: str = Field(
        min_length=1,
        description="`embedded`, a local transformers folder, a store version of a trained "
        "model (`model`, `model@latest`, `model@VERSION`), or (provider openai) the model name "
        "the endpoint serves.",
    )
    provider: Literal["local", "openai"] = Field(
        "local", description="local: in-process transformers (batched); openai: any "
        "OpenAI-compatible endpoint, e.g. a vLLM server serving the checkpoint.",
    )
    base_url: str | None = Field(None, description="openai: the endpoint's base URL.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="openai: name of the environment variable with the key."
    )
    tokenizer: str | None = Field(
        None, description="openai: a local tokenizer folder (or `embedded`) to count prompt "
        "tokens for the memory cut; null: count characters (3 per token). Local models use "
        "their own.",
    )
    batch_size: int = Field(8, ge=1, le=512, description="local: prompts generated together.")
    max_concurrency: int = Field(16, ge=1, le=4096, description="Requests in flight at once.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="local: weights dtype"
        " (auto = bf16 where the CPU or GPU multiplies bf16 natively (a CPU with AVX512-BF16 or "
        "AMX), else fp32; the choice and its reason are logged at load)."
    )
    device: str = Field("auto", description="local: torch device (auto = cuda if present).")
    timeout_s: float | None = Field(None, gt=0, description="Per-request timeout in seconds.")
    optional: bool = Field(
        False, description="Leave it out of the report, saying so, when it does not exist yet "
        "(e.g. no `model` version has been trained).",
    )


class HumanEvalConfig(Strict):
    """Human review of sampled answers (seed rubric: 1-5, 4-5 usable, 0 for a violation)."""

    sample_size: int = Field(
        0, ge=0, le=100_000, description="Prompts sampled for review; every model's answer to "
        "each becomes one blind row of the sheet (0: no sheet).",
    )
    filled_sheet: str | None = Field(
        None, description="A reviewed sheet (.csv or .parquet) to import: its usable rate joins "
        "the report beside the automatic scores.",
    )


class ClosedLoopConfig(Strict):
    """Closed-loop evaluation: each model acts in the scenarios' environments (tools run, the
    simulated user answers), the verifier scores every trial."""

    enabled: bool = Field(True, description="Run the closed-loop evaluation.")
    scenarios: Annotated[str | None, ARTIFACT] = Field(
        None, description="The scenarios version (null: the latest; none published: skipped, "
        "saying so).")
    splits: list[Literal["heldout", "reserved", "natural", "dev", "train"]] = Field(
        default_factory=lambda: ["heldout", "natural", "reserved"], min_length=1,
        description="Scenario splits evaluated, each on its own line: heldout (never trained "
        "on), natural (written scenarios when scenarios are generated), reserved (an "
        "environment whose tools training never saw), dev (generated for choosing a recipe: "
        "scenarios.generate.dev), train (for diagnosis only).")
    max_scenarios: int | None = Field(
        None, ge=1, description="Scenarios per split, a seeded spread over kinds (null: all).")
    form: Annotated[Literal["auto", "messages", "steps", "both"], RESOLVED] = Field(
        "auto", description="How the models are asked. messages: native tool calls through the "
        "chat template; steps: the agent templates' text prompts; both; auto: the form the "
        "listed trained model was trained in (messages when none is).")
    templates: list[AgentProtocolName] = Field(
        default_factory=lambda: ["react"], description="Benchmark templates whose prompt (steps) "
        "or Profile as system message (messages) the scenarios are run under; with the "
        "reserved unseen templates (templates.unseen_templates) they are the template groups of "
        "the format-sensitivity table.")
    trials: int = Field(
        1, ge=1, le=64, description="k: trials per scenario and group; pass^k counts a scenario "
        "only when all k pass (sampling needs temperature > 0 to differ).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_steps: int = Field(6, ge=1, le=64, description="Model turns per trial.")
    max_user_turns: int = Field(1, ge=0, le=16, description="Replies of the simulated user.")
    max_tokens: int = Field(256, ge=8, le=32_768, description="Longest model turn, in tokens.")
    max_tools: int | None = Field(
        None, ge=1, le=10_000,
        description="Offer each request only the best N of its environment's tools, ranked by "
        "tool retrieval (BM25, or hybrid with `retriever`), as an agent facing a catalog too "
        "large for its prompt would see them (`ask_user` always); a needed tool ranked out "
        "fails the trial. At most N: BM25 ranks only tools that share a word with the request. "
        "Null: every tool of the environment.")
    retriever: Annotated[str | None, ARTIFACT] = candidate_retriever_field(
        "offered when `max_tools` caps them")
    needed_tools: Literal["catalog", "first", "last"] = Field(
        "catalog", description="Where the tools a scenario's ground truth calls stand in its "
        "offer: the catalog's order, or moved before / after the environment's other tools "
        "(`ask_user` stays last). first vs last measures whether a model picks a tool by its "
        "position (tests/benchmarks/outcome_dev.py's position test).")
    chat_template: Annotated[str | None, FILE] = Field(
        None, description="messages form: the chat template for a model whose own renders no "
        "tools (null: templates/chatml_training.j2, what agentune trains ChatML models with). "
        "A trained model version uses the template it was trained with.")

    @model_validator(mode="after")
    def _retriever_needs_a_cap(self) -> "ClosedLoopConfig":
        if self.retriever is not None and self.max_tools is None:
            raise ValueError("retriever ranks the offered tools only under max_tools: set "
                             "max_tools, or leave retriever null")
        return self


BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
                   "live_simple", "live_multiple", "live_irrelevance", "multi_turn_base")


class BfclConfig(Strict):
    """BFCL (Berkeley Function Calling Leaderboard v4) through its own scorer: a seeded subset
    of each category answered by every model, scored by bfcl-eval's ``bfcl evaluate`` run in its
    own virtual environment (``make setup`` builds ``.venv-bfcl``)."""

    enabled: bool = Field(False, description="Run BFCL (the demo does, on a small subset).")
    categories: list[str] = Field(
        default_factory=lambda: list(BFCL_CATEGORIES), min_length=1,
        description="BFCL v4 categories (single-turn AST, irrelevance, live, multi_turn_base).")
    max_per_category: int | None = Field(
        50, ge=1, description="Entries sampled per category, a fixed seeded subset (null: all).")
    subset_seed: int | None = Field(
        None, description="Seed of that subset (null: the run's seed). Fix it to score the "
        "models of several run seeds on the same entries, so their spread is the training's.")
    category_caps: dict[str, int] = Field(
        default_factory=dict, description="Per-category caps overriding max_per_category, "
        "e.g. {multi_turn_base: 2}.")
    mode: Literal["prompt", "fc"] = Field(
        "prompt", description="prompt: BFCL's own system prompt lists the functions and the "
        "model writes `[f(a=1)]` (the leaderboard's `(Prompt)` entries); fc: functions passed as "
        "tools, calls read back as tool calls (its `(FC)` entries).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature (BFCL: 0.001).")
    max_tokens: int = Field(256, ge=8, le=32_768, description="Longest model turn, in tokens.")
    max_steps: int = Field(
        20, ge=1, le=64, description="multi-turn: model steps per user turn (BFCL: 20).")
    python: Annotated[str | None, UNTRACKED] = Field(
        None, description="The bfcl-eval venv's Python (null: .venv-bfcl/bin/python in the "
        "project root, or $AGENTUNE_BFCL_PYTHON).")
    timeout_s: Annotated[float, UNTRACKED] = Field(
        900, gt=0, description="Limit for one `bfcl evaluate` run.")

    @model_validator(mode="after")
    def _known(self) -> "BfclConfig":
        unknown = sorted(set(self.categories) - set(BFCL_CATEGORIES))
        if unknown:
            raise ValueError(f"unsupported BFCL categories {unknown}; supported: "
                             f"{list(BFCL_CATEGORIES)}")
        extra = sorted(set(self.category_caps) - set(self.categories))
        if extra:
            raise ValueError(f"category_caps names categories not run: {extra}")
        if any(cap < 1 for cap in self.category_caps.values()):
            raise ValueError("category_caps must be >= 1 (leave a category out of `categories` "
                             "to skip it)")
        return self


class RetrievalEvalConfig(Strict):
    """Tool retrieval: recall@k and MRR of BM25, the trained retriever (dense) and their fusion
    (hybrid) on the held-out scenarios' requests, zh / en / cross-language, on the catalog as
    written and grown with distractor tools."""

    enabled: bool = Field(True, description="Evaluate tool retrieval (BM25 alone when no "
                          "retriever version is published).")
    retriever: str = Field("retriever@latest", description="The retriever version to evaluate.")
    scenarios: str = Field("scenarios", description="The scenarios version whose requests are "
                           "asked.")
    splits: list[Literal["heldout", "reserved", "natural", "dev", "train"]] = Field(
        default_factory=lambda: ["heldout", "natural", "reserved"], min_length=1,
        description="Scenario splits asked (natural: the written scenarios when scenarios are "
        "generated; dev: generated for choosing a recipe; train: diagnosis only, those were "
        "trained on).")
    catalog_sizes: list[int] = Field(
        default_factory=lambda: [1000], description="Catalog sizes, besides the catalog as "
        "written, reached by adding seeded distractor tools.")


class EvaluateConfig(Strict):
    """evaluate: the held-out benchmark (and/or a KAgentBench file) answered by every listed
    model, scored exactly as KAgentBench scores, plus the tool-use metrics; `eval_report` out."""

    heldout: bool = Field(
        True, description="Build agentune's held-out benchmark from the sft_dataset test split."
    )
    dataset: str | None = Field(
        None, description="The sft_dataset version for the held-out benchmark (null: latest)."
    )
    templates: str | None = Field(
        None, description="The templates version unseen templates are drawn from (null: the one "
        "the dataset descends from, else the latest).",
    )
    benchmark_templates: list[AgentProtocolName] = Field(
        default_factory=lambda: ["react", "autogpt", "toolllama", "modelscope", "kuaiagent"],
        description="Benchmark templates every held-out prompt is rendered with.",
    )
    max_queries: int | None = Field(
        None, ge=1, description="Test-split queries in the held-out benchmark (null: all)."
    )
    max_profile: int | None = Field(
        None, ge=0, description="General test rows taken as profile samples (null: all)."
    )
    kagentbench_file: str | None = Field(
        None, description="A KAgentBench benchmark_eval.jsonl to evaluate on as well (users "
        "bring it: it is on Hugging Face only).",
    )
    kagentbench_max_per_type: int | None = Field(
        None, ge=1, description="Samples of each type taken from the KAgentBench file, in file "
        "order (null: all).",
    )
    models: list[EvalModelConfig] = Field(
        default_factory=lambda: [EvalModelConfig(label="base", model="embedded"),
                                 EvalModelConfig(label="tuned", model="model@latest",
                                                 optional=True)],
        min_length=1, description="The models compared; the first is the baseline.",
    )
    temperature: float = Field(0.1, ge=0, le=2, description="Sampling temperature.")
    top_p: float = Field(0.75, gt=0, le=1, description="Nucleus sampling.")
    top_k: int = Field(40, ge=1, le=100_000, description="Top-k sampling.")
    max_tokens: int = Field(512, ge=1, le=32_768, description="Longest answer, in tokens.")
    max_prompt_tokens: int = Field(
        3096, ge=64, le=1_000_000, description="Longer prompts are cut in the middle of their "
        "memory (KAgentBench's inference: 3096).",
    )
    parser: Literal["official", "agentune"] = Field(
        "official", description="official: read answers exactly as KAgentBench's script; "
        "agentune: the project's tolerant parsers.",
    )
    quirks: Literal["official", "fixed"] = Field(
        "official", description="official: reproduce the script's reuse of the previous "
        "template's parse for an empty ReACT answer or an unknown key; fixed: do not.",
    )
    tokenizer: Literal["auto", "punkt", "line"] = Field(
        "auto", description="ROUGE tokenisation: auto = NLTK punkt when installed, else one "
        "line per text.",
    )
    success_rouge: float = Field(
        0.5, ge=0, le=1, description="ROUGE-L a final answer needs for end-to-end success."
    )
    current_time: AwareDatetime = Field(
        datetime.fromisoformat("2025-06-02T09:30:00+08:00"), description="The current time "
        "held-out prompts show, with its UTC offset (e.g. 2025-06-02T09:30:00+08:00; prompts show "
        "the wall-clock time); fixed, so a rebuild gives the same prompts and hits the response "
        "cache.",
        json_schema_extra=UTC_OFFSET_PATTERN,
    )
    human_eval: HumanEvalConfig = Field(default_factory=HumanEvalConfig)
    closed_loop: ClosedLoopConfig = Field(default_factory=ClosedLoopConfig)
    bfcl: BfclConfig = Field(default_factory=BfclConfig)
    retrieval: RetrievalEvalConfig = Field(default_factory=RetrievalEvalConfig)

    @model_validator(mode="after")
    def _inputs(self) -> "EvaluateConfig":
        if not (self.heldout or self.kagentbench_file or self.closed_loop.enabled
                or self.bfcl.enabled):
            raise ValueError("nothing to evaluate on: set heldout true, a kagentbench_file, "
                             "closed_loop.enabled or bfcl.enabled true")
        labels = [m.label for m in self.models]
        if len(set(labels)) != len(labels):
            raise ValueError(f"model labels must be distinct: {labels}")
        if len(set(self.benchmark_templates)) != len(self.benchmark_templates):
            raise ValueError(f"benchmark_templates lists an entry twice: "
                             f"{self.benchmark_templates}")
        return self
