"""The columns of the artifacts that several stages share: one canonical sample.

A trajectory is OpenAI-style ``messages`` (system/user/assistant with ``tool_calls``/tool results)
plus the ``tools`` offered (JSON schemas) plus metadata; each agent step is also kept as a
prompt/completion pair in the template's own text format (``steps``), because MAT teaches the
model to follow many templates. Columns that hold heterogeneous JSON are datasets ``Json()``
features, so Parquet does not merge differing tool-argument dicts into one null-padded struct.
"""

from __future__ import annotations

from typing import Protocol

from datasets import Features, Json, List, Value

TASK_TYPES = ("tool_selection", "multi_step_planning", "timing_decision", "tool_retrieval")
TEMPLATE_SOURCES = ("benchmark", "meta-agent")
SPLITS = ("train", "val", "test")

# The `queries` and `tools` tables of collect_queries, read by the stages after it. ``parameters`` is a
# JSON column: each tool's schema has its own keys, which Arrow would merge into one padded struct.
QUERY_FEATURES = Features(
    {
        "id": Value("string"),
        "text": Value("string"),
        "lang": Value("string"),
        "set_id": Value("string"),
        "source": Value("string"),
        "parent_ids": List(Value("string")),
        "scenario": Value("string"),
        "tool_ids": List(Value("string")),
        "pii_placeholders": List(Value("string")),
        "likely_tool_ids": List(Value("string")),
        "tool_hints": List(Value("string")),
    }
)
TOOL_FEATURES = Features(
    {
        "id": Value("string"),
        "name": Value("string"),
        "description": Value("string"),
        "parameters": Json(),
    }
)

# One agent step in the template's own format: {"step": int, "kind": "plan" | "conclude",
# "prompt": str, "completion": str}. The KAgentInstruct shape: each step an independent
# instruction/input/output.
STEP = Json()

# build_templates: judged prompt pairs, a row per pair and order.
JUDGEMENT_FEATURES = Features(
    {
        "id": Value("string"),
        "instance_id": Value("string"),
        "template_id": Value("string"),
        "set_id": Value("string"),
        "query_id": Value("string"),
        "query": Value("string"),
        "benchmark_template": Value("string"),
        "order": Value("string"),  # benchmark_first | candidate_first
        "benchmark_answer": Value("string"),
        "candidate_answer": Value("string"),
        "score_benchmark": Value("float64"),  # this order's scores
        "score_candidate": Value("float64"),
        "rationale_benchmark": Value("string"),
        "rationale_candidate": Value("string"),
        "delta": Value("float64"),  # this order: candidate - benchmark
        "instance_delta": Value("float64"),  # mean over both orders: what epsilon is applied to
        "kept": Value("bool"),  # the instance is kept (delta > epsilon and its template kept)
        # The candidate's prompt as the teacher saw it, its format and language: a kept
        # instance is training data (synthesize turns it into a one-step trajectory).
        "candidate_prompt": Value("string"),
        "protocol": Value("string"),
        "lang": Value("string"),
    }
)

# A scenario with its executed ground truth (build_scenarios), read by synthesis and evaluation.
# ``initial_state`` is what the scenario sets, ``start_state`` the whole state it starts from
# (defaults included), ``expected_state`` where its ground truth ends.
SCENARIO_FEATURES = Features(
    {
        "id": Value("string"),
        "environment": Value("string"),
        "lang": Value("string"),
        "kind": Value("string"),
        "request": Value("string"),
        "initial_state": Json(),
        "ground_truth": Json(),
        "facts": List(Value("string")),
        "hidden": Value("string"),
        "family": Value("string"),
        "source": Value("string"),
        "blueprint": Json(),  # a generated scenario's recipe, phrasing, world seed; else null
        "split": Value("string"),  # train | heldout | reserved | natural (written, never trained)
        "now": Value("string"),  # the episode clock, ISO 8601 with its UTC offset
        "start_state": Json(),
        "expected_state": Json(),
        "ground_truth_results": Json(),
        "verifier_version": Value("string"),
    }
)

