"""build_templates end to end: the stage as plain functions with a scripted teacher and judge on a
real OpenAI-compatible test server, the Prefect flow publishing to a temporary store (and reusing
it on a re-run), and one slow run with the embedded model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentune.config import RunConfig, load_config
from agentune.config.build_templates import BuildTemplatesConfig
from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.store import StoreConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import BENCHMARKS, load_template
from agentune.tasks.build_templates.stage import (
    TEMPLATE_FEATURES,
    TemplateInputError,
    build_template_collection,
    read_inputs,
    select_sets,
)
from agentune.tasks.common.schemas import JUDGEMENT_FEATURES, QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import OpenAITestServer, Reply
from support.template_sections import sections

TOOLS = [
    {"id": "get_weather", "name": "get_weather", "description": "Weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"id": "web_search", "name": "web_search", "description": "Search the web.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
]


def query(qid: str, text: str, lang: str, set_id: str) -> dict[str, Any]:
    return {"id": qid, "text": text, "lang": lang, "set_id": set_id, "source": "seed",
            "parent_ids": [], "scenario": "weather", "tool_ids": ["get_weather", "web_search"],
            "pii_placeholders": [], "likely_tool_ids": ["get_weather"], "tool_hints": None}


QUERIES = [
    query("q-en-1", "Will it rain in Oslo tomorrow?", "en", "weather-en-000"),
    query("q-en-2", "How warm is Lisbon this weekend?", "en", "weather-en-000"),
    query("q-en-3", "Do I need an umbrella in Paris today?", "en", "weather-en-000"),
    query("q-zh-1", "北京明天会下雨吗？", "zh", "weather-zh-000"),
    query("q-zh-2", "上海这周末热不热？", "zh", "weather-zh-000"),
]


class StageModels:
    """Teacher and judge for the stage: the Meta-Agent writes a good template for each set's
    first candidate, a faulty or unreadable one for the second; the judge prefers Alpha's
    answers to the benchmark's and the benchmark's to Beta's."""

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        user = body["messages"][-1]["content"]
        name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if name == "agent_prompt_template":
            protocol = re.search(r'Set "protocol" to "(\w+)"', user).group(1)  # type: ignore[union-attr]
            english = "Oslo" in user
            # Protocols rotate over all candidates: en gets react, toolllama; zh kuaiagent, react.
            first = protocol == ("react" if english else "kuaiagent")
            if english and first:
                answer = {"name": "Alpha", "protocol": protocol, **sections("Alpha")}
            elif english:
                answer = {"name": "Alpha2", "protocol": protocol,
                          **sections("Gamma", goal="The question.")}
            elif first:
                answer = {"name": "Beta", "protocol": protocol, **sections("Beta")}
            else:
                return Reply("Sorry, I cannot write templates.")
            return Reply(json.dumps(answer, ensure_ascii=False))
        if name == "template_judgement":
            def score(answer: str) -> int:
                return 9 if "ALPHA" in answer else 3 if "BETA" in answer else 6
            a = re.search(r"<answer_a>\n(.*?)\n</answer_a>", user, re.DOTALL).group(1)  # type: ignore[union-attr]
            b = re.search(r"<answer_b>\n(.*?)\n</answer_b>", user, re.DOTALL).group(1)  # type: ignore[union-attr]
            return Reply(json.dumps({"answer_a": {"rationale": "a", "score": score(a)},
                                     "answer_b": {"rationale": "b", "score": score(b)}}))
        for marker in ("Alpha", "Beta"):
            if f"You are {marker}" in user:
                return Reply(f"ANSWER-{marker.upper()}")
        return Reply("ANSWER-BENCHMARK")


def stage_config(**changes: Any) -> BuildTemplatesConfig:
    return BuildTemplatesConfig(
        candidates_per_set=2, protocols=["react", "toolllama", "kuaiagent"],
        template_languages=["en", "zh"], benchmark_templates=["autogpt", "kuaiagent"],
        queries_per_candidate=2, epsilon=0.0, threshold=6.0, answer_max_tokens=64,
        rationale_max_chars=60, **changes)


def llm_for(server: OpenAITestServer, cache_dir: Path | None = None) -> LLMConfig:
    role = RoleConfig(provider="openai", model="test-model", base_url=server.base_url,
                      max_retries=0)
    return LLMConfig(teacher=role, judge=role, cache=cache_dir is not None,
                     cache_dir=str(cache_dir or "unused"))


