"""The tool-use metrics of the agent-tuning plan (selection F1, plan success, efficiency, timing), each reported as mean, std and count.

They read every answer with the project's own parsers (:mod:`agentune.tasks.agent.formats`, the
ones synthesis and RL use), which tell a call from a finish from an unreadable answer. A step's
*decision* is ``call`` (a tool other than the format's finish command), ``finish`` (the finish
command, a final answer, or plain text where the format answers in plain text) or ``invalid``
(nothing the format defines, or ToolLLaMA's give-up). A golden step's decision is ``finish``
when its tool is ``"None"`` or a finish command, else ``call``; a concluding sample's is
``finish``. Golden answers are alternatives: matching any one is enough.

- **timing_precision** (per step): the decision is one the goldens allow, i.e. the model calls a
  tool when one is needed and finishes when none is (an ``invalid`` answer is never right).
  Concluding answers count where the format can express a call (not KuaiAgent's concluder).
- **plan_success_rate** (per planning step): the step calls a golden tool with at least every
  argument that golden passes, or finishes where a golden finishes.
- **tool_selection_f1** (per query and template, over queries with a planning step): the set of
  tools the model calls over the query's steps against the set the goldens call, with the seed's
  rule: both empty 1.0, tools called where none is needed 0.5, else F1 of precision and recall.
  Per step the golden is the alternative that makes the model's choice, else the first.
- **step_efficiency** (per query and template): golden tool steps / (golden tool steps + wasted
  steps), a wasted step being a call of a tool no golden calls there, an unreadable answer, or a
  call where the answer was due; 1.0 when nothing was needed and nothing wasted.
- **end_to_end_success** (per query and template): every planning step succeeds, and every
  concluding answer finishes and its final answer (as the format reads it: AutoGPT's ``finish``
  response, ToolLLaMA's ``final_answer`` ...) reaches ``success_rouge`` ROUGE-L against the
  goldens.

On KAgentBench each sample is its own query (steps are not linked), so the per-query metrics are
per sample; agentune's held-out benchmark links the steps of a query by ``query_id``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from agentune.tasks.agent.formats import agent_format
from agentune.tasks.evaluate.benchmarks.kagentbench.format import PLANNING_TYPES, Golden
from agentune.tasks.evaluate.benchmarks.kagentbench.parsing import NONE, conclusion_text
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import (
    ItemScore,
    KAgentBenchResult,
    answer_score,
)

Decision = Literal["call", "finish", "invalid"]
TOOL_METRICS = ("tool_selection_f1", "plan_success_rate", "step_efficiency", "timing_precision",
                "end_to_end_success")
FINISH_TOOLS = frozenset({"finish", "Finish", "task_complete"})


@dataclass(frozen=True)
class MetricValue:
    """One observation of one metric, with what the report groups it by."""

    metric: str
    value: float
    template_group: str | None
    lang: str


@dataclass(frozen=True)
class _Step:
    item: ItemScore
    decision: Decision | None  # None: the answer cannot express a decision (concluder text)
    tool: str | None
    args: Mapping[str, object]


def _decide(item: ItemScore) -> _Step:
    if item.protocol is None:
        return _Step(item, None, None, {})
    fmt = agent_format(item.protocol)
    if item.sample.type == "conclusion" and fmt.two_stage:
        return _Step(item, None, None, {})  # the concluder writes plain text
    step = fmt.parse(item.answer, item.sample.funcs)
    if step.gave_up:
        return _Step(item, "invalid", None, {})
    if step.calls_tool and step.tool_name not in FINISH_TOOLS:
        return _Step(item, "call", step.tool_name, step.tool_args)
    if step.calls_tool or step.final_answer is not None:
        return _Step(item, "finish", None, {})
    return _Step(item, "invalid", None, {})


def _is_finish(golden: Golden) -> bool:
    return golden.tool_name == NONE or golden.tool_name in FINISH_TOOLS


def _golden_tools(goldens: Sequence[Golden]) -> set[str]:
    return {str(g.tool_name) for g in goldens if not _is_finish(g)}


def _allows_finish(item: ItemScore) -> bool:
    if item.sample.type not in PLANNING_TYPES:
        return True
    return any(_is_finish(g) for g in item.sample.goldens)


def _timing_right(step: _Step) -> bool:
    if step.decision == "call":
        return step.item.sample.type in PLANNING_TYPES and \
            bool(_golden_tools(step.item.sample.goldens))
    if step.decision == "finish":
        return _allows_finish(step.item)
    return False


def _plan_success(step: _Step) -> bool:
    if step.decision == "finish":
        return _allows_finish(step.item)
    if step.decision != "call":
        return False
    return any(g.tool_name == step.tool and set(g.tool_args) <= set(step.args)
               for g in step.item.sample.goldens if not _is_finish(g))


def _chosen_golden(step: _Step) -> Golden | None:
    """The alternative the step is measured against: the one that makes the model's choice,
    else the first."""
    goldens = step.item.sample.goldens
    for golden in goldens:
        if step.decision == "call" and golden.tool_name == step.tool:
            return golden
        if step.decision == "finish" and _is_finish(golden):
            return golden
    return goldens[0] if goldens else None


def selection_f1(predicted: set[str], target: set[str]) -> float:
    """The seed's tool-selection score (``_eval_tool_accuracy``)."""
    if not target:
        return 1.0 if not predicted else 0.5
    correct = len(predicted & target)
    precision = correct / len(predicted) if predicted else 0.0
    recall = correct / len(target)
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def _answer_quality(step: _Step, mode: str) -> float:
    """ROUGE-L of the final answer the format reads (not the official post-processing)."""
    item = step.item
    if item.protocol is None:
        return item.scores.get("concluding", 0.0)
    text = conclusion_text(item.protocol, item.answer, "agentune")
    return answer_score(item.sample.goldens, text, mode) or 0.0


