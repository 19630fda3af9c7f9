"""One model load per evaluate run: every benchmark (held-out, KAgentBench, the closed loop in
both forms) asks each listed model, and the closed loop's simulated user asks the teacher, through
the models the run's runtime holds: each loaded once, whatever role and settings ask it. Loads
are counted at the local provider's load function."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.flows.evaluate import evaluate
from agentune.tasks.build_templates.stage import TEMPLATE_FEATURES
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.llm import local_provider
from agentune.tasks.store.artifact_store import ArtifactStore

from support.heldout_rows import sft_dataset_rows, template_rows
from support.kagentbench_files import make_kagentbench
from support.scripted_agents import publish_demo_scenarios
from support.tiny_eval_model import make_tiny_model


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """How many times the local provider loaded each model folder."""
    folders: Counter[Path] = Counter()
    load = local_provider.load_causal_lm

    def counting(folder: Path, **kwargs: Any) -> Any:
        folders[Path(folder).resolve()] += 1
        return load(folder, **kwargs)

    monkeypatch.setattr(local_provider, "load_causal_lm", counting)
    return folders


async def test_each_model_is_loaded_once_per_evaluate_run(prefect_api, tmp_path: Path,
                                                          loads: Counter[Path]) -> None:
    store = ArtifactStore(tmp_path / "store")
    table = [{**{name: None for name in TEMPLATE_FEATURES}, **row, "name": row["id"],
              "score": 7.0, "n_instances": 1, "n_kept_instances": 1} for row in template_rows()]
    templates = store.publish("templates", table, features=TEMPLATE_FEATURES)
    sft = store.publish("sft_dataset", sft_dataset_rows(), parents=[templates.ref],
                        features=SFT_FEATURES)
    await asyncio.to_thread(publish_demo_scenarios, store)
    base = make_tiny_model(tmp_path / "base")
    tuned = store.publish("model", [{"step": 1, "loss": 1.0}], parents=[sft.ref],
                          files={"model": make_tiny_model(tmp_path / "tuned")})
    bench, _ = make_kagentbench(tmp_path, 4, seed=4)
    local = {"model": str(base), "dtype": "float32"}
    config = RunConfig.model_validate({
        "store": {"root": str(store.root)},
        "llm": {"cache_dir": str(tmp_path / "cache"), "teacher": local},  # the simulated user
        "templates": {"unseen_templates": 0},
        "evaluate": {"benchmark_templates": ["react"], "max_queries": 1, "max_profile": 1,
                     "max_tokens": 8, "max_prompt_tokens": 600, "kagentbench_file": str(bench),
                     "kagentbench_max_per_type": 1,
                     "models": [{"label": "base", **local},
                                {"label": "tuned", "model": "model@latest", "dtype": "float32"}],
                     "closed_loop": {"splits": ["heldout"], "max_scenarios": 1, "max_steps": 2,
                                     "max_tokens": 16, "form": "both"}}})
    result = await evaluate(config=config)
    assert {f"eval_rollouts:{form}:{model}" for form in ("messages", "steps")
            for model in ("base", "tuned")} <= set(result["outputs"])
    assert {row["suite"] for row in result["summary"] if "suite" in row} >= {"heldout",
                                                                             "kagentbench"}
    assert loads == {base.resolve(): 1, store.file(tuned.ref, "model").resolve(): 1}