async def test_stage_makes_filters_judges_and_explains_every_drop(
        openai_server: Callable[..., OpenAITestServer]) -> None:
    server = openai_server(StageModels())
    cfg = stage_config()
    async with LLMGateway(llm_for(server)) as gateway:
        result = await build_template_collection(cfg, pd.DataFrame(QUERIES), pd.DataFrame(TOOLS),
                                                 gateway=gateway, seed=0)
    rows = {r["id"]: r for r in result.template_rows}
    bench = [r for r in result.template_rows if r["source"] == "benchmark"]
    assert len(bench) == len(BENCHMARKS) and all(r["kept"] for r in bench)
    assert {r["kind"] for r in bench} == {"planner", "concluder"}
    # Set en: Alpha kept (beats both benchmarks), its sibling dropped for a missing variable.
    alpha, gamma = rows["tpl-weather-en-000-00"], rows["tpl-weather-en-000-01"]
    assert (alpha["kept"], alpha["score"], alpha["n_instances"], alpha["n_kept_instances"]) == (
        True, 9.0, 4, 4)
    assert alpha["protocol"] == "react" and alpha["sections"]["goal"].endswith("{goal}")
    load_template(alpha["text"], id=alpha["id"], protocol=alpha["protocol"])
    assert (gamma["kept"], gamma["reason"]) == (False, "missing_variable")
    assert "goal (in section goal)" in gamma["detail"] and gamma["text"] == ""
    # Set zh: Beta judged and dropped (score 3 < 6), its sibling's answer was not JSON.
    beta, other = rows["tpl-weather-zh-000-00"], rows["tpl-weather-zh-000-01"]
    assert (beta["kept"], beta["reason"], beta["score"], beta["n_kept_instances"]) == (
        False, "below_threshold", 3.0, 0)
    assert (other["kept"], other["reason"]) == (False, "not_json")
    # Judgements: 2 candidates x 2 queries x 2 benchmarks x 2 orders.
    judgements = pd.DataFrame(result.judgement_rows)
    assert len(judgements) == 16
    assert set(judgements["order"]) == {"benchmark_first", "candidate_first"}
    assert judgements.groupby("instance_id").size().eq(2).all()
    alpha_j = judgements[judgements["template_id"] == alpha["id"]]
    assert alpha_j["kept"].all() and (alpha_j["instance_delta"] == 3.0).all()
    assert set(alpha_j["candidate_answer"]) == {"ANSWER-ALPHA"}
    assert set(alpha_j["benchmark_template"]) == {"autogpt", "kuaiagent"}
    assert not judgements[judgements["template_id"] == beta["id"]]["kept"].any()
    assert sorted(result.deltas) == [-3.0] * 4 + [3.0] * 4
    # Rejects: every dropped candidate and instance, with a reason.
    reasons = {(r.reason, r.item_id) for r in result.rejects}
    assert {("missing_variable", gamma["id"]), ("not_json", other["id"]),
            ("below_threshold", beta["id"])} <= reasons
    assert sum(r.reason == "instance_below_epsilon" for r in result.rejects) == 4
    # The summary counts add up.
    summary = {r["metric"]: r["value"] for r in result.summary}
    assert summary["candidates requested"] == 4 and summary["candidates made"] == 3
    assert summary["candidates passing the structural filter"] == 2
    assert summary["candidates kept"] == 1
    dropped = sum(v for k, v in summary.items() if k.startswith("candidates dropped: "))
    assert summary["candidates kept"] + dropped == summary["candidates requested"]
    assert summary["instances judged (both orders)"] == 8 and summary["instances kept"] == 4
    assert summary["instances dropped: below_epsilon"] == 4
    assert summary["templates out (kept)"] == 1 + len(BENCHMARKS)
    # Benchmark rows carry their mean judged score.
    assert rows["bench-autogpt"]["score"] == 6.0 and rows["bench-autogpt"]["n_instances"] == 4
    assert rows["bench-react"]["score"] is None


async def test_rows_survive_the_store(tmp_path: Path,
                                      openai_server: Callable[..., OpenAITestServer]) -> None:
    server = openai_server(StageModels())
    async with LLMGateway(llm_for(server)) as gateway:
        result = await build_template_collection(stage_config(), pd.DataFrame(QUERIES),
                                                 pd.DataFrame(TOOLS), gateway=gateway)
    store = ArtifactStore(tmp_path)
    store.publish("templates", result.template_rows, features=TEMPLATE_FEATURES)
    store.publish("judgements", result.judgement_rows, features=JUDGEMENT_FEATURES)
    templates = store.read("templates")
    assert templates.loc[templates["id"] == "tpl-weather-en-000-00", "sections"].iloc[0] == \
        result.template_rows[len(BENCHMARKS)]["sections"]
    assert templates["score"].isna().sum() == sum(r["score"] is None for r in result.template_rows)
    assert len(store.read("judgements")) == len(result.judgement_rows)


