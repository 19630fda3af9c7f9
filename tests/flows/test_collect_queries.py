"""The collect_queries stage flow end to end: published versions, reuse, the teacher over real HTTP
(test server) and in-process (embedded model), and the pipeline holding it."""

from __future__ import annotations

import importlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from agentune.config import RunConfig
from agentune.flows.collect_queries import collect_queries
from agentune.flows.pipeline import pipeline
from agentune.paths import PROJECT_ROOT
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import Reply

DEMO = PROJECT_ROOT / "data" / "demo"
QUERY_COLUMNS = ["id", "text", "lang", "set_id", "source", "parent_ids", "scenario", "tool_ids",
                 "pii_placeholders"]
WORDS = ("amber bridge canyon delta ember falcon glacier harbor island jungle kettle lantern "
         "meadow nectar orchard pepper quarry raven saddle timber umbrella velvet walnut yonder "
         "zephyr anchor biscuit cobalt dynamo eclipse fossil gravel hammock igloo jigsaw kayak "
         "lobster magnet nugget oyster pistol quiver rocket sphinx tundra utopia vortex wizard").split()
HANZI = "春夏秋冬山水火木金土日月星云风雨雪花草树林鸟鱼虫龙虎马牛羊猫狗米面茶酒书画琴棋"


def fake_teacher(body: dict[str, Any], n: int) -> Reply:
    """Answers expansion requests with distinct, well-formed queries in the set's language."""
    schema = body["response_format"]["json_schema"]["schema"]
    count = schema["properties"]["queries"].get("minItems", 3)
    prompt = json.dumps(body["messages"], ensure_ascii=False)
    zh = "中文" in prompt or "Chinese" in prompt and "language: zh" in prompt
    rng = random.Random(n)
    if zh:
        texts = ["请问" + "".join(rng.sample(HANZI, 10)) + "怎么样?" for _ in range(count)]
    else:
        texts = ["Could you check " + " ".join(rng.sample(WORDS, 7)) + " for me?" for _ in range(count)]
    return Reply(json.dumps({"queries": texts}, ensure_ascii=False))


def small_config(tmp_path: Path, **queries: Any) -> RunConfig:
    """The demo config on a copy of the demo inputs, with its own store and cache."""
    data = tmp_path / "inputs"
    data.mkdir()
    shutil.copy(DEMO / "queries.jsonl", data / "queries.jsonl")
    shutil.copy(DEMO / "tools.yaml", data / "tools.yaml")
    shutil.copytree(DEMO / "environments", data / "environments")
    return RunConfig.model_validate({
        "name": "test",
        "store": {"root": str(tmp_path / "artifacts")},
        "llm": {"cache_dir": str(tmp_path / "cache")},
        "queries": {"seed_queries": str(data / "queries.jsonl"), **queries},
        "environments": {"catalog": str(data / "tools.yaml")},
    })


def openai_teacher(config: RunConfig, base_url: str) -> RunConfig:
    return config.model_copy(update={"llm": config.llm.model_copy(update={
        "teacher": config.llm.teacher.model_copy(update={
            "provider": "openai", "model": "teacher-model", "base_url": base_url,
            "api_key_env": "AGENTUNE_TEST_TEACHER_KEY"})})})


async def test_flow_publishes_expands_over_http_and_reuses(prefect_api, tmp_path, openai_server,
                                                           monkeypatch) -> None:
    monkeypatch.setenv("AGENTUNE_TEST_TEACHER_KEY", "sk-test-secret-value")
    srv = openai_server(fake_teacher)
    config = openai_teacher(small_config(tmp_path, expansion_max_new=12), srv.base_url)

    result = await collect_queries(config=config)
    assert set(result["outputs"]) == {"queries", "tools", "rejects"} and not result["reused"]
    store = ArtifactStore(config.store.root)
    queries = pd.read_parquet(store.version_dir(store.resolve("queries")))
    assert QUERY_COLUMNS == list(queries.columns[: len(QUERY_COLUMNS)])
    expanded = queries[queries.source == "expanded"]
    assert 0 < len(expanded) <= 12
    assert all(len(p) >= 1 for p in expanded.parent_ids)
    assert queries.groupby("set_id").size().max() <= config.queries.set_size
    rejects = store.read("rejects")
    assert {"exact_duplicate", "near_duplicate"} <= set(rejects.reason)
    tools = store.read("tools")
    assert len(tools) >= 12 and isinstance(tools.parameters[0], dict)
    calls = len(srv.requests)
    assert calls > 0
    async with get_client() as client:
        wanted = ["collect-queries-summary", "collect-queries-counts", "queries-version"]
        made = {a.key for a in await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=wanted)))}
    assert set(wanted) <= made

    again = await collect_queries(config=config)
    assert again["reused"] and again["outputs"] == result["outputs"]
    assert len(srv.requests) == calls  # nothing recomputed, nothing asked again

    # A changed input file is a new version; the teacher answers for unchanged sets come from
    # the response cache, so no request is paid for twice.
    with open(config.queries.seed_queries, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"text": "Convert 12 miles to kilometres, please.",
                             "scenario": "calculation"}) + "\n")
    changed = await collect_queries(config=config)
    assert changed["outputs"]["queries"] != result["outputs"]["queries"]
    secret_seen = [p for p in Path(config.store.root).rglob("*")
                   if p.is_file() and b"sk-test-secret-value" in p.read_bytes()]
    assert secret_seen == []


async def test_bad_input_publishes_nothing(prefect_api, tmp_path) -> None:
    config = small_config(tmp_path, expand=False)
    Path(config.environments.catalog).write_text("- type: function\n  function: {name: x}\n")
    with pytest.raises(Exception, match="tools.yaml"):
        await collect_queries(config=config)
    assert ArtifactStore(config.store.root).versions() == []


async def test_pipeline_runs_its_stages(prefect_api, tmp_path, monkeypatch) -> None:
    # The pipeline's own mechanics (stages in order, one shared runtime) on its first stage; the
    # whole pipeline with the embedded model is what `make demo` runs.
    pipeline_module = importlib.import_module("agentune.flows.pipeline")  # the name is the flow
    monkeypatch.setattr(pipeline_module, "STAGES", {"collect_queries": collect_queries})
    config = small_config(tmp_path, expand=False)
    result = await pipeline(config=config)
    assert list(result) == ["collect_queries"]
    assert result["collect_queries"]["outputs"]["queries"].startswith("queries@")
    store = ArtifactStore(config.store.root)
    assert {m.name for m in store.versions()} >= {"queries", "tools", "rejects"}


@pytest.mark.slow
async def test_expansion_with_the_embedded_model(prefect_api, tmp_path) -> None:
    # Short strings and one round keep the 135M model's worst case (every string at its length
    # bound) to a few hundred tokens on 2 CPU cores.
    config = small_config(tmp_path, expansion_max_new=3, expansion_max_chars=40,
                          expansion_rounds=1)
    result = await collect_queries(config=config)
    store = ArtifactStore(config.store.root)
    queries = store.read("queries")
    summary = {row["metric"]: row["value"] for row in result["summary"]}
    assert summary["expansion requests"] >= 1
    # The 135M model's ideas are often dropped (language, length, duplicates), but each answer
    # was schema-valid JSON, so every asked-for query is either kept or recorded as a reject.
    kept = len(queries[queries.source == "expanded"])
    dropped = sum(v for k, v in summary.items() if k.startswith("expansions dropped"))
    assert kept + dropped >= 1
    assert summary["expanded queries kept"] == kept