def _query_metrics(steps: Sequence[_Step], success_rouge: float, mode: str) -> dict[str, float]:
    """tool_selection_f1, step_efficiency and end_to_end_success of one query's steps."""
    predicted: set[str] = set()
    target: set[str] = set()
    needed = wasted = 0
    success = True
    for step in steps:
        if step.item.sample.type in PLANNING_TYPES:
            golden_tools = _golden_tools(step.item.sample.goldens)
            needed += bool(golden_tools)
            if step.decision == "call":
                predicted.add(str(step.tool))
                wasted += step.tool not in golden_tools
            wasted += step.decision == "invalid"
            chosen = _chosen_golden(step)
            if chosen is not None and not _is_finish(chosen):
                target.add(str(chosen.tool_name))
            success = success and _plan_success(step)
        else:
            wasted += step.decision in ("call", "invalid")
            success = (success and step.decision in ("finish", None)
                       and _answer_quality(step, mode) >= success_rouge)
    efficiency = needed / (needed + wasted) if needed + wasted else 1.0
    return {"tool_selection_f1": selection_f1(predicted, target), "step_efficiency": efficiency,
            "end_to_end_success": float(success)}


def tool_use_values(result: KAgentBenchResult, success_rouge: float = 0.5) -> list[MetricValue]:
    """Every observation of the five metrics over a scored benchmark (profile samples take no
    part)."""
    values: list[MetricValue] = []
    queries: dict[tuple[str, str], list[_Step]] = {}
    for item in result.items:
        if item.sample.type == "profile":
            continue
        step = _decide(item)
        queries.setdefault((item.group, item.key), []).append(step)
        if step.decision is not None:
            values.append(MetricValue("timing_precision", float(_timing_right(step)),
                                      item.template_group, item.lang))
        if item.sample.type in PLANNING_TYPES:
            values.append(MetricValue("plan_success_rate", float(_plan_success(step)),
                                      item.template_group, item.lang))
    for steps in queries.values():
        first = steps[0].item
        planned = any(step.item.sample.type in PLANNING_TYPES for step in steps)
        for metric, value in _query_metrics(steps, success_rouge, result.tokenizer).items():
            if metric == "tool_selection_f1" and not planned:
                continue  # nothing to select where only an answer was asked for
            values.append(MetricValue(metric, value, first.template_group, first.lang))
    return values


@dataclass(frozen=True)
class MetricSummary:
    mean: float | None
    std: float | None
    count: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "std": self.std, "count": self.count}


def summarise(values: Iterable[MetricValue],
              keep: Callable[[MetricValue], bool] | None = None) -> dict[str, MetricSummary]:
    """Mean, population std (as numpy's default) and count of each metric."""
    grouped: dict[str, list[float]] = {m: [] for m in TOOL_METRICS}
    for value in values:
        if keep is None or keep(value):
            grouped[value.metric].append(value.value)
    return {m: MetricSummary(statistics.fmean(v) if v else None,
                             statistics.pstdev(v) if v else None, len(v))
            for m, v in grouped.items()}
