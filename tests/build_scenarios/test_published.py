"""build_scenarios with generation on, asserted on the published artifact: held-out scenarios come
from world seeds and phrasing families train never used, `natural` holds exactly the written
scenarios of the training environments, nothing but train reaches the stages that train, the
counts PNG is published; and the teacher's paraphrase is kept only when it keeps every value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentune.config import RunConfig
from agentune.config.synthesize import SynthesisConfig
from agentune.flows.build_scenarios import build_scenarios
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.schemas import QUERY_FEATURES
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.synthesize.sampling import choose_scenarios
from agentune.tasks.tool_retrieval.pairs import scenario_cases, training_cases

from support.openai_server import Reply

DEMO = PROJECT_ROOT / "data" / "demo"
KEY_ENV = "AGENTUNE_TEST_PARAPHRASE_KEY"


def run_config(tmp_path: Path, generate: dict[str, Any], **llm: Any) -> RunConfig:
    ArtifactStore(tmp_path / "store").publish("queries", [{
        "id": "q0", "text": "查一下订单 O-1003 的状态", "lang": "zh", "set_id": "set-zh-000",
        "source": "seed", "parent_ids": [], "scenario": "shop", "tool_ids": ["get_order"],
        "pii_placeholders": [], "likely_tool_ids": ["get_order"], "tool_hints": ["get_order"]}],
        features=QUERY_FEATURES)
    return RunConfig.model_validate({
        "store": {"root": str(tmp_path / "store")},
        "llm": {"cache_dir": str(tmp_path / "cache"), **llm},
        "scenarios": {"seed_file": str(DEMO / "scenarios.yaml"),
                      "generate": {"enabled": True, **generate}}})


async def test_generated_splits_hold_apart_on_the_published_artifact(prefect_api,
                                                                     tmp_path: Path) -> None:
    cfg = run_config(tmp_path, {"train": 120, "heldout": 36, "reserved": 12})
    await build_scenarios(config=cfg)
    store = ArtifactStore(cfg.store.root)
    ref = store.resolve("scenarios")
    frame = store.read(ref)
    written = yaml.safe_load((DEMO / "scenarios.yaml").read_text("utf-8"))["scenarios"]
    natural = {s["id"] for s in written if s["environment"] != "helpdesk"}
    assert set(frame[frame.split == "natural"].id) == natural
    reserved = frame[frame.split == "reserved"]
    assert set(reserved.environment) == {"helpdesk"}
    assert {s["id"] for s in written if s["environment"] == "helpdesk"} < set(reserved.id)
    generated = frame[frame.source == "generated"]
    assert not set(generated.request) & {s["request"] for s in written}
    assert generated.split.value_counts().to_dict() == {"train": 120, "heldout": 36,
                                                        "reserved": 12}
    blueprints = {split: [json.loads(b) if isinstance(b, str) else b for b in
                          generated[generated.split == split].blueprint]
                  for split in ("train", "heldout")}
    envs = {split: list(generated[generated.split == split].environment)
            for split in ("train", "heldout")}
    langs = {split: list(generated[generated.split == split].lang)
             for split in ("train", "heldout")}
    seeds = {split: {(e, b["world_seed"]) for e, b in zip(envs[split], blueprints[split],
                                                          strict=True)}
             for split in blueprints}
    families = {split: {(b["recipe"], lang, b["phrasing"]) for lang, b in
                        zip(langs[split], blueprints[split], strict=True)}
                for split in blueprints}
    assert seeds["train"] and not seeds["train"] & seeds["heldout"]
    assert families["train"] and not families["train"] & families["heldout"]
    counts = store.manifest(ref).stats["counts"]
    assert sum(c["scenarios"] for c in counts) == len(frame)
    assert store.file(ref, "counts.png").stat().st_size > 1000
    # The stages that train read the train split only: no natural, held-out or reserved id.
    records = read_scenario_rows(frame.to_dict("records"), str(ref))
    chosen = choose_scenarios(records, SynthesisConfig(max_scenarios=None), seed=0)
    assert {r.split for r in chosen} == {"train"} and len(chosen) == 120
    kept, _ = training_cases(scenario_cases(records), [])
    assert {c.split for c in kept} == {"train"}


def paraphraser(body: dict[str, Any], n: int) -> Reply:
    """Keeps the request (a prefix added) unless it asks a question: then a vague one."""
    request = body["messages"][1]["content"]
    if "?" in request or "？" in request:
        return Reply("你好，帮个忙。" if any("一" <= c <= "鿿" for c in request)
                     else "Hi, can you help me?")
    return Reply(("请注意：" if any("一" <= c <= "鿿" for c in request) else "Note: ") + request)


async def test_a_paraphrase_is_kept_only_when_it_keeps_every_value(
        prefect_api, tmp_path: Path, openai_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    server = openai_server(paraphraser)
    teacher = {"provider": "openai", "model": "teacher", "base_url": server.base_url,
               "api_key_env": KEY_ENV, "max_retries": 0}
    cfg = run_config(tmp_path, {"train": 24, "heldout": 0, "reserved": 0, "paraphrase": True},
                     teacher=teacher)
    await build_scenarios(config=cfg)
    store = ArtifactStore(cfg.store.root)
    generated = store.read("scenarios")
    generated = generated[generated.source == "generated"]
    rejects = store.read("rejects")
    lost = set(rejects[rejects.reason == "paraphrase_lost_value"].item_id)
    paraphrased = {i for i, r in zip(generated.id, generated.request, strict=True)
                   if r.startswith(("请注意：", "Note: "))}
    assert lost and paraphrased and len(generated) == 24
    assert lost | paraphrased <= set(generated.id) and not lost & paraphrased
    rows = dict(zip(generated.id, generated.request, strict=True))
    # A lost value keeps the rendered request (the question); a vague answer stands only where
    # the request stated no ground-truth value (an irrelevant or no-tool one: nothing to lose).
    assert all("?" in rows[i] or "？" in rows[i] for i in lost)
    vague = {i for i, r in rows.items() if r in ("你好，帮个忙。", "Hi, can you help me?")}
    kinds = dict(zip(generated.id, generated.kind, strict=True))
    assert {kinds[i] for i in vague} <= {"no_tool", "irrelevant", "missing_info"}
