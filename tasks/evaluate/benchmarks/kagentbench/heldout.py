"""agentune's own held-out benchmark, in KAgentBench's format, from an ``sft_dataset`` test split.

Every agent row of the test split is a trajectory: the query (first user message), the tools
offered, the tool calls with their results, the final answer. Its steps become samples:

- step ``k`` of a trajectory (the history is its first ``k`` calls) -> a ``plantooluse`` sample
  whose golden is call ``k`` (thought = the assistant text, tool, arguments); a ``reflextion``
  sample instead when call ``k - 1`` returned an error (``{"error": ...}``, the observation
  convention of :mod:`agentune.tasks.tools.observation`), with ``memory_last_task`` = that call;
- the end of a trajectory -> a ``conclusion`` sample whose golden is the final answer;
- general rows (the mixed-in general SFT data) -> ``profile`` samples: one prompt, one reference
  answer, scored by ROUGE-L as KAgentBench's profile dimension is. (KAgentBench's profile
  questions test an agent persona; here they measure how much general ability tuning kept.)

Trajectories of one query that share the history up to a step share that step's sample: their
calls there become alternative goldens, as KAgentBench has several goldens per sample.

Each sample's prompt is rendered under several templates (``prompt_input``): the benchmark
templates asked for (keyed by their KAgentBench names, ``ReACT`` ...), some Meta-Agent templates
never used in training (keyed by template id), and, as written in the dataset, the prompt of the
template the trajectory was synthesised with. ``templates`` records each key's template id,
protocol, source and whether the train split used it (``seen``), so the report can show
generalisation to unseen templates. A concluding sample of a two-stage protocol (KuaiAgent) gets
its concluder's prompt. Prompts name a fixed current time, so rebuilding gives the same file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentune.tasks.agent.formats import agent_format, tool_entries
from agentune.tasks.agent.prompt_templates import (
    BENCHMARKS,
    AgentPromptInputs,
    AgentTemplate,
    benchmark_id,
    benchmark_template,
    concluder_for,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.format import (
    BenchSample,
    SourceLine,
    parse_sample,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.parsing import NONE
from agentune.tasks.evaluate.prompt_templates import PromptTemplate, template_key


class HeldoutInputError(ValueError):
    """An sft_dataset row that cannot become a sample; names the version, row and field."""


@dataclass(frozen=True)
class Call:
    thought: str
    tool_name: str
    tool_args: dict[str, Any]
    observation: str

    @property
    def signature(self) -> str:
        return json.dumps([self.tool_name, self.tool_args], sort_keys=True, ensure_ascii=False)

    @property
    def failed(self) -> bool:
        """The call returned an error observation (``{"error": ...}``)."""
        try:
            value = json.loads(self.observation)
        except ValueError:
            return False
        return isinstance(value, dict) and "error" in value


@dataclass
class Trajectory:
    """One agent row of the test split, read from its ``messages`` and ``steps``."""

    row_id: str
    query_id: str
    goal: str
    lang: str
    tools: list[dict[str, Any]]
    template_id: str | None
    calls: list[Call]
    final_answer: str | None
    plan_prompts: list[str]
    """The row's own step prompts (its template), one per call, as the dataset holds them
    (empty when its steps do not line up with its calls)."""
    conclude_prompt: str | None
    """Its prompt for the final answer: the concluder's, else the planner's finishing step's."""