# Every synthesis attempt of a scenario, passed or not, with the verifier's judgement: what
# preference pairs are made of.
ATTEMPT_FEATURES = Features(
    {
        "id": Value("string"),
        "combination_id": Value("string"),
        "scenario_id": Value("string"),
        "kind": Value("string"),
        "lang": Value("string"),
        "template_id": Value("string"),
        "protocol": Value("string"),
        "attempt": Value("int32"),
        "guided": Value("bool"),  # steered by the ground truth (guided_attempts, guided_by)
        "passed": Value("bool"),
        "reason": Value("string"),  # the loop's or the verifier's, null when it passed
        "reward": Value("float64"),
        "components": Json(),
        "penalties": Json(),
        "verifier_reasons": List(Value("string")),
        "verifier_version": Value("string"),
        "messages": List(Json()),
        "tools": List(Json()),
        "steps": List(STEP),
    }
)

TRAJECTORY_FEATURES = Features(
    {
        "id": Value("string"),
        "query_id": Value("string"),
        "set_id": Value("string"),
        "query": Value("string"),
        "lang": Value("string"),
        "template_id": Value("string"),
        "template_source": Value("string"),  # one of TEMPLATE_SOURCES
        "protocol": Value("string"),  # the output format its parser reads (react, autogpt ...)
        "task_type": Value("string"),  # one of TASK_TYPES
        "messages": List(Json()),
        "tools": List(Json()),
        "steps": List(STEP),
        "n_steps": Value("int32"),
        "n_tool_calls": Value("int32"),
        "final_answer": Value("string"),
        "judge_score": Value("float64"),  # null when no judge scored it
        # The scenario it acts out, when verified against one (null for a plain query), and the
        # verifier's reward; `source`: synthesized, or judged_instance (a kept Meta-Agent instance)
        "scenario_id": Value("string"),
        "kind": Value("string"),
        "verified": Value("bool"),
        "reward": Value("float64"),
        "attempt": Value("int32"),
        "guided": Value("bool"),  # steered by the ground truth (see ATTEMPT_FEATURES)
        "source": Value("string"),
        "teacher_model": Value("string"),
        "prompt_tokens": Value("int64"),
        "completion_tokens": Value("int64"),
    }
)

# The training set: agent rows (from trajectories) and general rows (general SFT data, with
# ``steps`` holding its single prompt/completion pair) in one table with a ``split`` column.
SFT_FEATURES = Features(
    {
        "id": Value("string"),
        "split": Value("string"),  # one of SPLITS
        "source": Value("string"),  # "agent" | "general"
        "query_id": Value("string"),  # null for general rows
        "set_id": Value("string"),  # null for general rows
        "template_id": Value("string"),
        "template_source": Value("string"),
        "task_type": Value("string"),  # "general" for general rows
        "lang": Value("string"),
        "messages": List(Json()),
        "tools": List(Json()),
        "steps": List(STEP),
        "cluster_id": Value("string"),  # near-duplicate cluster the row represents
        "n_tokens": Value("int64"),  # under the student's chat template
        "kind": Value("string"),  # the scenario kind (irrelevant for a flip); null: none
        # none | shuffled | flip | general_tools | masked, and the id of the trajectory (or
        # general row) a derived row was made from (null for `none`)
        "derivation": Value("string"),
        "derived_from": Value("string"),
    }
)

# build_preferences' pairs, read by DPO training: the conversation up to one decision (``prompt``,
# with the ``tools`` offered), the two decisions taken there (``chosen``: the side whose whole
# trajectory the reward ranks higher), both trajectories' rewards and verifier components.
PREFERENCE_FEATURES = Features(
    {
        "id": Value("string"),
        "split": Value("string"),  # train | val
        "source": Value("string"),  # attempts | student
        "scenario_id": Value("string"),
        "kind": Value("string"),  # the scenario's kind
        "lang": Value("string"),
        "decision": Value("int32"),  # index in the conversation of the message the two differ at
        "prompt": List(Json()),
        "tools": List(Json()),
        "chosen": List(Json()),  # one assistant message
        "rejected": List(Json()),
        "chosen_id": Value("string"),  # the attempt / rollout it comes from
        "rejected_id": Value("string"),
        "chosen_reward": Value("float64"),
        "rejected_reward": Value("float64"),
        "margin": Value("float64"),
        "chosen_components": Json(),  # the verifier's components and the reward terms
        "rejected_components": Json(),
    }
)


class QueryView(Protocol):
    """What grouping into query sets and tool selection read of a query (collect_queries'
    ``QueryRecord`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def lang(self) -> str: ...
    @property
    def scenario(self) -> str | None: ...
    @property
    def tool_hints(self) -> tuple[str, ...] | None:
        """Tools the query needs: None when unknown, () when it needs none."""
