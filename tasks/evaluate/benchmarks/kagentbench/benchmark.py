"""The KAgentBench-format suites as a benchmark: agentune's held-out benchmark and/or a
KAgentBench file (``suites.py``), answered by every model one step at a time, scored exactly as
KAgentBench scores plus the tool-use metrics, with the human review (the sheet out, a filled one
back in); the report's comparison tables and ``comparison.png``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentune.config import RunConfig
from agentune.config.evaluate import EvaluateConfig
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.benchmark import (
    Benchmark,
    BenchmarkRun,
    Log,
    Section,
    progress_log,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.format import BenchSample
from agentune.tasks.evaluate.benchmarks.kagentbench.human_eval import (
    ReviewItem,
    read_reviews,
    review_items,
    review_sheet,
    usable_rates,
    write_review_sheet,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.report import (
    ModelScores,
    comparison,
    plot_comparison,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import ScoringOptions, score_samples
from agentune.tasks.evaluate.benchmarks.kagentbench.suites import (
    PREDICTIONS_FILE,
    Answers,
    Suite,
    answer_suites,
    prepare_suites,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.tool_metrics import tool_use_values
from agentune.tasks.evaluate.models import ResolvedModel
from agentune.tasks.rollouts.driver import Progress
from agentune.tasks.store.artifact_store import ArtifactStore, file_fingerprint


@dataclass
class SuiteAnswers:
    """The suites and every model's answers to them."""

    suites: list[Suite]
    answers: list[Answers]

    def review_items(self) -> list[ReviewItem]:
        by_suite: dict[str, dict[str, list[BenchSample]]] = {}
        for entry in self.answers:
            by_suite.setdefault(entry.suite, {})[entry.model] = entry.samples
        return review_items(by_suite)


def scoring_options(config: EvaluateConfig) -> ScoringOptions:
    return ScoringOptions(parser=config.parser, quirks=config.quirks, tokenizer=config.tokenizer)


def score_answers(config: EvaluateConfig, suites: Sequence[Suite],
                  answers: Sequence[Answers]) -> list[ModelScores]:
    golden = {s.name: s.samples for s in suites}
    scores = []
    for entry in answers:
        result = score_samples(golden[entry.suite], entry.samples, scoring_options(config),
                               f"{entry.manifest.ref}/{PREDICTIONS_FILE}")
        scores.append(ModelScores(entry.suite, entry.model, result,
                                  tool_use_values(result, config.success_rouge),
                                  entry.failures))
    return scores


def _answer_progress(log: Log, label: str) -> Callable[[str], Progress]:
    def for_suite(suite: str) -> Progress:
        return progress_log(log, f"{label} on {suite}: ", "{total} prompts to answer",
                            "{done}/{total} prompts answered ({rate:.2f}/s)")

    return for_suite


class KAgentBenchSuites(Benchmark[list[Suite], SuiteAnswers]):
    name = "kagentbench suites"

    def prepare(self, config: RunConfig, store: ArtifactStore) -> list[Suite]:
        return prepare_suites(config, store)

    async def run(self, config: RunConfig, store: ArtifactStore, plan: list[Suite],
                  models: Sequence[ResolvedModel], log: Log) -> BenchmarkRun[SuiteAnswers]:
        answers: list[Answers] = []
        # One model at a time: each loads its weights (local) once and batches its prompts.
        for model in models:
            answers += await answer_suites(config, store, plan, model,
                                           _answer_progress(log, model.label))
        versions = {
            **{f"eval_benchmark:{s.name}": s for s in plan},
            **{f"eval_predictions:{a.suite}:{a.model}": a for a in answers}}
        usage = [row for a in answers if not a.reused for row in a.manifest.stats["usage"]]
        return BenchmarkRun(self, SuiteAnswers(plan, answers), versions, usage=usage)

    def section(self, config: RunConfig, result: SuiteAnswers, notes: Sequence[str]) -> Section:
        cfg = config.evaluate
        human: dict[str, dict[str, float | int | None]] = {}
        if cfg.human_eval.filled_sheet:
            human = usable_rates(read_reviews(cfg.human_eval.filled_sheet,
                                              result.review_items()))
        report = comparison(score_answers(cfg, result.suites, result.answers), human=human,
                            skipped=notes, title=STAGE)
        params = {
            "scoring": scoring_options(cfg).__dict__, "success_rouge": cfg.success_rouge,
            "labels": {str(a.manifest.ref): a.model for a in result.answers},
            "human_sample_size": cfg.human_eval.sample_size, "seed": config.seed,
            "filled_sheet_sha256": (file_fingerprint(cfg.human_eval.filled_sheet)
                                    if cfg.human_eval.filled_sheet else None)}
        return Section(report.rows, report.markdown, report.summary,
                       stats={"summary": report.summary, "human": human}, params=params,
                       parents=[s.ref for s in result.suites]
                       + [a.manifest.ref for a in result.answers])

    def figures(self, config: RunConfig, result: SuiteAnswers, section: Section,
                folder: Path) -> dict[str, Path]:
        files = {}
        if result.answers:
            files["comparison.png"] = plot_comparison(section.summary, folder / "comparison.png",
                                                      STAGE)
        sample_size = config.evaluate.human_eval.sample_size
        if sample_size:
            sheet = review_sheet(result.review_items(), sample_size, config.seed)
            written = write_review_sheet(sheet, folder / "review")
            files |= {f"review/{name}": path for name, path in written.items()}
        return files
