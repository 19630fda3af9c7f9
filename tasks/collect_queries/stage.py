"""collect_queries as plain functions: inputs -> cleaned, deduplicated queries -> similar-query
sets -> teacher expansion of thin sets -> candidate tool subsets -> output rows and a summary.

The stage flow checks the store for a version of :func:`collection_params`, calls these (or
:func:`build_query_collection` for the whole of it) and publishes the rows; nothing here knows
about Prefect or the store. Every drop becomes a :class:`Reject`.
Seeds are admitted in input order and expansions in set order, so the output depends only on
the inputs, the config and the seed (and the teacher's answers, which the gateway caches).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from agentune.config import RunConfig
from agentune.config.collect_queries import READS, CollectQueriesConfig
from agentune.tasks.agent.request_judge import read_request_score, request_judge_request
from agentune.tasks.collect_queries import STAGE
from agentune.tasks.collect_queries.expansion import (
    ExpansionError,
    ParsedExpansion,
    build_expansion_request,
    request_expansion,
)
from agentune.tasks.collect_queries.query_sets import QuerySet, group_query_sets
from agentune.tasks.collect_queries.seed_queries import (
    SeedQuery,
    check_tool_hints,
    load_seed_queries,
)
from agentune.tasks.collect_queries.tool_subsets import ToolSelector, select_candidates
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.near_dedup import NearDupIndex
from agentune.tasks.common.rejects import KEEP, Reject, reason_counts
from agentune.tasks.common.text_cleaning import CleaningRules, placeholder
from agentune.tasks.common.text_quality import debris
from agentune.tasks.environments.catalog import fingerprint, load_environments
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.store.inputs import version_params
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval
from agentune.tasks.tools.catalog import ToolSpec


@dataclass
class QueryRecord:
    """One kept query, as it goes into the ``queries`` table."""

    id: str
    text: str
    lang: str
    scenario: str | None
    source: Literal["seed", "expanded"]
    parent_ids: tuple[str, ...] = ()
    tool_hints: tuple[str, ...] | None = None
    pii_placeholders: tuple[str, ...] = ()
    set_id: str = ""
    tool_ids: tuple[str, ...] = ()
    likely_tool_ids: tuple[str, ...] = ()

    def to_row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "lang": self.lang,
            "set_id": self.set_id,
            "source": self.source,
            "parent_ids": list(self.parent_ids),
            "scenario": self.scenario,
            "tool_ids": list(self.tool_ids),
            "pii_placeholders": list(self.pii_placeholders),
            "likely_tool_ids": list(self.likely_tool_ids),
            "tool_hints": None if self.tool_hints is None else list(self.tool_hints),
        }


def _snippet(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class QueryAdmission:
    """Cleaning, exact dedup and near dedup with memory: every query admitted so far (seed or
    expanded) is what later ones are compared with."""

    def __init__(self, cfg: CollectQueriesConfig) -> None:
        self.rules = CleaningRules(
            unicode_form=cfg.unicode_form,
            min_chars=cfg.min_chars,
            max_chars=cfg.max_chars,
            languages=frozenset(cfg.languages),
            pii_action=cfg.pii_action,
        )
        self.near = NearDupIndex(
            cfg.near_dup_threshold,
            num_perm=cfg.near_dup_num_perm,
            ngram=cfg.near_dup_ngram,
            min_recall=cfg.near_dup_min_recall,
        )
        self._keys: dict[str, str] = {}

    def admit(
        self, item_id: str, raw_text: str, *, expect_lang: str | None = None, **fields: Any
    ) -> QueryRecord | Reject:
        """The query's record (cleaned text, language, PII placeholders and ``fields``) if it is
        kept (and remembered), else the reject row.

        ``expect_lang`` (for expansions) drops a text in another language than its set's.
        Reject details quote the scrubbed text only, so no PII reaches the rejects table.
        """
        verdict, detail = self.rules.check_raw(raw_text)
        if verdict is not KEEP:  # the raw text may hold PII: the detail quotes none of it
            return Reject(STAGE, verdict[1], item_id, detail)
        cleaned = self.rules.clean(raw_text)
        verdict, detail = self.rules.check(cleaned)
        if verdict is not KEEP:
            return Reject(STAGE, verdict[1], item_id, f"{detail}: {_snippet(cleaned.text)}")
        if expect_lang is not None and cleaned.lang != expect_lang:
            return Reject(
                STAGE,
                "language_mismatch",
                item_id,
                f"{cleaned.lang!r}, the set is {expect_lang!r}: {_snippet(cleaned.text)}",
            )
        if cleaned.key in self._keys:
            return Reject(
                STAGE,
                "exact_duplicate",
                item_id,
                f"same as {self._keys[cleaned.key]}: {_snippet(cleaned.text)}",
            )
        match = self.near.add_if_new(item_id, cleaned.text)
        if match is not None:
            return Reject(
                STAGE,
                "near_duplicate",
                item_id,
                f"jaccard {match.similarity:.2f} with {match.key}: {_snippet(cleaned.text)}",
            )
        self._keys[cleaned.key] = item_id
        return QueryRecord(id=item_id, text=cleaned.text, lang=cleaned.lang,
                           pii_placeholders=tuple(placeholder(k) for k in cleaned.pii), **fields)


def collection_params(config: RunConfig) -> dict[str, Any]:
    """What decides the outputs: what the stage reads (``READS``), the catalog as the
    environments' code and data, where the tools' schemas come from."""
    catalog = fingerprint(load_environments(config.environments.catalog))
    return version_params(config, READS, {"environments.catalog": catalog})


def load_inputs(cfg: CollectQueriesConfig, catalog: str | Path
                ) -> tuple[list[SeedQuery], list[ToolSpec]]:
    """Seed queries and the tool catalog (its tools and those its environments define, less the
    reserved environments'), validated; hints must name catalog tools."""
    tools = load_environments(catalog).training_tools()
    seeds = load_seed_queries(
        cfg.seed_queries,
        text_column=cfg.text_column,
        scenario_column=cfg.scenario_column,
        tools_column=cfg.tools_column,
        id_column=cfg.id_column,
        split=cfg.split,
    )
    check_tool_hints(seeds, [t.name for t in tools], tools_column=cfg.tools_column or "tools")
    return seeds, tools


def clean_seed_queries(
    seeds: Sequence[SeedQuery], admission: QueryAdmission
) -> tuple[list[QueryRecord], list[Reject]]:
    records, rejects = [], []
    for seed in seeds:
        admitted = admission.admit(seed.id, seed.text, scenario=seed.scenario, source="seed",
                                   tool_hints=seed.tool_hints)
        if isinstance(admitted, Reject):
            rejects.append(admitted)
        else:
            records.append(admitted)
    return records, rejects


def assign_sets(records: Sequence[QueryRecord], sets: Sequence[QuerySet]) -> None:
    """Write each record's set id (every record must be in exactly one set)."""
    owner = {qid: s.set_id for s in sets for qid in s.member_ids}
    for r in records:
        r.set_id = owner[r.id]


# --------------------------------------------------------------------------- expansion


@dataclass(frozen=True)
class ExpansionJob:
    """One teacher request: ``n`` new queries for a thin set."""

    set_id: str
    scenario: str | None
    lang: str
    examples: tuple[str, ...]
    parent_ids: tuple[str, ...]
    n: int
    avoid: tuple[str, ...] = ()
    round: int = 0

    @property
    def item_id(self) -> str:
        return f"{self.set_id}#round{self.round}"


def _majority_lang(langs: Sequence[str]) -> str:
    counts = Counter(langs)
    best = max(counts.values())
    return next(lang for lang in langs if counts[lang] == best)


def plan_expansions(
    sets: Sequence[QuerySet],
    records: dict[str, QueryRecord],
    *,
    set_size: int,
    budget: int,
    round: int = 0,
) -> list[ExpansionJob]:
    """Jobs for the sets still short of ``set_size``, in set order, asking for at most
    ``budget`` queries in all. Seed members are the examples and parents; queries expanded in
    earlier rounds are listed to avoid."""
    jobs = []
    for s in sets:
        short = s.shortfall(set_size)
        if short <= 0 or budget <= 0:
            continue
        members = [records[i] for i in s.member_ids]
        seeds = [m for m in members if m.source == "seed"] or members
        n = min(short, budget)
        budget -= n
        jobs.append(
            ExpansionJob(
                set_id=s.set_id,
                scenario=s.scenario,
                lang=s.lang or _majority_lang([m.lang for m in seeds]),
                examples=tuple(m.text for m in seeds),
                parent_ids=tuple(m.id for m in seeds),
                n=n,
                avoid=tuple(m.text for m in members if m.source == "expanded"),
                round=round,
            )
        )
    return jobs


def expanded_id(set_id: str, text: str) -> str:
    return "x-" + hashlib.sha1(f"{set_id}\n{text}".encode()).hexdigest()[:12]


def admit_expansion(
    job: ExpansionJob,
    answer: ParsedExpansion | str,
    admission: QueryAdmission,
) -> tuple[list[QueryRecord], list[Reject]]:
    """Turn one teacher answer (or the error text of a failed request) into records and rejects.

    New queries pass the same cleaning and dedup as seeds, against everything admitted before,
    and must be in the set's language.
    """
    if isinstance(answer, str):
        return [], [Reject(STAGE, "expansion_failed", job.item_id, answer)]
    rejects = [Reject(STAGE, "expansion_invalid_item", job.item_id, p) for p in answer.problems]
    records: list[QueryRecord] = []
    for i, text in enumerate(answer.texts):
        item_id = expanded_id(job.set_id, text)
        if i >= job.n:
            rejects.append(
                Reject(STAGE, "expansion_surplus", item_id, f"asked for {job.n}: {_snippet(text)}")
            )
            continue
        verdict = debris(text)  # the teacher's debris, not a user's request (the language is
        if verdict is not KEEP:  # checked with the cleaning, against the set's)
            rejects.append(Reject(STAGE, f"expansion_{verdict[1]}", item_id, _snippet(text)))
            continue
        admitted = admission.admit(item_id, text, expect_lang=job.lang, scenario=job.scenario,
                                   source="expanded", parent_ids=job.parent_ids,
                                   set_id=job.set_id)
        if isinstance(admitted, Reject):
            rejects.append(admitted)
        else:
            records.append(admitted)
    return records, rejects


async def run_expansion_job(
    gateway: ChatGateway, job: ExpansionJob, cfg: CollectQueriesConfig, seed: int
) -> ParsedExpansion | str:
    """The teacher's parsed answer, or an error text when it failed for good (budget
    exhaustion is not caught: it stops the run)."""
    try:
        request = build_expansion_request(
            job.examples,
            scenario=job.scenario,
            lang=job.lang,
            n=job.n,
            max_chars=min(cfg.expansion_max_chars, cfg.max_chars),
            avoid=job.avoid,
            temperature=cfg.expansion_temperature,
            seed=seed + job.round,
        )
        return await request_expansion(gateway, request, stage=STAGE)
    except (ExpansionError, GatewayError) as exc:
        return f"{type(exc).__name__}: {exc}"


async def judge_expansions(gateway: ChatGateway, job: ExpansionJob,
                           records: Sequence[QueryRecord], cfg: CollectQueriesConfig,
                           seed: int) -> tuple[list[QueryRecord], list[Reject]]:
    """With a judge threshold: each new query scored against its set's examples; those below
    (or unscored) are dropped as ``expansion_judged_low``."""
    context = f"scenario {job.scenario or 'general'}; real requests: " + " | ".join(job.examples)
    results = await asyncio.gather(*(
        gateway.chat("judge", request_judge_request(r.text, context, seed=seed), stage=STAGE)
        for r in records), return_exceptions=True)
    kept: list[QueryRecord] = []
    rejects: list[Reject] = []
    for record, result in zip(records, results, strict=True):
        if isinstance(result, BaseException) and not isinstance(result, GatewayError):
            raise result
        score = None if isinstance(result, BaseException) else read_request_score(result)
        assert cfg.expansion_min_judge_score is not None
        if score is None or score < cfg.expansion_min_judge_score:
            rejects.append(Reject(STAGE, "expansion_judged_low", record.id,
                                  f"judge score {score}: {_snippet(record.text)}"))
        else:
            kept.append(record)
    return kept, rejects


@dataclass
class ExpansionOutcome:
    records: list[QueryRecord] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    sets: list[QuerySet] = field(default_factory=list)
    requested: int = 0
    requests: int = 0


async def expand_query_sets(
    gateway: ChatGateway,
    sets: Sequence[QuerySet],
    records: Sequence[QueryRecord],
    admission: QueryAdmission,
    cfg: CollectQueriesConfig,
    *,
    seed: int = 0,
) -> ExpansionOutcome:
    """Top up thin sets, in up to ``expansion_rounds`` rounds, adding at most
    ``expansion_max_new`` queries. Requests of a round run concurrently (the gateway bounds
    them); answers are admitted in set order."""
    out = ExpansionOutcome(sets=list(sets))
    by_id = {r.id: r for r in records}
    budget = cfg.expansion_max_new
    for round_no in range(cfg.expansion_rounds):
        jobs = plan_expansions(
            out.sets, by_id, set_size=cfg.set_size, budget=budget, round=round_no
        )
        if not jobs:
            break
        answers = await asyncio.gather(*(run_expansion_job(gateway, j, cfg, seed) for j in jobs))
        added: dict[str, list[str]] = {}
        for job, answer in zip(jobs, answers, strict=True):
            out.requests += 1
            out.requested += job.n
            new, rejects = admit_expansion(job, answer, admission)
            if cfg.expansion_min_judge_score is not None:
                new, judged_low = await judge_expansions(gateway, job, new, cfg, seed)
                rejects += judged_low
            out.rejects.extend(rejects)
            out.records.extend(new)
            by_id.update((r.id, r) for r in new)
            added[job.set_id] = [r.id for r in new]
            budget -= len(new)
        out.sets = [
            replace(s, member_ids=s.member_ids + tuple(added.get(s.set_id, ()))) for s in out.sets
        ]
    return out


# --------------------------------------------------------------------------- tools and output


def assign_tool_subsets(
    records: Sequence[QueryRecord],
    tools: Sequence[ToolSpec],
    cfg: CollectQueriesConfig,
    *,
    seed: int = 0,
    selector: ToolSelector = select_candidates,
    retrieval: CandidateRetrieval = CandidateRetrieval(),
) -> None:
    """Write each record's candidate tool subset and likely tools."""
    choices = selector(records, tools, rules=cfg, seed=seed, retrieval=retrieval)
    for r in records:
        r.tool_ids = choices[r.id].tool_ids
        r.likely_tool_ids = choices[r.id].likely_tool_ids


def summary_rows(
    *,
    seeds_in: int,
    seed_rejects: Sequence[Reject],
    expansion: ExpansionOutcome,
    set_size: int,
    tools: int,
) -> list[dict[str, Any]]:
    """The run summary as (metric, value) rows for a table artifact: counts in, kept, dropped
    by reason (seeds and expansions apart), expanded, sets."""
    seeds_kept = seeds_in - len(seed_rejects)
    rows: list[dict[str, Any]] = [
        {"metric": "seed queries in", "value": seeds_in},
        {"metric": "seed queries kept", "value": seeds_kept},
    ]
    rows += [
        {"metric": f"seeds dropped: {reason}", "value": n}
        for reason, n in reason_counts(seed_rejects).items()
    ]
    rows += [
        {"metric": "expansion requests", "value": expansion.requests},
        {"metric": "expanded queries asked for", "value": expansion.requested},
        {"metric": "expanded queries kept", "value": len(expansion.records)},
    ]
    rows += [
        {"metric": f"expansions dropped: {reason}", "value": n}
        for reason, n in reason_counts(expansion.rejects).items()
    ]
    rows += [
        {"metric": "query sets", "value": len(expansion.sets)},
        {
            "metric": f"sets with fewer than {set_size}",
            "value": sum(s.shortfall(set_size) > 0 for s in expansion.sets),
        },
        {"metric": "queries out", "value": seeds_kept + len(expansion.records)},
        {"metric": "tools in catalog", "value": tools},
    ]
    return rows


@dataclass
class QueryCollection:
    """Everything collect_queries publishes, as rows."""

    queries: list[QueryRecord]
    tools: list[ToolSpec]
    rejects: list[Reject]
    sets: list[QuerySet]
    summary: list[dict[str, Any]]

    def query_rows(self) -> list[dict[str, Any]]:
        return [q.to_row() for q in self.queries]

    def tool_rows(self) -> list[dict[str, Any]]:
        return [t.to_row() for t in self.tools]

    def reject_rows(self) -> list[dict[str, str]]:
        return [r.to_row() for r in self.rejects]


async def build_query_collection(
    cfg: CollectQueriesConfig, catalog: str | Path, *, seed: int = 0,
    gateway: ChatGateway | None = None,
    selector: ToolSelector = select_candidates,
    retrieval: CandidateRetrieval = CandidateRetrieval(),
) -> QueryCollection:
    """The whole stage short of publishing. Without a gateway (or with ``expand`` off) thin
    sets stay thin. ``catalog``: the tool catalog file (``environments.catalog``)."""
    seeds, tools = load_inputs(cfg, catalog)
    admission = QueryAdmission(cfg)
    records, rejects = clean_seed_queries(seeds, admission)
    if not records:
        # An empty `queries` version would only fail a later stage, far from the cause.
        counts = ", ".join(f"{reason}: {n}" for reason, n in reason_counts(rejects).items())
        raise InputError(cfg.seed_queries, None, None,
                         f"no usable query: all {len(seeds)} rows were rejected ({counts}); "
                         f"first: {rejects[0].item_id}: {rejects[0].detail}")
    sets = group_query_sets(records, size=cfg.set_size, seed=seed, by_language=cfg.sets_by_language)
    assign_sets(records, sets)
    expansion = ExpansionOutcome(sets=list(sets))
    if gateway is not None and cfg.expand and cfg.expansion_max_new > 0:
        expansion = await expand_query_sets(gateway, sets, records, admission, cfg, seed=seed)
    by_id = {r.id: r for r in [*records, *expansion.records]}
    ordered = [by_id[qid] for s in expansion.sets for qid in s.member_ids]
    assign_tool_subsets(ordered, tools, cfg, seed=seed, selector=selector, retrieval=retrieval)
    all_rejects = [*rejects, *expansion.rejects]
    return QueryCollection(
        queries=ordered,
        tools=tools,
        rejects=all_rejects,
        sets=expansion.sets,
        summary=summary_rows(
            seeds_in=len(seeds),
            seed_rejects=rejects,
            expansion=expansion,
            set_size=cfg.set_size,
            tools=len(tools),
        ),
    )
