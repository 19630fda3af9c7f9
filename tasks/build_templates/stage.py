"""build_templates as plain functions: query sets in; Meta-Agent candidates written, filtered,
judged against the benchmark templates; ``templates``, ``judgements`` and ``rejects`` rows and a
run summary out.

The flow (``flows/build_templates.py``) looks the outputs up by the input versions and
:func:`template_params`, reads the inputs (:func:`read_stored_inputs`), runs the three steps as
Prefect tasks and publishes what :func:`assemble_collection` returns;
:func:`build_template_collection` does the same in one call for tests and scripts. Nothing here
knows about Prefect, and only those two functions about the store. Every candidate that is not
kept, and every judged instance that is dropped, becomes a :class:`Reject`.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

import pandas as pd
from datasets import Features, Json, Value

from agentune.config import RunConfig
from agentune.config.build_templates import READS, BuildTemplatesConfig
from agentune.tasks.agent.formats import tool_entries
from agentune.tasks.agent.prompt_templates import (
    BENCHMARKS,
    AgentTemplate,
    benchmark_id,
    benchmark_template,
    section_sources,
)
from agentune.tasks.build_templates import STAGE
from agentune.tasks.build_templates.judging import (
    InstanceJudgement,
    JudgedQuery,
    JudgingFailure,
    JudgingSettings,
    OrderJudgement,
    TemplateScore,
    judge_pair,
    keep_instance,
    prompt_pair,
    score_template,
)
from agentune.tasks.build_templates.meta_agent import (
    CandidateBrief,
    CandidateDraft,
    MetaAgentError,
    QuerySetView,
    StructuralFilter,
    meta_request,
    plan_candidates,
    read_meta_answer,
    set_views,
)
from agentune.tasks.common.rejects import KEEP, Reject, reason_counts
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef
from agentune.tasks.store.inputs import version_params

TEMPLATE_FEATURES = Features(
    {
        "id": Value("string"),
        "source": Value("string"),  # benchmark | meta-agent
        "kind": Value("string"),  # planner | concluder
        "set_id": Value("string"),  # the query set that seeded a candidate; null for benchmarks
        "name": Value("string"),
        "lang": Value("string"),  # language of its fixed text; null: follows the query
        "protocol": Value("string"),  # output format its answers are parsed with
        "text": Value("string"),  # the Jinja2 source ("" when none could be made)
        "sections": Json(),  # section -> text as written (Meta-Agent) or its Jinja source
        "style": Json(),  # the Meta-Agent brief (tone, rules, emphasis ...); null for benchmarks
        "score": Value("float64"),  # mean judge score over its instances; null if never judged
        "n_instances": Value("int32"),
        "n_kept_instances": Value("int32"),
        "kept": Value("bool"),
        "reserved": Value("bool"),  # kept, but set aside for evaluation: never trained on
        "reason": Value("string"),  # why it was dropped; null when kept
        "detail": Value("string"),
    }
)
class TemplateInputError(ValueError):
    """Input tables that cannot be used; the message names the version, row and field."""


# --------------------------------------------------------------------------- inputs


QUERY_COLUMNS = ("id", "text", "lang", "set_id", "scenario", "tool_ids")
TOOL_COLUMNS = ("name", "description", "parameters")


def read_inputs(
    queries: pd.DataFrame, tools: pd.DataFrame, *, queries_name: str = "queries",
    tools_name: str = "tools",
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Query rows and tools by name, checked; errors name the table version, row and field."""
    for frame, columns, where in ((queries, QUERY_COLUMNS, queries_name),
                                  (tools, TOOL_COLUMNS, tools_name)):
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise TemplateInputError(f"{where}: missing column(s) {', '.join(missing)}")
    tool_rows: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(tools.to_dict("records")):
        if not isinstance(row["name"], str) or not row["name"]:
            raise TemplateInputError(
                f"{tools_name}: row {i}: field name: must be a non-empty string")
        if not isinstance(row["parameters"], dict):
            raise TemplateInputError(
                f"{tools_name}: row {i}: field parameters: must be a JSON object")
        tool_rows[row["name"]] = {"name": row["name"], "description": str(row["description"] or ""),
                                  "parameters": row["parameters"]}
    rows = []
    for i, row in enumerate(queries.to_dict("records")):
        for column in ("id", "text", "lang", "set_id"):
            if not isinstance(row[column], str) or not row[column]:
                raise TemplateInputError(
                    f"{queries_name}: row {i}: field {column}: must be a non-empty string")
        tool_ids = list(row["tool_ids"]) if row["tool_ids"] is not None else []
        unknown = [t for t in tool_ids if t not in tool_rows]
        if unknown:
            raise TemplateInputError(
                f"{queries_name}: row {i} (query {row['id']}): field tool_ids: "
                f"{', '.join(unknown)} not in {tools_name}")
        rows.append({**row, "tool_ids": tool_ids})
    if not rows:
        raise TemplateInputError(f"{queries_name}: no queries")
    return rows, tool_rows