def test_bad_inputs_name_the_table_row_and_field() -> None:
    tools = pd.DataFrame(TOOLS)
    broken = pd.DataFrame([{**QUERIES[0], "tool_ids": ["teleport"]}])
    with pytest.raises(TemplateInputError, match=r"queries@v1: row 0 \(query q-en-1\): "
                                                 r"field tool_ids: teleport not in tools"):
        read_inputs(broken, tools, queries_name="queries@v1")
    with pytest.raises(TemplateInputError, match="row 0: field text"):
        read_inputs(pd.DataFrame([{**QUERIES[0], "text": ""}]), tools)
    with pytest.raises(TemplateInputError, match="missing column"):
        read_inputs(pd.DataFrame(QUERIES).drop(columns=["set_id"]), tools)
    with pytest.raises(TemplateInputError, match="field parameters"):
        read_inputs(pd.DataFrame(QUERIES), pd.DataFrame([{**TOOLS[0], "parameters": "x"}]))


def test_set_selection_alternates_languages() -> None:
    from agentune.tasks.build_templates.meta_agent import QuerySetView

    views = [QuerySetView(f"s-{lang}-{i}", lang, "x", ("q",), ())
             for lang in ("en", "zh") for i in range(4)]
    picked = select_sets(views, 3, seed=0)
    assert [v.lang for v in picked] == ["en", "zh", "en"]
    assert select_sets(views, 3, seed=0) == picked and select_sets(views, None) == views


def publish_inputs(root: Path) -> ArtifactStore:
    store = ArtifactStore(root)
    store.publish("queries", QUERIES, features=QUERY_FEATURES)
    store.publish("tools", TOOLS, features=TOOL_FEATURES)
    return store


async def test_flow_publishes_versions_and_reuses_them(
        prefect_api: None, tmp_path: Path,
        openai_server: Callable[..., OpenAITestServer]) -> None:
    from agentune.flows.build_templates import HISTOGRAM, build_templates
    from agentune.flows.pipeline import STAGES

    assert list(STAGES)[:3] == ["collect_queries", "build_scenarios", "build_templates"]
    server = openai_server(StageModels())
    store = publish_inputs(tmp_path / "store")
    config = RunConfig(store=StoreConfig(root=str(tmp_path / "store")),
                       llm=llm_for(server, tmp_path / "cache"), templates=stage_config())
    first = await build_templates(config=config)
    assert first["reused"] is False
    assert set(first["outputs"]) == {"templates", "judgements", "rejects"}
    judgements = store.manifest(first["outputs"]["judgements"])
    assert {p["name"] for p in judgements.parents} == {"queries", "tools"}
    png = store.file(judgements.ref, HISTOGRAM)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert store.read("templates")["kept"].sum() == 1 + len(BENCHMARKS)
    summary = {r["metric"]: r["value"] for r in first["summary"]}
    assert summary["candidates kept"] == 1
    requests = len(server.requests)
    again = await build_templates(config=config)
    assert again["reused"] is True and again["outputs"] == first["outputs"]
    assert again["summary"] == first["summary"] and len(server.requests) == requests


def test_demo_config_sizes_the_stage_small() -> None:
    cfg = load_config(PROJECT_ROOT / "configs" / "demo.yaml").templates
    assert cfg.max_sets is not None and cfg.max_sets <= 4
    assert cfg.candidates_per_set * cfg.max_sets * cfg.queries_per_candidate * len(
        cfg.benchmark_templates) <= 8


@pytest.mark.slow
async def test_embedded_model_end_to_end(prefect_api: None, tmp_path: Path) -> None:
    """The demo's settings (one query set, to keep it short) with the embedded SmolLM2-135M as
    teacher and judge: everything runs and every candidate ends kept or dropped with a reason
    (its answers are weak by design)."""
    from agentune.flows.build_templates import build_templates

    store = publish_inputs(tmp_path / "store")
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    config = demo.model_copy(update={
        "store": StoreConfig(root=str(tmp_path / "store")),
        "llm": demo.llm.model_copy(update={"cache_dir": str(tmp_path / "cache")}),
        "templates": demo.templates.model_copy(update={"max_sets": 1}),
    })
    result = await build_templates(config=config)
    templates = store.read(result["outputs"]["templates"])
    candidates = templates[templates["source"] == "meta-agent"]
    assert len(candidates) == demo.templates.candidates_per_set
    assert (candidates["kept"] | candidates["reason"].notna()).all()
    assert (templates[templates["source"] == "benchmark"]["kept"]).all()
    summary = {r["metric"]: r["value"] for r in result["summary"]}
    dropped = sum(v for k, v in summary.items() if k.startswith("candidates dropped: "))
    assert summary["candidates kept"] + dropped == summary["candidates requested"]
    judgements = store.read(result["outputs"]["judgements"])
    assert len(judgements) == 2 * summary["instances judged (both orders)"]
    if len(judgements):
        assert judgements["score_candidate"].between(1, 10).all()