@dataclass
class HeldoutBenchmark:
    lines: list[dict[str, Any]]
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Rows or templates left out, each with the reason."""

    def samples(self, origin: str = "<heldout>") -> list[BenchSample]:
        """The lines read back through the benchmark validator."""
        return [parse_sample(line, SourceLine(origin, i), with_prediction=False)
                for i, line in enumerate(self.lines, 1)]


# --------------------------------------------------------------------------- reading rows


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise HeldoutInputError(f"{where}: tool-call arguments are not JSON") from None
    if not isinstance(value, dict):
        raise HeldoutInputError(f"{where}: tool-call arguments must be an object")
    return value


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def read_trajectory(row: Mapping[str, Any], origin: str) -> Trajectory:
    """A test-split agent row as a trajectory; raises :class:`HeldoutInputError` naming it."""
    where = f"{origin} row {row.get('id')!r}"
    messages = row.get("messages") or []
    goal = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    if not goal.strip():
        raise HeldoutInputError(f"{where}: field 'messages': no user message with the query")
    calls: list[Call] = []
    results = {m.get("tool_call_id"): _text(m.get("content")) for m in messages
               if m.get("role") == "tool"}
    final_answer = None
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        tool_calls = message.get("tool_calls") or []
        if not tool_calls:
            final_answer = _text(message.get("content"))
            continue
        call = tool_calls[0]
        function = call.get("function") or {}
        if not function.get("name"):
            raise HeldoutInputError(f"{where}: field 'messages[{i}].tool_calls': no tool name")
        calls.append(Call(_text(message.get("content")).strip(), str(function["name"]),
                          _arguments(function.get("arguments"), f"{where} messages[{i}]"),
                          results.get(call.get("id"), "")))
    # Synthesis writes one plan step per call, then the planner's finishing step, then (for a
    # two-stage protocol) the concluder's step.
    steps = sorted(row.get("steps") or [], key=lambda s: s.get("step", 0))
    plan = [str(s.get("prompt", "")) for s in steps if s.get("kind") == "plan"]
    conclude = [str(s.get("prompt", "")) for s in steps if s.get("kind") == "conclude"]
    usable = len(plan) in (len(calls), len(calls) + 1)
    answer_prompts = conclude or plan[len(calls):]
    return Trajectory(
        row_id=str(row["id"]), query_id=str(row.get("query_id") or row["id"]), goal=goal.strip(),
        lang="zh" if row.get("lang") == "zh" else "en", tools=list(row.get("tools") or []),
        template_id=row.get("template_id"), calls=calls, final_answer=final_answer,
        plan_prompts=plan[: len(calls)] if usable else [],
        conclude_prompt=answer_prompts[0] if usable and answer_prompts else None,
    )


# --------------------------------------------------------------------------- samples


def _inputs(traj: Trajectory, calls: Sequence[Call], now: datetime) -> AgentPromptInputs:
    return AgentPromptInputs.for_query(
        traj.goal, traj.tools, current_time=now, lang=traj.lang,
        completed_tasks=[{"thought": c.thought, "tool_name": c.tool_name,
                          "tool_args": c.tool_args, "observation": c.observation}
                         for c in calls])


def _render(template: AgentTemplate, inputs: AgentPromptInputs) -> tuple[str, str]:
    """The prompt and its memory section."""
    return template.render(inputs), template.render_sections(inputs).get("memory", "")


@dataclass
class _Draft:
    """A sample being assembled from the trajectories that share its history."""

    line: dict[str, Any]
    signatures: set[str] = field(default_factory=set)


def _golden_step(call: Call) -> dict[str, Any]:
    return {"thought": call.thought or NONE, "tool_name": call.tool_name,
            "tool_args": call.tool_args}


class _Builder:
    def __init__(self, templates: Sequence[PromptTemplate], own: Mapping[str, PromptTemplate],
                 now: datetime, origin: str) -> None:
        self.templates, self.own, self.now, self.origin = templates, own, now, origin
        self.drafts: dict[tuple[str, str, str], _Draft] = {}

    def add(self, traj: Trajectory) -> None:
        for k, call in enumerate(traj.calls):
            failed_before = k > 0 and traj.calls[k - 1].failed
            sample_type = "reflextion" if failed_before else "plantooluse"
            draft = self._draft(traj, k, sample_type)
            if call.signature not in draft.signatures:
                draft.signatures.add(call.signature)
                draft.line["golden_result_list"].append(_golden_step(call))
            own = self.own.get(traj.template_id or "")
            if own is not None and traj.plan_prompts:
                draft.line["prompt_input"].setdefault(own.key, traj.plan_prompts[k])
                draft.line["templates"].setdefault(own.key, own.record())
        if traj.final_answer:
            draft = self._draft(traj, len(traj.calls), "conclusion")
            if traj.final_answer not in draft.signatures:
                draft.signatures.add(traj.final_answer)
                draft.line["golden_result_list"].append({"golden_result": traj.final_answer})
            own = self.own.get(traj.template_id or "")
            if own is not None and traj.conclude_prompt:
                draft.line["prompt_input"].setdefault(own.key, traj.conclude_prompt)
                draft.line["templates"].setdefault(own.key, own.record())

    def _draft(self, traj: Trajectory, k: int, sample_type: str) -> _Draft:
        history = traj.calls[:k]
        prefix = json.dumps([c.signature for c in history], ensure_ascii=False)
        slot = (traj.query_id, prefix, "answer" if sample_type == "conclusion" else "step")
        if slot in self.drafts:
            return self.drafts[slot]
        suffix = "answer" if sample_type == "conclusion" else f"step{k}"
        inputs = _inputs(traj, history, self.now)
        prompts, memories, records = {}, {}, {}
        for entry in self.templates:
            template = entry.template
            if sample_type == "conclusion":
                template = concluder_for(template.protocol) or template
            prompts[entry.key], memories[entry.key] = _render(template, inputs)
            records[entry.key] = entry.record()
        last = history[-1] if history else None
        line = {
            "id": f"{traj.row_id}#{suffix}", "query": traj.goal, "type": sample_type,
            "golden_result_list": [], "funcs": tool_entries(traj.tools),
            "prompt_input": prompts,
            "memory": next(iter(memories.values()), ""),
            "memory_type": "task",
            "memory_last_task": ({"tool_name": last.tool_name, "tool_args": last.tool_args}
                                 if last else {"tool_name": NONE, "tool_args": {}}),
            "lang": traj.lang, "query_id": traj.query_id, "step": k,
            "templates": records, "memory_sections": memories, "origin": self.origin,
        }
        draft = self.drafts[slot] = _Draft(line)
        return draft


def profile_line(row: Mapping[str, Any], origin: str) -> dict[str, Any] | None:
    """A general row as a profile sample (None when it has no prompt/answer pair)."""
    steps = row.get("steps") or []
    if steps:
        prompt, answer = str(steps[0].get("prompt") or ""), str(steps[0].get("completion") or "")
    else:
        messages = row.get("messages") or []
        prompt = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        answer = next((_text(m.get("content")) for m in reversed(messages)
                       if m.get("role") == "assistant"), "")
    if not prompt.strip() or not answer.strip():
        return None
    return {"id": f"{row['id']}#profile", "query": prompt, "type": "profile",
            "golden_result_list": [{"golden_result": answer}], "funcs": [],
            "prompt_input": {"prompt": prompt}, "memory": "", "memory_type": "conversation",
            "memory_last_task": None, "lang": row.get("lang") or None,
            "query_id": str(row["id"]), "origin": origin}


def _spread(rows: Sequence[Mapping[str, Any]], limit: int | None, seed: int,
            group: str) -> list[Mapping[str, Any]]:
    """Rows of up to ``limit`` groups (all when None), drawn with ``seed``, alternating
    languages so a small benchmark still has both."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get(group) or row["id"]), []).append(row)
    names = sorted(groups)
    random.Random(seed).shuffle(names)
    if limit is not None:
        by_lang: dict[str, list[str]] = {}
        for name in names:
            by_lang.setdefault(str(groups[name][0].get("lang")), []).append(name)
        queues = [by_lang[lang] for lang in sorted(by_lang)]
        picked: list[str] = []
        while len(picked) < limit and any(queues):
            for queue in queues:
                if queue and len(picked) < limit:
                    picked.append(queue.pop(0))
        names = picked
    return [row for name in names for row in groups[name]]


