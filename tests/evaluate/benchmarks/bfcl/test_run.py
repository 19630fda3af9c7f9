"""agentune's own BFCL answers, scored by bfcl-eval: an endpoint (a real HTTP server on
127.0.0.1) that answers every entry with the ground truth scores 1.0 in every category, multi-turn
included (its calls run in BFCL's environments between steps); one that never calls a function
scores 0 everywhere but the irrelevance categories, where it scores 1.0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.config.evaluate import BFCL_CATEGORIES
from agentune.config.llm import RoleConfig
from agentune.tasks.evaluate.benchmarks.bfcl.run import bfcl_suite, run_bfcl_model
from agentune.tasks.store.artifact_store import ArtifactStore

from support.bfcl_answers import ground_truth, ground_truth_script, require_bfcl, silent_script

IRRELEVANCE = {"irrelevance", "live_irrelevance"}


def _config(tmp_path: Path) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(tmp_path / "store")}, "llm": {"cache_dir": str(tmp_path / "cache")},
        "evaluate": {"heldout": False, "closed_loop": {"enabled": False},
                     "bfcl": {"enabled": True, "max_per_category": 2,
                              "category_caps": {"multi_turn_base": 1}, "max_steps": 4}}})


async def test_scripted_endpoints_score_as_expected(tmp_path, openai_server, monkeypatch) -> None:
    python = require_bfcl()
    monkeypatch.setenv("AGENTUNE_TEST_BFCL_KEY", "sk-test")
    config = _config(tmp_path)
    store = ArtifactStore(tmp_path / "store")
    suite = await asyncio.to_thread(bfcl_suite, config, python)
    assert sorted(suite.ids) == sorted(BFCL_CATEGORIES)
    assert {c: len(ids) for c, ids in suite.ids.items()} == {
        c: 1 if c == "multi_turn_base" else 2 for c in BFCL_CATEGORIES}
    truth = await asyncio.to_thread(ground_truth, python, BFCL_CATEGORIES)

    async def run(label: str, script: Any) -> dict[str, float]:
        server = openai_server(script)
        role = RoleConfig(provider="openai", model=label, base_url=server.base_url,
                          api_key_env="AGENTUNE_TEST_BFCL_KEY")
        done = await run_bfcl_model(config, store, label=label, role=role,
                                    identity={"endpoint": label}, parent=None, suite=suite,
                                    python=python)
        assert not done.reused and len(done.rows) == len(suite.entries)
        # Greedy (temperature 0): the run's seed decides nothing, and is not sent.
        assert server.requests and all("seed" not in r.body for r in server.requests)
        assert store.file(done.manifest.ref, "score/data_overall.csv").is_file()
        return {c["category"]: c["accuracy"] for c in done.categories}

    perfect = await run("truth", ground_truth_script(suite.entries, truth))
    assert perfect == {c: 1.0 for c in BFCL_CATEGORIES}
    silent = await run("silent", silent_script)
    assert silent == {c: 1.0 if c in IRRELEVANCE else 0.0 for c in BFCL_CATEGORIES}


async def test_function_calling_mode_reads_tool_calls(tmp_path, openai_server,
                                                      monkeypatch) -> None:
    """fc mode: the functions go as tools, the endpoint's tool calls are the result (BFCL's
    FC format, dotted names restored by its checker): the ground truth scores 1.0."""
    from support.bfcl_answers import tool_call_script

    python = require_bfcl()
    monkeypatch.setenv("AGENTUNE_TEST_BFCL_KEY", "sk-test")
    categories = ["simple_python", "multiple", "parallel", "irrelevance"]
    config = _config(tmp_path)
    config = config.model_copy(update={"evaluate": config.evaluate.model_copy(update={
        "bfcl": config.evaluate.bfcl.model_copy(update={
            "mode": "fc", "categories": categories, "category_caps": {}})})})
    suite = await asyncio.to_thread(bfcl_suite, config, python)
    # No BFCL prompt-mode system prompt: the functions are the tools.
    assert all(e["tools"] and "[func_name1(" not in json.dumps(e["turns"])
               for e in suite.entries)
    truth = await asyncio.to_thread(ground_truth, python, categories)
    server = openai_server(tool_call_script(suite.entries, truth))
    role = RoleConfig(provider="openai", model="fc", base_url=server.base_url,
                      api_key_env="AGENTUNE_TEST_BFCL_KEY")
    done = await run_bfcl_model(config, ArtifactStore(tmp_path / "store"), label="fc",
                                role=role, identity={"endpoint": "fc"}, parent=None,
                                suite=suite, python=python)
    assert {c["category"]: c["accuracy"] for c in done.categories} == {
        c: 1.0 for c in categories}
    first = next(r for r in done.rows if r["category"] == "simple_python")
    assert isinstance(first["result"], list) and isinstance(first["result"][0], dict)


async def test_a_fixed_subset_seed_scores_every_run_seed_on_the_same_entries(tmp_path) -> None:
    python = require_bfcl()
    base = _config(tmp_path).model_dump(mode="json")

    def ids(seed: int, subset_seed: int | None) -> dict[str, list[str]]:
        raw = {**base, "seed": seed}
        raw["evaluate"]["bfcl"] = {**raw["evaluate"]["bfcl"], "categories": ["simple_python"],
                                   "category_caps": {}, "max_per_category": 5,
                                   "subset_seed": subset_seed}
        return bfcl_suite(RunConfig.model_validate(raw), python).ids

    assert ids(0, None) != ids(1, None)  # by default the subset follows the run's seed
    assert ids(0, 7) == ids(1, 7) == ids(7, None)
