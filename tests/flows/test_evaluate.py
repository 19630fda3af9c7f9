"""The evaluate stage flow: held-out benchmark + a KAgentBench file, base vs tuned (a `model`
version in the store), the report artifact (rows, markdown, PNG, review sheet), reuse on a
re-run, the human-eval import, and the embedded model end to end (slow)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentune.config import RunConfig
from agentune.flows.evaluate import evaluate
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_templates.stage import TEMPLATE_FEATURES
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.evaluate.models import EvaluationInputError, resolve_models
from agentune.tasks.llm.errors import ModelUnavailable
from agentune.tasks.store.artifact_store import ArtifactStore

from support.heldout_rows import sft_dataset_rows, template_rows
from support.kagentbench_files import make_kagentbench
from support.tiny_eval_model import make_tiny_model

DEMO = PROJECT_ROOT / "data" / "demo"


def _template_table() -> list[dict[str, Any]]:
    return [{**{name: None for name in TEMPLATE_FEATURES}, **row, "name": row["id"],
             "score": 7.0, "n_instances": 1, "n_kept_instances": 1} for row in template_rows()]


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    store = ArtifactStore(tmp_path / "store")
    templates = store.publish("templates", _template_table(), features=TEMPLATE_FEATURES)
    store.publish("sft_dataset", sft_dataset_rows(), parents=[templates.ref],
                  features=SFT_FEATURES)
    return store


def _config(store: ArtifactStore, tmp_path: Path, unseen_templates: int = 1,
            **evaluate: Any) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(store.root)}, "llm": {"cache_dir": str(tmp_path / "cache")},
        "templates": {"unseen_templates": unseen_templates},
        "evaluate": {"benchmark_templates": ["react", "autogpt"],
                     "max_tokens": 12, "max_prompt_tokens": 600, **evaluate}})


async def test_base_vs_tuned_report_is_published_and_reused(prefect_api, store, tmp_path):
    base = make_tiny_model(tmp_path / "base")
    tuned = make_tiny_model(tmp_path / "tuned")  # other random weights
    store.publish("model", [{"step": 1, "loss": 1.0}], parents=[store.resolve("sft_dataset")],
                  files={"model": tuned}, description="a trained model")
    bench, _ = make_kagentbench(tmp_path, 12, seed=4)
    config = _config(store, tmp_path, kagentbench_file=str(bench), kagentbench_max_per_type=2,
                     models=[{"label": "base", "model": str(base), "dtype": "float32"},
                             {"label": "tuned", "model": "model@latest", "dtype": "float32"}],
                     human_eval={"sample_size": 3})
    result = await evaluate(config=config)
    assert result["stage"] == "evaluate" and not result["reused"]
    summary = pd.DataFrame(result["summary"])
    assert set(zip(summary["suite"], summary["model"], strict=True)) == {
        ("heldout", "base"), ("heldout", "tuned"), ("kagentbench", "base"),
        ("kagentbench", "tuned")}
    assert {"Planning", "Tool-use", "Reflection", "Concluding", "Profile", "Overall"} <= \
        set(summary.columns)
    assert "tuned − base" in result["comparison"]
    assert "by template source" in result["comparison"] and "unseen" in result["comparison"]

    report = store.manifest(result["outputs"]["eval_report"])
    assert {"__files__/report.md", "__files__/comparison.png",
            "__files__/review/review_sheet.csv", "__files__/review/review_sheet.parquet"} <= \
        set(report.files)
    assert store.file(report.ref, "comparison.png").read_bytes().startswith(b"\x89PNG")
    rows = store.read(report.ref)
    assert {"suite", "model", "view", "group", "metric", "value", "std", "n"} <= set(rows.columns)
    assert set(rows["view"]) == {"all", "template_source", "lang"}
    assert {"benchmark", "unseen"} <= set(rows.loc[rows["view"] == "template_source", "group"])
    sheet = pd.read_csv(store.file(report.ref, "review/review_sheet.csv"), encoding="utf-8-sig")
    assert len(sheet) == 3 * 2  # 3 prompts, answered by both models

    # The prediction files are the official format: each benchmark line + model_predict.
    predictions = [ref for name, ref in result["outputs"].items()
                   if name.startswith("eval_predictions:heldout:tuned")]
    path = store.file(predictions[0], "predictions.jsonl")
    assert '"model_predict"' in path.read_text(encoding="utf-8").splitlines()[0]
    assert any(p["name"] == "model" for p in store.manifest(predictions[0]).parents)

    again = await evaluate(config=config)
    assert again["reused"] and again["outputs"] == result["outputs"]

    # A reviewer fills the sheet: the usable rate joins the comparison.
    sheet["score"] = 5
    filled = tmp_path / "filled.csv"
    sheet.to_csv(filled, index=False)
    reviewed = await evaluate(config=_config(
        store, tmp_path, kagentbench_file=str(bench), kagentbench_max_per_type=2,
        models=[{"label": "base", "model": str(base), "dtype": "float32"},
                {"label": "tuned", "model": "model@latest", "dtype": "float32"}],
        human_eval={"sample_size": 3, "filled_sheet": str(filled)}))
    assert "usable (human)" in reviewed["comparison"]
    assert all(row["usable (human)"] == 100.0 for row in reviewed["summary"])


def test_missing_inputs_are_clear_errors(tmp_path: Path) -> None:
    empty = ArtifactStore(tmp_path / "empty")
    config = _config(empty, tmp_path)
    with pytest.raises(EvaluationInputError, match="evaluate.models 'tuned'"):
        resolve_models(config.evaluate.model_copy(update={"models": [
            config.evaluate.models[0],
            config.evaluate.models[1].model_copy(update={"optional": False})]}), empty)
    models, skipped = resolve_models(config.evaluate, empty)
    assert [m.label for m in models] == ["base"] and "tuned (model@latest)" in skipped[0]
    from agentune.tasks.evaluate.benchmarks.kagentbench.suites import prepare_suites

    with pytest.raises(EvaluationInputError, match="run build_dataset first"):
        prepare_suites(config, empty)


@pytest.mark.slow
async def test_embedded_model_on_the_held_out_benchmark(prefect_api, store, tmp_path):
    config = _config(store, tmp_path, max_queries=1, max_profile=1, max_tokens=32,
                     max_prompt_tokens=1024, benchmark_templates=["react"], unseen_templates=0)
    result = await evaluate(config=config)
    rows = pd.DataFrame(result["summary"])
    assert list(rows["model"]) == ["base"]  # no trained model: tuned is left out, and said so
    assert "Not evaluated" in result["comparison"]


async def test_closed_loop_tables_for_each_model(prefect_api, tmp_path, openai_server,
                                                 monkeypatch) -> None:
    """Two scripted endpoints act in the held-out and reserved scenarios: the perfect one
    passes every trial, the one calling a wrong tool none; the report has the closed-loop
    table, the PNG and the trials; a re-run reuses everything."""
    from support.scripted_agents import (
        demo_records,
        perfect,
        publish_demo_scenarios,
        scripted,
        wrong_tool,
    )

    monkeypatch.setenv("AGENTUNE_TEST_EVAL_KEY", "sk-test")
    store = ArtifactStore(tmp_path / "store")
    await asyncio.to_thread(publish_demo_scenarios, store)
    catalog, records = await asyncio.to_thread(demo_records)
    good = openai_server(scripted(records, catalog, lambda body: perfect))
    bad = openai_server(scripted(records, catalog, lambda body: wrong_tool))
    endpoint = {"provider": "openai", "api_key_env": "AGENTUNE_TEST_EVAL_KEY"}
    config = RunConfig.model_validate({
        "store": {"root": str(store.root)},
        "llm": {"cache_dir": str(tmp_path / "cache"),
                "teacher": {**endpoint, "model": "user", "base_url": good.base_url}},
        "templates": {"unseen_templates": 0},
        "evaluate": {"heldout": False, "models": [
            {**endpoint, "label": "perfect", "model": "p", "base_url": good.base_url},
            {**endpoint, "label": "wrong", "model": "w", "base_url": bad.base_url}],
            "closed_loop": {"splits": ["heldout", "reserved"], "max_scenarios": 4,
                            "templates": ["react"]}}})
    result = await evaluate(config=config)
    loop = pd.DataFrame([r for r in result["summary"] if "split" in r])
    overall = loop[loop.split == "all"].set_index("model")
    assert overall.loc["perfect", "pass@1"] == 1.0 and overall.loc["perfect", "cases"] == 8
    calling = [r for r in records if r.scenario.calls()]
    assert overall.loc["wrong", "pass@1"] < 1.0
    assert set(loop.split) == {"all", "heldout", "reserved"}
    assert "Closed loop (messages form)" in result["comparison"]
    assert "wrong_tool" in result["comparison"]
    report = store.manifest(result["outputs"]["eval_report"])
    assert store.file(report.ref, "closed_loop.png").read_bytes().startswith(b"\x89PNG")
    rows = store.read(report.ref)
    kinds = rows[(rows.suite == "closed_loop:messages") & (rows.view == "kind")]
    assert len(set(kinds.group)) >= 3
    trials = store.read(result["outputs"]["eval_rollouts:messages:wrong"])
    assert len(trials) == 8 and calling
    assert all("wrong_tool" in list(r) for r in trials[trials.kind.isin(
        ["single_call", "multi_step", "parallel_calls"])].reasons)
    again = await evaluate(config=config)
    assert again["reused"] and again["outputs"] == result["outputs"]


async def test_a_model_that_cannot_load_stops_the_evaluation(prefect_api, tmp_path,
                                                             openai_server, monkeypatch) -> None:
    """A local model whose weights are broken is not scored 0 on every trial: the stage fails,
    naming the model, and publishes no report and no trials."""
    from support.scripted_agents import demo_records, perfect, publish_demo_scenarios, scripted

    monkeypatch.setenv("AGENTUNE_TEST_EVAL_KEY", "sk-test")
    store = ArtifactStore(tmp_path / "store")
    await asyncio.to_thread(publish_demo_scenarios, store)
    catalog, records = await asyncio.to_thread(demo_records)
    user = openai_server(scripted(records, catalog, lambda body: perfect))
    broken = make_tiny_model(tmp_path / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:64])  # a copy cut short
    config = RunConfig.model_validate({
        "store": {"root": str(store.root)},
        "llm": {"cache_dir": str(tmp_path / "cache"),
                "teacher": {"provider": "openai", "api_key_env": "AGENTUNE_TEST_EVAL_KEY",
                            "model": "user", "base_url": user.base_url}},
        "templates": {"unseen_templates": 0},
        "evaluate": {"heldout": False, "max_tokens": 12, "models": [
            {"label": "broken", "model": str(broken), "dtype": "float32"}],
            "closed_loop": {"splits": ["heldout"], "max_scenarios": 2, "templates": ["react"]}}})
    published = {ref.name for ref in store.published()}
    with pytest.raises(ModelUnavailable, match="broken"):
        await evaluate(config=config)
    assert {ref.name for ref in store.published()} == published


async def test_bfcl_table_for_base_and_tuned(prefect_api, tmp_path, openai_server,
                                             monkeypatch) -> None:
    """BFCL through bfcl-eval's scorer for both models: a base endpoint that never calls a
    function, a tuned one answering with the ground truth; the report and the run summary have
    the side-by-side table; a re-run reuses both runs."""
    from agentune.tasks.evaluate.benchmarks.bfcl.run import bfcl_suite

    from support.bfcl_answers import (
        ground_truth,
        ground_truth_script,
        require_bfcl,
        silent_script,
    )

    python = require_bfcl()
    monkeypatch.setenv("AGENTUNE_TEST_EVAL_KEY", "sk-test")
    categories = ["simple_python", "irrelevance", "multi_turn_base"]

    def config(base_url: str = "", tuned_url: str = "", **bfcl: Any) -> RunConfig:
        endpoint = {"provider": "openai", "api_key_env": "AGENTUNE_TEST_EVAL_KEY"}
        return RunConfig.model_validate({
            "store": {"root": str(tmp_path / "store")},
            "llm": {"cache_dir": str(tmp_path / "cache")},
            "evaluate": {"heldout": False, "closed_loop": {"enabled": False}, "models": [
                {**endpoint, "label": "base", "model": "b", "base_url": base_url or None},
                {**endpoint, "label": "tuned", "model": "t", "base_url": tuned_url or None}],
                "bfcl": {"enabled": True, "categories": categories, "max_per_category": 1,
                         "max_steps": 3, **bfcl}}})

    suite = await asyncio.to_thread(bfcl_suite, config(), python)
    truth = await asyncio.to_thread(ground_truth, python, categories)
    base = openai_server(silent_script)
    tuned = openai_server(ground_truth_script(suite.entries, truth))
    result = await evaluate(config=config(base.base_url, tuned.base_url))
    table = pd.DataFrame([r for r in result["summary"] if "bfcl_category" in r])
    accuracy = table.set_index(["model", "bfcl_category"])["accuracy"]
    assert accuracy.to_dict() == {
        ("base", "simple_python"): 0.0, ("base", "irrelevance"): 1.0,
        ("base", "multi_turn_base"): 0.0, ("base", "mean"): 1 / 3,
        ("tuned", "simple_python"): 1.0, ("tuned", "irrelevance"): 1.0,
        ("tuned", "multi_turn_base"): 1.0, ("tuned", "mean"): 1.0}
    assert "BFCL v4 (prompt mode)" in result["comparison"]
    assert "| simple_python | 1 | 0.0 | 100.0 | 100.0 |" in result["comparison"]
    rows = ArtifactStore(tmp_path / "store").read(result["outputs"]["eval_report"])
    assert set(rows[rows.suite == "bfcl:prompt"].model) == {"base", "tuned"}
    assert {"eval_bfcl:base", "eval_bfcl:tuned"} <= set(result["outputs"])
    again = await evaluate(config=config(base.base_url, tuned.base_url))
    assert again["reused"] and again["outputs"] == result["outputs"]

    # Without bfcl-eval's venv the evaluation says so; the flow does not fail.
    missing = await evaluate(config=config(base.base_url, tuned.base_url,
                                           python=str(tmp_path / "no-venv" / "python")))
    assert "bfcl-eval's virtual environment is missing" in missing["comparison"]
    assert not [r for r in missing["summary"] if "bfcl_category" in r]


async def test_closed_loop_offers_only_the_best_max_tools(prefect_api, tmp_path, openai_server,
                                                          monkeypatch) -> None:
    """With `max_tools`, each request is offered its environment's best tools by retrieval (and
    ask_user), as an agent facing a large catalog would be; the cap is part of the rollouts'
    parameters, so uncapped and capped rollouts are different versions."""
    from support.scripted_agents import demo_records, perfect, publish_demo_scenarios, scripted

    monkeypatch.setenv("AGENTUNE_TEST_EVAL_KEY", "sk-test")
    store = ArtifactStore(tmp_path / "store")
    await asyncio.to_thread(publish_demo_scenarios, store)
    catalog, records = await asyncio.to_thread(demo_records)
    server = openai_server(scripted(records, catalog, lambda body: perfect))
    endpoint = {"provider": "openai", "api_key_env": "AGENTUNE_TEST_EVAL_KEY",
                "base_url": server.base_url}
    config = RunConfig.model_validate({
        "store": {"root": str(store.root)},
        "llm": {"cache_dir": str(tmp_path / "cache"), "teacher": {**endpoint, "model": "user"}},
        "templates": {"unseen_templates": 0},
        "evaluate": {"heldout": False,
                     "models": [{**endpoint, "label": "perfect", "model": "p"}],
                     "closed_loop": {"splits": ["heldout"], "max_scenarios": 3,
                                     "templates": ["react"], "max_tools": 2}}})
    result = await evaluate(config=config)
    offered = [[t["function"]["name"] for t in r.body["tools"]] for r in server.requests
               if r.body.get("model") == "p"]
    assert offered and all(len(names) <= 3 and names[-1] == "ask_user" for names in offered)
    uncapped = config.merged(evaluate={"closed_loop": {"max_tools": None}})
    again = await evaluate(config=uncapped)
    assert again["outputs"]["eval_rollouts:messages:perfect"] != \
        result["outputs"]["eval_rollouts:messages:perfect"]
    widest = max(len(r.body["tools"]) for r in server.requests if r.body.get("model") == "p")
    assert widest > 3