def build_heldout(rows: Iterable[Mapping[str, Any]], *, templates: Sequence[PromptTemplate],
                  template_rows: Sequence[Mapping[str, Any]], now: datetime, seed: int,
                  max_queries: int | None, max_profile: int | None,
                  origin: str) -> HeldoutBenchmark:
    """The benchmark lines from an sft_dataset's rows (only ``split == "test"`` rows are used).

    ``templates`` are rendered for every sample; ``template_rows`` (the ``templates`` artifact)
    tell each row's own template's protocol, so its dataset prompts can join under its id.
    """
    rows = list(rows)
    seen_ids = {str(r.get("template_id")) for r in rows
                if r.get("split") == "train" and r.get("source") == "agent"}
    test = [r for r in rows if r.get("split") == "test"]
    agent_rows = _spread([r for r in test if r.get("source") == "agent"], max_queries, seed,
                         "query_id")
    general = _spread([r for r in test if r.get("source") == "general"], max_profile, seed, "id")
    own = _own_templates(agent_rows, template_rows, seen_ids, templates, origin)
    builder = _Builder(templates, own, now, origin)
    skipped: list[dict[str, str]] = []
    for row in agent_rows:
        traj = read_trajectory(row, origin)
        if not traj.calls and not traj.final_answer:
            skipped.append({"item": f"row {traj.row_id}", "reason": "empty_trajectory",
                            "detail": "no tool call and no final answer"})
            continue
        if traj.calls and not traj.plan_prompts and traj.template_id in own:
            skipped.append({"item": f"row {traj.row_id} prompts", "reason": "steps_unmatched",
                            "detail": "its plan steps do not line up with its tool calls: its "
                            "own template's prompts are left out (rendered ones stay)"})
        builder.add(traj)
    lines = [d.line for d in builder.drafts.values() if d.line["golden_result_list"]]
    for row in general:
        line = profile_line(row, origin)
        if line is None:
            skipped.append({"item": f"row {row['id']}", "reason": "empty_general_row",
                            "detail": "no prompt/answer pair"})
        else:
            lines.append(line)
    return HeldoutBenchmark(lines, skipped)


def _own_templates(rows: Sequence[Mapping[str, Any]], template_rows: Sequence[Mapping[str, Any]],
                   seen_ids: set[str], rendered: Sequence[PromptTemplate],
                   origin: str) -> dict[str, PromptTemplate]:
    """The templates the rows were synthesised with, by id, as they join the samples' prompts;
    a benchmark template already rendered keeps its rendering (same key)."""
    by_id = {str(r["id"]): r for r in template_rows}
    rendered_ids = {p.template.id for p in rendered}
    own: dict[str, PromptTemplate] = {}
    for template_id in sorted({str(r.get("template_id")) for r in rows if r.get("template_id")}):
        if template_id in rendered_ids:
            continue
        name = next((n for n in BENCHMARKS if benchmark_id(n) == template_id), None)
        if name is not None:
            template = benchmark_template(name)
        elif template_id in by_id:
            template = _protocol_only(by_id[template_id])
        else:
            continue
        own[template_id] = PromptTemplate(template_key(template), template,
                                          template_id in seen_ids)
    return own


def _protocol_only(row: Mapping[str, Any]) -> AgentTemplate:
    """A template row as far as the benchmark needs it (its id, protocol, source): its prompts
    come from the dataset, so its text is not rendered."""
    protocol = agent_format(str(row["protocol"])).name
    return AgentTemplate(id=str(row["id"]), protocol=protocol, kind="planner",
                         source=str(row.get("source") or "meta-agent"), text="")
