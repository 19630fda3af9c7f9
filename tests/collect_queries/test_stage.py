"""collect_queries end to end as plain functions (no Prefect, no store): demo inputs in,
query/tool/reject rows and a summary out; expansion with a scripted teacher."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import pandas as pd
import pytest
import yaml

from agentune.config import ConfigError, RunConfig, load_config
from agentune.config.collect_queries import CollectQueriesConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.collect_queries.stage import QueryCollection, build_query_collection
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.llm.errors import BudgetExceeded, GatewayError
from agentune.tasks.llm.types import ChatRequest, ChatResult

QUERY_COLUMNS = [
    "id",
    "text",
    "lang",
    "set_id",
    "source",
    "parent_ids",
    "scenario",
    "tool_ids",
    "pii_placeholders",
]
RAW_PII = [
    "51010719901112107X",
    "13912345678",
    "anna.keller@example.com",
    "bob.lin@example.org",
    "7946 0321",
    "6225 8812 3456 7898",
    "zhang.wei@example.com",
    "415 555 0132",
]


CATALOG = str(PROJECT_ROOT / RunConfig().environments.catalog)


def demo_config(**changes: object) -> CollectQueriesConfig:
    base = CollectQueriesConfig()
    return base.model_copy(
        update={
            "seed_queries": str(PROJECT_ROOT / base.seed_queries),
            **changes,
        }
    )


class ScriptedTeacher:
    """A teacher whose answers are computed from the request: ``make(call_no, n, user_text)``."""

    def __init__(self, make) -> None:  # type: ignore[no-untyped-def]
        self.make = make
        self.requests: list[ChatRequest] = []

    async def chat(self, role: str, request: ChatRequest, *, stage: str) -> ChatResult:
        assert (role, stage) == ("teacher", "collect_queries")
        self.requests.append(request)
        n = request.response_format["json_schema"]["schema"]["properties"]["queries"]["maxItems"]  # type: ignore[index]
        content = self.make(len(self.requests), n, request.messages[1]["content"])
        return ChatResult(content=content, model="scripted")


ZH_CHARS = "山水花鸟风云雷电春夏秋冬东南西北江河湖海金木水火土日月星辰天地人和"
EN_WORDS = (
    "harbor violin cactus meteor pancake glacier lantern walrus orchid tractor sapphire "
    "compass biscuit volcano hammock trumpet lobster saddle pebble kettle"
).split()


def distinct_queries(call: int, n: int, user: str) -> str:
    """n new queries in the language the request asks for, unlike each other and the demo."""
    rng = random.Random(call)
    zh = "Simplified Chinese" in user
    out = []
    for _ in range(n):
        if zh:
            out.append("请问" + "".join(rng.sample(ZH_CHARS, 12)) + "怎么办？")
        else:
            out.append("Tell me about " + " ".join(rng.sample(EN_WORDS, 7)) + ".")
    return json.dumps({"queries": out}, ensure_ascii=False)


async def test_demo_without_teacher_publishes_clean_rows() -> None:
    result = await build_query_collection(demo_config(), CATALOG, seed=0)
    rows = result.query_rows()
    frame = pd.DataFrame(rows)
    assert list(frame.columns[: len(QUERY_COLUMNS)]) == QUERY_COLUMNS
    assert frame["id"].is_unique and (frame["source"] == "seed").all()
    assert len(frame) >= 120
    reasons = {r.reason for r in result.rejects}
    assert {"exact_duplicate", "near_duplicate", "too_short", "language"} <= reasons
    assert all(r.stage == "collect_queries" for r in result.rejects)
    # PII scrubbed and counted; no raw PII anywhere in what is published.
    with_pii = frame[frame["pii_placeholders"].map(len) > 0]
    assert len(with_pii) >= 5
    assert {p for ps in with_pii["pii_placeholders"] for p in ps} == {
        "[EMAIL]",
        "[PHONE]",
        "[ID_NUMBER]",
        "[CARD_NUMBER]",
    }
    published = json.dumps([rows, result.reject_rows(), result.summary], ensure_ascii=False)
    for raw in RAW_PII:
        assert raw not in published
    # Sets: each query in one set, the set ids recorded on the rows.
    assert set(frame["set_id"]) == {s.set_id for s in result.sets}
    assert sorted(frame["id"]) == sorted(q for s in result.sets for q in s.member_ids)
    # Tool subsets within the configured range, drawn from the catalog.
    names = {t.name for t in result.tools}
    sizes = frame["tool_ids"].map(len)
    assert sizes.min() >= 3 and sizes.max() <= 8 and sizes.nunique() > 3
    assert all(set(ids) <= names for ids in frame["tool_ids"])
    no_tool = frame[frame["scenario"] == "no_tool"]
    assert len(no_tool) > 0 and (no_tool["likely_tool_ids"].map(len) == 0).all()
    # Summary counts add up.
    summary = {r["metric"]: r["value"] for r in result.summary}
    assert summary["seed queries in"] == 171
    dropped = sum(v for k, v in summary.items() if k.startswith("seeds dropped: "))
    assert summary["seed queries kept"] + dropped == summary["seed queries in"]
    assert summary["queries out"] == len(frame)
    assert summary["expansion requests"] == 0


async def test_rows_survive_parquet_and_runs_are_deterministic(tmp_path: Path) -> None:
    first = await build_query_collection(demo_config(), CATALOG, seed=3)
    second = await build_query_collection(demo_config(), CATALOG, seed=3)
    assert first.query_rows() == second.query_rows()
    assert first.reject_rows() == second.reject_rows()
    frame = pd.DataFrame(first.query_rows())
    frame.to_parquet(tmp_path / "queries.parquet")
    back = pd.read_parquet(tmp_path / "queries.parquet")
    assert list(back.columns[: len(QUERY_COLUMNS)]) == QUERY_COLUMNS
    assert list(back.loc[0, "tool_ids"]) == list(frame.loc[0, "tool_ids"])
    # With the published column types (what the store is given).
    for rows, features, name in [
        (first.query_rows(), QUERY_FEATURES, "q2"),
        (first.tool_rows(), TOOL_FEATURES, "t2"),
        (first.reject_rows(), REJECT_FEATURES, "r2"),
    ]:
        datasets.Dataset.from_list(rows, features=features).to_parquet(tmp_path / f"{name}.parquet")
    typed = pd.read_parquet(tmp_path / "q2.parquet")
    assert list(typed.columns[: len(QUERY_COLUMNS)]) == QUERY_COLUMNS
    original = first.query_rows()
    for i in (0, len(original) - 1):
        for column in ("parent_ids", "tool_ids", "pii_placeholders", "tool_hints"):
            assert list(typed.loc[i, column]) == original[i][column]
    tools = datasets.Dataset.from_parquet(str(tmp_path / "t2.parquet"), features=TOOL_FEATURES)
    assert tools[0]["parameters"] == first.tools[0].parameters
    pd.DataFrame(first.reject_rows()).to_parquet(tmp_path / "rejects.parquet")
    assert list(pd.read_parquet(tmp_path / "rejects.parquet").columns) == [
        "stage",
        "reason",
        "item_id",
        "detail",
    ]


async def test_expansion_tops_up_thin_sets_with_provenance() -> None:
    teacher = ScriptedTeacher(distinct_queries)
    result = await build_query_collection(demo_config(), CATALOG, seed=0, gateway=teacher)
    frame = pd.DataFrame(result.query_rows())
    expanded = frame[frame["source"] == "expanded"]
    assert len(expanded) > 0 and len(teacher.requests) > 0
    seeds = frame[frame["source"] == "seed"].set_index("id")
    for _, row in expanded.iterrows():
        assert row["id"].startswith("x-") and len(row["parent_ids"]) > 0
        parents = seeds.loc[list(row["parent_ids"])]
        assert set(parents["set_id"]) == {row["set_id"]}
        assert set(parents["scenario"]) == {row["scenario"]}
        assert row["lang"] == parents["lang"].iloc[0]
        assert len(row["tool_ids"]) >= 3
    assert all(len(s.member_ids) == 5 for s in result.sets)  # every thin set was filled
    summary = {r["metric"]: r["value"] for r in result.summary}
    assert summary["expanded queries kept"] == len(expanded)
    assert summary["sets with fewer than 5"] == 0
    assert summary["queries out"] == len(frame)
    dropped = sum(v for k, v in summary.items() if k.startswith("expansions dropped: "))
    assert summary["expanded queries kept"] + dropped == summary["expanded queries asked for"]


async def test_expansion_cap_dedup_surplus_and_failures() -> None:
    def answers(call: int, n: int, user: str) -> str:
        if call == 1:
            return "this is not json"
        if call in (2, 3, 4):  # first a seed's copy, a near copy or another language; too many
            if "Simplified Chinese" in user:
                planted = [
                    "明天北京会下雨吗？需要带伞吗？",
                    "明天北京会下雨吗？要带伞吗？",
                    "An English one.",
                ]
            else:
                planted = [
                    "Will it snow in Denver tomorrow morning?",
                    "Will it snow in Denver tomorrow morning, do you think?",
                    "这是一个中文问题吗？",
                ]
            made = json.loads(distinct_queries(call, n + 1, user))["queries"]
            return json.dumps({"queries": [planted[call - 2], *made]}, ensure_ascii=False)
        return distinct_queries(call, n, user)

    teacher = ScriptedTeacher(answers)
    cfg = demo_config(expansion_max_new=6, expansion_rounds=2)
    result = await build_query_collection(cfg, CATALOG, seed=0, gateway=teacher)
    expanded = [q for q in result.queries if q.source == "expanded"]
    assert 0 < len(expanded) <= 6
    asked = sum(
        r.response_format["json_schema"]["schema"]["properties"]["queries"]["maxItems"]  # type: ignore[index]
        for r in teacher.requests
    )
    assert asked <= 6 + 6  # each round asks at most for what the cap still allows
    reasons = {r.reason for r in result.rejects}
    assert {
        "expansion_failed",
        "exact_duplicate",
        "near_duplicate",
        "expansion_surplus",
        "language_mismatch",
    } <= reasons
    failed = next(r for r in result.rejects if r.reason == "expansion_failed")
    assert failed.item_id.endswith("#round0") and "not valid JSON" in failed.detail
    # The failed set is asked again in round 1: same prompt (nothing to avoid), next seed.
    first = teacher.requests[0]
    assert any(r.messages == first.messages and r.seed == 1 for r in teacher.requests[1:])


async def test_second_round_lists_earlier_expansions_to_avoid() -> None:
    def few(call: int, n: int, user: str) -> str:  # one fewer than asked for, at least one
        made = json.loads(distinct_queries(call, n, user))["queries"]
        return json.dumps({"queries": made[: max(n - 1, 1)]}, ensure_ascii=False)

    teacher = ScriptedTeacher(few)
    cfg = demo_config(expansion_rounds=2)
    await build_query_collection(cfg, CATALOG, seed=0, gateway=teacher)
    later = [r for r in teacher.requests if "already exist" in r.messages[1]["content"]]
    assert later, "a second round should list the queries made in the first"
    assert all(r.seed == 1 for r in later)  # seed + round: a distinct request for the cache


async def test_gateway_failures() -> None:
    class Failing:
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        async def chat(self, role: str, request: ChatRequest, *, stage: str) -> ChatResult:
            raise self.exc

    result = await build_query_collection(
        demo_config(expansion_rounds=1), CATALOG, gateway=Failing(GatewayError("teacher down"))
    )
    failed = [r for r in result.rejects if r.reason == "expansion_failed"]
    assert failed and all("teacher down" in r.detail for r in failed)
    with pytest.raises(BudgetExceeded):
        await build_query_collection(demo_config(), CATALOG, gateway=Failing(BudgetExceeded("cap")))


async def test_expansion_off_and_pii_drop() -> None:
    teacher = ScriptedTeacher(distinct_queries)
    result = await build_query_collection(
        demo_config(expand=False, pii_action="drop"), CATALOG, gateway=teacher
    )
    assert teacher.requests == []
    assert sum(r.reason == "pii" for r in result.rejects) >= 5
    assert all(not q.pii_placeholders for q in result.queries)
    assert isinstance(result, QueryCollection)


async def test_bad_inputs_stop_before_anything_is_made(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"text": "ok query", "tools": ["no_such_tool"]}\n', "utf-8")
    with pytest.raises(InputError, match=r"seeds\.jsonl: line 1: field 'tools\[0\]'"):
        await build_query_collection(demo_config(seed_queries=str(seeds)), CATALOG)


# --------------------------------------------------------------------------- config


def test_config_defaults_point_at_the_bundled_demo() -> None:
    cfg = RunConfig().queries
    assert (PROJECT_ROOT / cfg.seed_queries).is_file()
    assert (PROJECT_ROOT / RunConfig().environments.catalog).is_file()
    assert cfg.set_size == 5 and cfg.tools_min <= cfg.tools_max
    for name, field in CollectQueriesConfig.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_chars": 50, "max_chars": 10}, "min_chars"),
        ({"tools_min": 9, "tools_max": 3}, "tools_min"),
        ({"near_dup_threshold": 0}, "near_dup_threshold"),
        ({"set_size": 0}, "set_size"),
        ({"pii_action": "mask"}, "pii_action"),
        ({"typo_field": 1}, "typo_field"),
    ],
)
def test_config_errors_name_the_field(tmp_path: Path, changes: dict, message: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"queries": changes}), "utf-8")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_config_yaml_section(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "queries": {
                    "seed_queries": "mine.parquet",
                    "text_column": "question",
                    "set_size": 4,
                    "languages": [],
                }
            }
        ),
        "utf-8",
    )
    cfg = load_config(path).queries
    assert (cfg.seed_queries, cfg.text_column, cfg.set_size, cfg.languages) == (
        "mine.parquet",
        "question",
        4,
        [],
    )


class JudgingTeacher(ScriptedTeacher):
    """Writes one debris query and distinct ones; as the judge, scores a query low when it
    mentions a harbor."""

    async def chat(self, role: str, request: ChatRequest, *, stage: str) -> ChatResult:
        if role == "judge":
            text = request.messages[1]["content"].split("Request: ")[1]
            score = 2 if "harbor" in text else 8
            return ChatResult(content=json.dumps({"rationale": "r", "score": score}),
                              model="scripted")
        return await super().chat(role, request, stage=stage)


async def test_expansions_pass_debris_and_judge_gates() -> None:
    def answers(call: int, n: int, user: str) -> str:
        made = json.loads(distinct_queries(call, n, user))["queries"]
        if call == 1:
            made[0] = "[a-zA-Z]方向如[a-zA-Z]{6}的路线"
        return json.dumps({"queries": made}, ensure_ascii=False)

    teacher = JudgingTeacher(answers)
    result = await build_query_collection(demo_config(expansion_min_judge_score=5), CATALOG, seed=0,
                                          gateway=teacher)
    reasons = {r.reason for r in result.rejects}
    assert "expansion_regex_debris" in reasons and "expansion_judged_low" in reasons
    kept = [q.text for q in result.queries if q.source == "expanded"]
    assert kept and not any("harbor" in t for t in kept)
