"""One model's BFCL run: the seeded subset, its answers, ``bfcl evaluate``, published as
``eval_bfcl`` (one row per entry: correct or not and BFCL's reason; the result and score files in
``__files__/``), reused when the same model, subset and settings were run."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, Json, Value

from agentune.config import RunConfig
from agentune.config.evaluate import BFCL_READS
from agentune.config.llm import RoleConfig
from agentune.tasks.evaluate.benchmarks.bfcl.generate import (
    BfclAnswerer,
    answer_entries,
    sample_ids,
)
from agentune.tasks.evaluate.benchmarks.bfcl.scoring import (
    bfcl_model_name,
    read_scores,
    run_bfcl_evaluate,
    write_results,
)
from agentune.tasks.evaluate.benchmarks.bfcl.worker import (
    BFCL_VERSION,
    BfclUnavailable,
    WorkerSession,
    run_worker,
)
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest, VersionRef
from agentune.tasks.store.inputs import version_params

BFCL_ARTIFACT = "eval_bfcl"
BFCL_STAGE = "evaluate:bfcl"
BFCL_FEATURES = Features({
    "model": Value("string"), "category": Value("string"), "id": Value("string"),
    "correct": Value("bool"), "result": Json(), "error": Value("string"),
    "bfcl_error": Json(), "steps": Value("int32"),
})


@dataclass(frozen=True)
class BfclSuite:
    """The entries every model answers (the same seeded subset) and BFCL's result folders."""

    mode: str
    entries: list[dict[str, Any]]
    folders: dict[str, str]

    @property
    def ids(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for entry in self.entries:
            out.setdefault(entry["category"], []).append(entry["id"])
        return out


def bfcl_suite(config: RunConfig, python: Path) -> BfclSuite:
    """The seeded subset of every configured category, as the model is to be asked."""
    cfg = config.evaluate.bfcl
    with tempfile.TemporaryDirectory(prefix="agentune-bfcl-") as tmp:
        root = Path(tmp)
        listed = json.loads(run_worker(python, root, ["entries"], stdin={
            "ids": {c: None for c in cfg.categories}, "mode": cfg.mode}))
        seed = config.seed if cfg.subset_seed is None else cfg.subset_seed
        chosen = {c: sample_ids(listed[c]["ids"], cfg.category_caps.get(c, cfg.max_per_category),
                                seed, c) for c in cfg.categories}
        picked = json.loads(run_worker(python, root, ["entries"],
                                       stdin={"ids": chosen, "mode": cfg.mode}))
    entries = [e for c in cfg.categories for e in picked[c]["entries"]]
    return BfclSuite(cfg.mode, entries, {c: picked[c]["folder"] for c in cfg.categories})


@dataclass
class BfclRun:
    model: str
    rows: list[dict[str, Any]]
    manifest: Manifest
    reused: bool

    @property
    def categories(self) -> list[dict[str, Any]]:
        return list(self.manifest.stats.get("categories") or [])

    @property
    def summary(self) -> dict[str, str]:
        return dict(self.manifest.stats.get("bfcl_summary") or {})


def bfcl_params(config: RunConfig, identity: Mapping[str, Any], suite: BfclSuite
                ) -> dict[str, Any]:
    """What BFCL reads (``BFCL_READS``), bfcl-eval's version, the model and the entries."""
    return {**version_params(config, BFCL_READS), "model": dict(identity),
            "bfcl_eval": BFCL_VERSION, "ids": suite.ids}


async def run_bfcl_model(config: RunConfig, store: ArtifactStore, *, label: str,
                         role: RoleConfig, identity: Mapping[str, Any],
                         parent: VersionRef | None, suite: BfclSuite, python: Path,
                         on_progress: Callable[[int, int], Awaitable[None]] | None = None
                         ) -> BfclRun:
    """Every entry of the suite answered by one model, scored by ``bfcl evaluate``."""
    cfg = config.evaluate.bfcl
    params = bfcl_params(config, identity, suite)
    parents = [parent] if parent else []
    found = store.find(BFCL_ARTIFACT, parents=parents, params=params)
    if found is not None:
        rows = [{**r, "model": label} for r in Dataset(store.read_arrow(found.ref))]
        return BfclRun(label, rows, found, True)
    llm = config.llm.with_student(role)
    name = bfcl_model_name(label)
    # Greedy decoding ignores the seed: leaving it out of the requests lets the runs of every
    # seed share the cached answers of a model they all evaluate (the base).
    seed = config.seed if cfg.temperature else None
    with tempfile.TemporaryDirectory(prefix="agentune-bfcl-") as tmp:
        root = Path(tmp)
        async with LLMGateway(llm) as gateway, WorkerSession(python, root / "worker") as session:
            answerer = BfclAnswerer(gateway, cfg, seed, BFCL_STAGE, session, name)
            answers = await answer_entries(answerer, suite.entries, role.max_concurrency,
                                           on_progress)
        write_results(root, name, answers, suite.folders)
        categories = list(suite.folders)
        run_bfcl_evaluate(python, root, [{"name": name, "mode": cfg.mode}], categories,
                          cfg.timeout_s)
        try:
            scores = read_scores(root, name, categories, suite.folders)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise BfclUnavailable(f"bfcl evaluate's score files are unreadable: {exc}") from None
        failed = {i: f for c in scores.categories for i, f in c.failed.items()}
        rows = [{"model": label, "category": a.category, "id": a.id,
                 "correct": a.id not in failed, "result": a.result, "error": a.error,
                 "bfcl_error": failed.get(a.id, {}).get("error"), "steps": a.steps}
                for a in answers]
        per_category = [{"category": c.category, "accuracy": c.accuracy, "correct": c.correct,
                         "total": c.total} for c in scores.categories]
        manifest = store.publish(
            BFCL_ARTIFACT, rows, parents=parents, params=params, features=BFCL_FEATURES,
            stats={"model": label, "mode": cfg.mode, "categories": per_category,
                   "bfcl_summary": scores.summary,
                   "model_errors": sum(bool(a.error) for a in answers)},
            files={"result": root / "result", "score": root / "score"},
            description=f"{label} ({role.model}) on a seeded BFCL v4 subset ({cfg.mode} mode), "
            "scored by bfcl-eval's `bfcl evaluate`: result and score files in __files__/")
    return BfclRun(label, rows, manifest, False)