def read_stored_inputs(store: ArtifactStore, queries: VersionRef, tools: VersionRef
                       ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """:func:`read_inputs` of a ``queries`` and a ``tools`` version."""
    return read_inputs(store.read(queries), store.read(tools), queries_name=str(queries),
                       tools_name=str(tools))


def template_params(config: RunConfig) -> dict[str, Any]:
    """What decides the outputs besides the input versions: what the stage reads (``READS``)."""
    return version_params(config, READS)


def select_sets(views: Sequence[QuerySetView], max_sets: int | None,
                seed: int = 0) -> list[QuerySetView]:
    """Every set, or ``max_sets`` of them drawn with the seed, alternating between languages."""
    if max_sets is None or max_sets >= len(views):
        return list(views)
    by_lang: dict[str, list[QuerySetView]] = defaultdict(list)
    for view in views:
        by_lang[view.lang].append(view)
    rng = random.Random(f"{seed}:sets")
    pools = [rng.sample(group, len(group)) for _, group in sorted(by_lang.items())]
    chosen: list[QuerySetView] = []
    while len(chosen) < max_sets:
        for pool in pools:
            if pool and len(chosen) < max_sets:
                chosen.append(pool.pop(0))
    return chosen


# --------------------------------------------------------------------------- steps


@dataclass
class WrittenCandidates:
    briefs: list[CandidateBrief]
    drafts: list[CandidateDraft] = field(default_factory=list)
    failures: dict[str, Reject] = field(default_factory=dict)
    """Candidate id -> why no draft came back (teacher_failed, truncated, not_json)."""


async def write_candidates(gateway: ChatGateway, briefs: Sequence[CandidateBrief],
                           cfg: BuildTemplatesConfig, *, seed: int = 0) -> WrittenCandidates:
    """Ask the teacher for every candidate at once (the gateway bounds concurrency)."""

    async def one(brief: CandidateBrief) -> CandidateDraft | Reject:
        request = meta_request(brief, protocols=cfg.protocols, max_chars=cfg.section_max_chars,
                               temperature=cfg.meta_temperature, seed=seed + brief.index)
        try:
            result = await gateway.chat("teacher", request, stage=STAGE)
            return read_meta_answer(brief, result)
        except GatewayError as exc:
            return Reject(STAGE, "teacher_failed", brief.candidate_id, str(exc))
        except MetaAgentError as exc:
            return Reject(STAGE, exc.reason, brief.candidate_id, exc.detail)

    out = WrittenCandidates(list(briefs))
    for brief, answer in zip(briefs, await asyncio.gather(*(one(b) for b in briefs)), strict=True):
        if isinstance(answer, Reject):
            out.failures[brief.candidate_id] = answer
        else:
            out.drafts.append(answer)
    return out


@dataclass
class FilteredCandidates:
    kept: list[tuple[CandidateDraft, AgentTemplate]] = field(default_factory=list)
    dropped: dict[str, tuple[CandidateDraft, Reject]] = field(default_factory=dict)


def filter_candidates(drafts: Sequence[CandidateDraft],
                      cfg: BuildTemplatesConfig) -> FilteredCandidates:
    """The structural filter, in candidate order; the benchmark templates count as kept, so a
    candidate copying one is a near duplicate."""
    benchmarks = [benchmark_template(name) for name in BENCHMARKS]
    check = StructuralFilter(benchmarks, near_dup_threshold=cfg.near_dup_threshold,
                             allowed_protocols=cfg.protocols)
    out = FilteredCandidates()
    for draft in drafts:
        outcome = check.check(draft)
        if outcome.verdict is KEEP:
            assert outcome.template is not None
            out.kept.append((draft, outcome.template))
        else:
            out.dropped[draft.brief.candidate_id] = (
                draft, Reject(STAGE, outcome.verdict[1], draft.brief.candidate_id, outcome.detail))
    return out


def judged_queries(rows: Sequence[Mapping[str, Any]], tools: Mapping[str, Mapping[str, Any]],
                   set_id: str, n: int, seed: int = 0) -> list[JudgedQuery]:
    """N queries of a set, drawn with the seed (the same ones for every candidate of the set,
    so the benchmark's answers are shared and paid for once)."""
    members = [r for r in rows if r["set_id"] == set_id]
    rng = random.Random(f"{seed}:{set_id}:judge")
    picked = sorted(rng.sample(range(len(members)), min(n, len(members))))
    return [JudgedQuery(query_id=members[i]["id"], text=members[i]["text"],
                        lang=members[i]["lang"],
                        tools=tuple(tool_entries([tools[t] for t in members[i]["tool_ids"]])))
            for i in picked]


async def judge_candidates(
    gateway: ChatGateway, kept: Sequence[tuple[CandidateDraft, AgentTemplate]],
    rows: Sequence[Mapping[str, Any]], tools: Mapping[str, Mapping[str, Any]],
    cfg: BuildTemplatesConfig, *, seed: int = 0,
) -> list[InstanceJudgement | JudgingFailure]:
    """Every prompt pair (candidate x benchmark template x judged query), judged concurrently."""
    settings = JudgingSettings(answer_max_tokens=cfg.answer_max_tokens,
                               answer_temperature=cfg.answer_temperature,
                               rationale_max_chars=cfg.rationale_max_chars, seed=seed)
    pairs = []
    for draft, template in kept:
        for query in judged_queries(rows, tools, draft.brief.set_id, cfg.queries_per_candidate,
                                    seed):
            for name in cfg.benchmark_templates:
                pairs.append(prompt_pair(template, name, benchmark_template(name), query,
                                         current_time=cfg.current_time))
    return list(await asyncio.gather(*(judge_pair(gateway, p, settings) for p in pairs)))


# --------------------------------------------------------------------------- assembling


@dataclass
class TemplateCollection:
    """Everything build_templates publishes, as rows."""

    template_rows: list[dict[str, Any]]
    judgement_rows: list[dict[str, Any]]
    rejects: list[Reject]
    summary: list[dict[str, Any]]
    deltas: list[float]
    """Instance deltas (candidate minus benchmark, both orders averaged), for the histogram."""

    def reject_rows(self) -> list[dict[str, str]]:
        return [r.to_row() for r in self.rejects]

    def template_table(self) -> list[dict[str, Any]]:
        """Kept and dropped templates, for the Prefect table artifact."""
        columns = ("id", "source", "set_id", "protocol", "lang", "score", "n_instances",
                   "n_kept_instances", "kept", "reserved", "reason")
        return [{c: row[c] for c in columns} for row in self.template_rows]


def _candidate_row(brief: CandidateBrief, *, draft: CandidateDraft | None,
                   template: AgentTemplate | None, score: float | None, n_instances: int,
                   n_kept: int, kept: bool, reason: str | None, detail: str) -> dict[str, Any]:
    return {
        "id": brief.candidate_id, "source": "meta-agent", "kind": "planner",
        "set_id": brief.set_id, "name": draft.name if draft else "", "lang": brief.lang,
        "protocol": (draft.protocol if draft and draft.protocol else brief.protocol),
        "text": template.text if template else "",
        "sections": dict(draft.sections) if draft else {}, "style": brief.style(),
        "score": score, "n_instances": n_instances, "n_kept_instances": n_kept, "kept": kept,
        "reserved": False, "reason": reason, "detail": detail,
    }


def _candidate_rows(written: WrittenCandidates, filtered: FilteredCandidates,
                    verdicts: Mapping[str, TemplateScore],
                    cfg: BuildTemplatesConfig) -> tuple[list[dict[str, Any]], list[Reject]]:
    """A row per requested candidate, kept or dropped with the reason, and the rejects."""
    kept_filtered = {t.id: (d, t) for d, t in filtered.kept}
    rows: list[dict[str, Any]] = []
    rejects: list[Reject] = []
    for brief in written.briefs:
        cid = brief.candidate_id
        if cid in written.failures or cid in filtered.dropped:
            draft, reject = ((None, written.failures[cid]) if cid in written.failures
                             else filtered.dropped[cid])
            rows.append(_candidate_row(brief, draft=draft, template=None, score=None,
                                       n_instances=0, n_kept=0, kept=False, reason=reject.reason,
                                       detail=reject.detail))
            rejects.append(reject)
            continue
        draft, template = kept_filtered[cid]
        v = verdicts[cid]
        detail = {
            None: "",
            "below_threshold": f"score {v.score or 0:.2f} < threshold {cfg.threshold:g}",
            "no_instance_above_epsilon": "no instance beat its benchmark by more than "
                                         f"epsilon {cfg.epsilon:g}",
            "no_judged_instance": "every judging of its instances failed",
        }[v.reason]
        rows.append(_candidate_row(brief, draft=draft, template=template, score=v.score,
                                   n_instances=v.n_instances, n_kept=v.n_kept_instances,
                                   kept=v.kept, reason=v.reason, detail=detail))
        if v.reason is not None:
            rejects.append(Reject(STAGE, v.reason, cid, detail))
    return rows, rejects


@dataclass
class _JudgedInstances:
    """The judged prompt instances laid out: a row per judging order, and what was dropped."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)
    bench_scores: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    reasons: Counter[str] = field(default_factory=Counter)
    rejects: list[Reject] = field(default_factory=list)
    n_kept: int = 0


def _judgement_row(inst: InstanceJudgement, order: OrderJudgement, set_id: str,
                   kept: bool) -> dict[str, Any]:
    return {
        "id": f"{inst.pair.instance_id}-{order.order}",
        "instance_id": inst.pair.instance_id, "template_id": inst.pair.candidate.id,
        "set_id": set_id, "query_id": inst.pair.query.query_id, "query": inst.pair.query.text,
        "benchmark_template": inst.pair.benchmark_name, "order": order.order,
        "benchmark_answer": inst.benchmark_answer, "candidate_answer": inst.candidate_answer,
        "score_benchmark": order.benchmark.score, "score_candidate": order.candidate.score,
        "rationale_benchmark": order.benchmark.rationale,
        "rationale_candidate": order.candidate.rationale,
        "delta": order.delta, "instance_delta": inst.delta, "kept": kept,
        "candidate_prompt": inst.pair.candidate_prompt, "protocol": inst.pair.candidate.protocol,
        "lang": inst.pair.query.lang,
    }


def _judged_instances(by_candidate: Mapping[str, list[InstanceJudgement]],
                      failures: Sequence[JudgingFailure], verdicts: Mapping[str, TemplateScore],
                      set_of: Mapping[str, str], epsilon: float) -> _JudgedInstances:
    """An instance is kept when it beats its benchmark by more than epsilon and its template is
    kept (a dropped template takes its instances with it)."""
    out = _JudgedInstances()
    for cid, instances in by_candidate.items():
        template_kept = verdicts[cid].kept
        for inst in instances:
            out.deltas.append(inst.delta)
            out.bench_scores[inst.pair.benchmark_name].append(inst.score_benchmark)
            above = keep_instance(inst.delta, epsilon)
            kept = above and template_kept
            out.n_kept += kept
            if not above:
                out.reasons["below_epsilon"] += 1
                out.rejects.append(Reject(
                    STAGE, "instance_below_epsilon", inst.pair.instance_id,
                    f"{cid} vs {inst.pair.benchmark_name} on {inst.pair.query.query_id}: "
                    f"delta {inst.delta:+.2f} <= epsilon {epsilon:g}"))
            elif not template_kept:
                out.reasons["template_dropped"] += 1
                out.rejects.append(Reject(
                    STAGE, "instance_of_dropped_template", inst.pair.instance_id,
                    f"{cid} was dropped ({verdicts[cid].reason})"))
            out.rows += [_judgement_row(inst, o, set_of[cid], kept) for o in inst.orders]
    for failure in failures:
        out.reasons[failure.reason] += 1
        out.rejects.append(Reject(STAGE, failure.reason, failure.pair.instance_id,
                                  f"{failure.pair.candidate.id} vs "
                                  f"{failure.pair.benchmark_name}: {failure.detail}"))
    return out


def _benchmark_rows(bench_scores: Mapping[str, list[float]]) -> list[dict[str, Any]]:
    """The benchmark templates, always kept, with their mean score as judged beside candidates."""
    rows = []
    for name, spec in BENCHMARKS.items():
        template = benchmark_template(name)
        scores = bench_scores.get(name, [])
        rows.append({
            "id": benchmark_id(name), "source": "benchmark", "kind": spec.kind, "set_id": None,
            "name": name, "lang": spec.lang, "protocol": spec.protocol, "text": template.text,
            "sections": section_sources(template.text), "style": None,
            "score": fmean(scores) if scores else None, "n_instances": len(scores),
            "n_kept_instances": None, "kept": True, "reserved": False, "reason": None,
            "detail": "",
        })
    return rows


def reserve_for_evaluation(rows: Sequence[dict[str, Any]], count: int, seed: int) -> list[str]:
    """Mark ``count`` kept Meta-Agent planners ``reserved``: synthesis never uses them, so the
    evaluation's "unseen templates" group holds templates no training row was written in. A
    seeded draw that takes one template per protocol before a second of any. Returns their ids
    (fewer than ``count`` when fewer were kept)."""
    for row in rows:
        row.setdefault("reserved", False)
    pool = [r for r in rows if r["kept"] and r["source"] == "meta-agent"
            and r["kind"] == "planner"]
    pool.sort(key=lambda r: hashlib.sha256(f"{seed}:reserve:{r['id']}".encode()).hexdigest())
    nth: Counter[str] = Counter()
    ranked = []
    for order, row in enumerate(pool):
        nth[row["protocol"]] += 1
        ranked.append((nth[row["protocol"]], order, row))
    ordered = [row for *_, row in sorted(ranked, key=lambda x: x[:2])]
    for row in ordered[:count]:
        row["reserved"] = True
    return [r["id"] for r in ordered[:count]]


def assemble_collection(written: WrittenCandidates, filtered: FilteredCandidates,
                        judged: Sequence[InstanceJudgement | JudgingFailure],
                        cfg: BuildTemplatesConfig, *, sets_used: int, reserve: int = 0,
                        seed: int = 0) -> TemplateCollection:
    """Apply the epsilon and threshold rules, set ``reserve`` kept templates aside for
    evaluation, and lay out the rows and the summary."""
    by_candidate: dict[str, list[InstanceJudgement]] = defaultdict(list)
    failures = [item for item in judged if isinstance(item, JudgingFailure)]
    for item in judged:
        if not isinstance(item, JudgingFailure):
            by_candidate[item.pair.candidate.id].append(item)
    verdicts = {
        template.id: score_template(
            [j.score_candidate for j in by_candidate[template.id]],
            [j.delta for j in by_candidate[template.id]],
            epsilon=cfg.epsilon, threshold=cfg.threshold)
        for _, template in filtered.kept
    }
    rows, candidate_rejects = _candidate_rows(written, filtered, verdicts, cfg)
    set_of = {t.id: d.brief.set_id for d, t in filtered.kept}
    instances = _judged_instances(by_candidate, failures, verdicts, set_of, cfg.epsilon)
    benchmark_rows = _benchmark_rows(instances.bench_scores)
    n_kept = sum(1 for r in rows if r["kept"])
    reserved = reserve_for_evaluation(rows, reserve, seed)
    summary = _summary(sets_used=sets_used, written=written, filtered=filtered,
                       candidate_rejects=candidate_rejects, n_instances=len(instances.deltas),
                       n_instances_kept=instances.n_kept, instance_reasons=instances.reasons,
                       n_kept=n_kept, n_benchmarks=len(benchmark_rows))
    summary.append({"metric": "kept, reserved for evaluation (never trained on)",
                    "value": len(reserved)})
    return TemplateCollection(benchmark_rows + rows, instances.rows,
                              candidate_rejects + instances.rejects, summary, instances.deltas)


def _summary(*, sets_used: int, written: WrittenCandidates, filtered: FilteredCandidates,
             candidate_rejects: Sequence[Reject], n_instances: int, n_instances_kept: int,
             instance_reasons: Counter[str], n_kept: int,
             n_benchmarks: int) -> list[dict[str, Any]]:
    """The run summary as (metric, value) rows: made, kept, dropped by reason."""
    rows: list[dict[str, Any]] = [
        {"metric": "query sets used", "value": sets_used},
        {"metric": "candidates requested", "value": len(written.briefs)},
        {"metric": "candidates made", "value": len(written.drafts)},
        {"metric": "candidates passing the structural filter", "value": len(filtered.kept)},
        {"metric": "instances judged (both orders)", "value": n_instances},
        {"metric": "instances kept", "value": n_instances_kept},
    ]
    rows += [{"metric": f"instances dropped: {reason}", "value": n}
             for reason, n in sorted(instance_reasons.items())]
    rows += [{"metric": "candidates kept", "value": n_kept}]
    rows += [{"metric": f"candidates dropped: {reason}", "value": n}
             for reason, n in reason_counts(candidate_rejects).items()]
    rows += [{"metric": "benchmark templates", "value": n_benchmarks},
             {"metric": "templates out (kept)", "value": n_kept + n_benchmarks}]
    return rows


async def build_template_collection(cfg: BuildTemplatesConfig, queries: pd.DataFrame,
                                    tools: pd.DataFrame, *, gateway: ChatGateway,
                                    seed: int = 0, reserve: int = 0) -> TemplateCollection:
    """The whole stage short of publishing; ``reserve`` kept templates set aside for
    evaluation."""
    rows, tool_rows = read_inputs(queries, tools, queries_name=cfg.queries, tools_name=cfg.tools)
    views = select_sets(set_views(rows, tool_rows), cfg.max_sets, seed)
    briefs = plan_candidates(views, per_set=cfg.candidates_per_set, protocols=cfg.protocols,
                             languages=cfg.template_languages, seed=seed)
    written = await write_candidates(gateway, briefs, cfg, seed=seed)
    filtered = filter_candidates(written.drafts, cfg)
    judged = await judge_candidates(gateway, filtered.kept, rows, tool_rows, cfg, seed=seed)
    return assemble_collection(written, filtered, judged, cfg, sets_used=len(views),
                               reserve=reserve, seed=seed)
