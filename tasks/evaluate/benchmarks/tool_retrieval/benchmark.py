"""The tool-retrieval benchmark of the evaluate stage: the requests of the held-out (and
reserved) scenarios asked of BM25, the latest ``retriever`` (dense) and their fusion (hybrid), on
the catalog as written and grown with distractors; recall@k and MRR per condition in the report.
It runs no model of the comparison."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.config import RunConfig
from agentune.tasks.environments.catalog import configured_environments, fingerprint
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.evaluate.benchmark import Benchmark, BenchmarkRun, Log, Section
from agentune.tasks.evaluate.models import ResolvedModel
from agentune.tasks.store.artifact_store import ArtifactStore, StoreError, VersionRef
from agentune.tasks.tool_retrieval.distractors import with_distractors
from agentune.tasks.tool_retrieval.encoder import ENCODER_FOLDER, load_encoder
from agentune.tasks.tool_retrieval.evaluation import (
    MISS_K,
    RetrievalScores,
    retrieval_markdown,
    score_retrieval,
)
from agentune.tasks.tool_retrieval.pairs import scenario_cases

METRICS = ("recall@1", "recall@5", "recall@10", "mrr")


@dataclass
class RetrievalEvaluation:
    scores: RetrievalScores
    parents: list[VersionRef]
    params: dict[str, Any]
    skipped: list[str] = field(default_factory=list)

    def report_rows(self) -> list[dict[str, Any]]:
        """The rows in the report's long format (suite ``retrieval:CATALOG``)."""
        return [{"suite": f"retrieval:{r['catalog']}", "model": r["retriever"],
                 "view": "condition", "group": r["condition"], "metric": metric,
                 "value": r[metric], "std": None, "n": r["n"], "partial": False}
                for r in self.scores.rows for metric in METRICS if metric in r]

    def markdown(self) -> str:
        text = retrieval_markdown(self.scores, title="Tool retrieval (held-out scenarios)")
        misses = [m for m in self.scores.misses if m["retriever"] == "hybrid"
                  or len({r["retriever"] for r in self.scores.rows}) == 1]
        if misses:
            text += f"\n\nMisses (needed tools not all in the top {MISS_K}), " \
                    f"{misses[0]['retriever']}:\n\n" + "\n".join(
                        f"- {m['catalog']} / {m['condition']}: {m['case']} needs "
                        f"{', '.join(m['needed'])}; got {', '.join(m[f'top{MISS_K}'])}"
                        for m in misses)
        return text


def evaluate_retrieval(config: RunConfig, store: ArtifactStore) -> RetrievalEvaluation | None:
    """None when switched off; BM25 alone (a note says so) when no retriever is published."""
    cfg = config.evaluate.retrieval
    if not cfg.enabled:
        return None
    try:
        scenarios_ref = store.resolve(cfg.scenarios)
    except StoreError:
        return RetrievalEvaluation(RetrievalScores(), [], {}, [
            "tool retrieval: no scenarios version (run build_scenarios first)"])
    records = read_scenario_rows(list(store.read(scenarios_ref).to_dict("records")),
                                 str(scenarios_ref))
    cases = [c for c in scenario_cases(records) if c.split in cfg.splits]
    catalog = configured_environments(config.environments)
    tools = catalog.tools()
    parents, skipped, encoder = [scenarios_ref], [], None
    try:
        retriever_ref = store.resolve(cfg.retriever)
        encoder = load_encoder(store.file(retriever_ref, ENCODER_FOLDER))
        parents.append(retriever_ref)
    except StoreError:  # the message lists the store's artifacts: not part of the report
        skipped.append(f"tool retrieval: BM25 only, no {cfg.retriever} published "
                       "(run train_retriever)")
    scores = score_retrieval(cases, tools, encoder, catalog="as written")
    for size in cfg.catalog_sizes:
        grown = score_retrieval(cases, with_distractors(tools, size, seed=config.seed), encoder,
                                catalog=f"+distractors ({size})")
        scores.rows += grown.rows
        scores.misses += grown.misses
    if any(c.split == "natural" for c in cases):  # generated scenarios: a line per split
        for split in cfg.splits:
            part = score_retrieval([c for c in cases if c.split == split], tools, encoder,
                                   catalog=f"as written, {split}", conditions=("all",))
            scores.rows += part.rows
            scores.misses += part.misses
    params = {"settings": cfg.model_dump(mode="json"), "seed": config.seed,
              "environments": fingerprint(catalog), "cases": sorted(c.id for c in cases)}
    return RetrievalEvaluation(scores, parents, params, skipped)


class ToolRetrieval(Benchmark[None, RetrievalEvaluation | None]):
    name = "tool retrieval"

    def prepare(self, config: RunConfig, store: ArtifactStore) -> None:
        """Nothing: no model of the comparison is run."""

    async def run(self, config: RunConfig, store: ArtifactStore, plan: None,
                  models: Sequence[ResolvedModel], log: Log
                  ) -> BenchmarkRun[RetrievalEvaluation | None]:
        evaluation = await asyncio.to_thread(evaluate_retrieval, config, store)
        return BenchmarkRun(self, evaluation, notes=evaluation.skipped if evaluation else [])

    def section(self, config: RunConfig, result: RetrievalEvaluation | None,
                notes: Sequence[str]) -> Section:
        if result is None:
            return Section([], "", stats={"retrieval": None}, params={"retrieval": None})
        scored = bool(result.scores.rows)
        return Section(result.report_rows(), result.markdown() if scored else "",
                       stats={"retrieval": {"rows": result.scores.rows,
                                            "misses": result.scores.misses}},
                       params={"retrieval": result.params}, parents=result.parents)
