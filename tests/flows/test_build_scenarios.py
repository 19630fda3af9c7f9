"""The build_scenarios stage flow: the demo seed file's scenarios published with their executed
ground truth and splits, a failing ground truth rejected with its reason, teacher-written
scenarios over a scripted OpenAI-compatible server kept or rejected, and reuse on a re-run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from agentune.config import RunConfig
from agentune.flows.build_scenarios import build_scenarios
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.schemas import QUERY_FEATURES
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import Reply

DEMO = PROJECT_ROOT / "data" / "demo"
KEY_ENV = "AGENTUNE_TEST_SCENARIO_KEY"


def publish_queries(root: Path) -> None:
    rows = [{"id": f"q{i}", "text": text, "lang": lang, "set_id": set_id, "source": "seed",
             "parent_ids": [], "scenario": "shop", "tool_ids": tools, "pii_placeholders": [],
             "likely_tool_ids": tools, "tool_hints": tools}
            for i, (text, lang, set_id, tools) in enumerate([
                ("查一下订单 O-1003 的状态", "zh", "set-zh-000", ["get_order"]),
                ("订单 O-1001 发货了吗", "zh", "set-zh-000", ["get_order"]),
                ("What's the weather in Oslo?", "en", "set-en-000", ["get_weather"])])]
    ArtifactStore(root).publish("queries", rows, features=QUERY_FEATURES)


def config(tmp_path: Path, seed_file: Path, **scenarios: Any) -> RunConfig:
    role = {"provider": "openai", "model": "teacher", "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": KEY_ENV, "max_retries": 0}
    return RunConfig.model_validate({
        "store": {"root": str(tmp_path / "store")},
        "llm": {"teacher": role, "cache_dir": str(tmp_path / "cache")},
        "scenarios": {"seed_file": str(seed_file), **scenarios},
    })


async def test_demo_scenarios_publish_with_executed_ground_truth(prefect_api, tmp_path) -> None:
    publish_queries(tmp_path / "store")
    seed = yaml.safe_load((DEMO / "scenarios.yaml").read_text("utf-8"))["scenarios"]
    broken = {**seed[0], "id": "broken", "ground_truth": [[{
        "name": "book_flight", "arguments": {"flight_id": "ZH9801", "passenger": "X"}}]],
        "kind": "single_call"}  # sold out: the ground truth fails
    seed_file = tmp_path / "scenarios.yaml"
    seed_file.write_text(yaml.safe_dump({"scenarios": seed + [broken]}, allow_unicode=True),
                         "utf-8")
    cfg = config(tmp_path, seed_file)
    result = await build_scenarios(config=cfg)
    assert set(result["outputs"]) == {"scenarios", "rejects"} and not result["reused"]
    store = ArtifactStore(cfg.store.root)
    frame = pd.read_parquet(store.version_dir(store.resolve("scenarios")))
    assert len(frame) == len(seed)
    assert set(frame.split) == {"train", "heldout", "reserved"}
    assert set(frame[frame.split == "reserved"].environment) == {"helpdesk"}
    records = read_scenario_rows(store.read("scenarios").to_dict("records"), "scenarios")
    booked = next(r for r in records if r.scenario.id == "trv-book-cheapest-flight")
    assert booked.expected_state["travel"]["bookings"][0]["item_id"] == "MU5102"
    assert booked.start_state["travel"]["bookings"] == []
    rejects = store.read("rejects")
    row = rejects[rejects.item_id == "broken"].iloc[0]
    assert row.reason == "ground_truth_failed" and "sold out" in row.detail
    again = await build_scenarios(config=cfg)
    assert again["reused"] and again["outputs"] == result["outputs"]


def scenario_writer(body: dict[str, Any], n: int) -> Reply:
    """The first request gets a right scenario, the second one calling an unknown order."""
    prompt = body["messages"][1]["content"]
    assert 'Environment "shop"' in prompt and "O-1003" in prompt  # it sees the world's data
    if n == 0:
        answer = {"request": "订单 O-1003 现在是什么状态？", "facts": ["paid", "大象"],
                  "calls": [{"name": "get_order", "arguments": {"order_id": "O-1003"}}]}
    else:
        answer = {"request": "订单 O-9999 到哪了？", "facts": [],
                  "calls": [{"name": "get_order", "arguments": {"order_id": "O-9999"}}]}
    return Reply(json.dumps(answer, ensure_ascii=False))


async def test_teacher_written_scenarios_are_run_and_grounded(prefect_api, tmp_path,
                                                              openai_server, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    server = openai_server(scenario_writer)
    publish_queries(tmp_path / "store")
    seed_file = tmp_path / "one.yaml"
    seed = yaml.safe_load((DEMO / "scenarios.yaml").read_text("utf-8"))["scenarios"][:1]
    seed_file.write_text(yaml.safe_dump({"scenarios": seed}, allow_unicode=True), "utf-8")
    cfg = config(tmp_path, seed_file, teacher_sets=2, scenarios_per_set=2)
    cfg = cfg.model_copy(update={"llm": cfg.llm.model_copy(update={
        "teacher": cfg.llm.teacher.model_copy(update={"base_url": server.base_url})})})
    await build_scenarios(config=cfg)
    store = ArtifactStore(cfg.store.root)
    frame = store.read("scenarios")
    teacher = frame[frame.source == "teacher"]
    assert len(teacher) == 1
    assert list(teacher.iloc[0].facts) == ["paid"]  # "大象" was returned by no call
    assert teacher.iloc[0].kind == "single_call" and teacher.iloc[0].environment == "shop"
    reasons = store.read("rejects").set_index("item_id").reason.to_dict()
    assert sorted(reasons.values()) == ["ground_truth_failed", "no_environment"]
    assert reasons["set-en-000"] == "no_environment"  # get_weather is in no training environment
