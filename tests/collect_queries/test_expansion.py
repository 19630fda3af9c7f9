"""Expansion of thin query sets: the teacher request, the answer parser, one gateway call."""

from __future__ import annotations

import json

import jsonschema
import pytest

from agentune.paths import templates_dir
from agentune.tasks.collect_queries.expansion import (
    ExpansionError,
    build_expansion_request,
    expansion_schema,
    parse_expansion,
    request_expansion,
)
from agentune.tasks.llm.types import ChatRequest, ChatResult

EXAMPLES = ["明天北京会下雨吗？", "上海这周末气温多少度？"]


class CannedGateway:
    """Answers every chat with a fixed ChatResult and remembers what it was asked."""

    def __init__(self, content: str | None) -> None:
        self.content = content
        self.calls: list[tuple[str, ChatRequest, str]] = []

    async def chat(self, role: str, request: ChatRequest, *, stage: str) -> ChatResult:
        self.calls.append((role, request, stage))
        return ChatResult(content=self.content, finish_reason="stop", model="canned")


def test_template_ships_with_the_package() -> None:
    assert (templates_dir() / "query_expansion.j2").is_file()


def test_request_asks_for_n_queries_in_the_scenario_and_language() -> None:
    request = build_expansion_request(
        EXAMPLES, scenario="weather", lang="zh", n=3, max_chars=60, temperature=0.7, seed=4
    )
    system, user = request.messages
    assert system["role"] == "system" and "JSON" in system["content"]
    assert user["role"] == "user"
    for text in EXAMPLES:
        assert text in user["content"]
    assert '"weather"' in user["content"]
    assert "Simplified Chinese" in user["content"]
    assert "Write 3 new user requests" in user["content"]
    assert "At most 60 characters" in user["content"]
    assert "already exist" not in user["content"]
    fmt = request.response_format
    assert fmt is not None and fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert schema == expansion_schema(3, 60)
    assert schema["properties"]["queries"]["minItems"] == 3
    assert schema["properties"]["queries"]["maxItems"] == 3
    assert schema["properties"]["queries"]["items"]["maxLength"] == 60
    assert (request.temperature, request.seed) == (0.7, 4)
    assert request.max_tokens is not None and request.max_tokens >= 3 * 60 * 3
    # The request is plain JSON (cacheable) and its key is stable.
    json.dumps(request.model_dump(exclude_none=True), ensure_ascii=False)
    again = build_expansion_request(
        EXAMPLES, scenario="weather", lang="zh", n=3, max_chars=60, temperature=0.7, seed=4
    )
    assert again.cache_key("local", "m") == request.cache_key("local", "m")


def test_a_later_round_lists_what_to_avoid_and_is_a_new_request() -> None:
    first = build_expansion_request(EXAMPLES, scenario="weather", lang="zh", n=2)
    second = build_expansion_request(
        EXAMPLES, scenario="weather", lang="zh", n=2, avoid=["广州明天热吗？"]
    )
    assert "already exist" in second.messages[1]["content"]
    assert "广州明天热吗？" in second.messages[1]["content"]
    assert first.cache_key("local", "m") != second.cache_key("local", "m")


def test_english_and_unknown_scenario() -> None:
    request = build_expansion_request(["What is 2+2?"], scenario=None, lang="en", n=1)
    content = request.messages[1]["content"]
    assert "in English" in content and '"general"' in content
    assert "Write 1 new user request " in content


def test_bad_request_arguments() -> None:
    with pytest.raises(ValueError):
        build_expansion_request(EXAMPLES, scenario="x", lang="zh", n=0)
    with pytest.raises(ValueError):
        build_expansion_request([], scenario="x", lang="zh", n=2)


def test_parse_valid_answers() -> None:
    answer = {"queries": ["杭州明天有雨吗？", " Will it hail in Denver? "]}
    jsonschema.validate(answer, expansion_schema(2, 60))
    parsed = parse_expansion(json.dumps(answer, ensure_ascii=False))
    assert parsed.texts == ["杭州明天有雨吗？", "Will it hail in Denver?"] and parsed.problems == []
    assert parse_expansion('["a query", "b query"]').texts == ["a query", "b query"]


def test_parse_reports_bad_items_without_losing_good_ones() -> None:
    parsed = parse_expansion('{"queries": ["good one", 3, "", null, {"q": 1}, "another"]}')
    assert parsed.texts == ["good one", "another"]
    assert [p.split(":")[0] for p in parsed.problems] == ["item 1", "item 2", "item 3", "item 4"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "empty answer"),
        ("   ", "empty answer"),
        ('{"queries": ["unterminated', "not valid JSON"),
        ('{"items": []}', "no 'queries' key"),
        ('{"queries": "one string"}', "must be a list"),
        ("42", "must be a list"),
    ],
)
def test_parse_rejects_unusable_answers(content: str | None, message: str) -> None:
    with pytest.raises(ExpansionError, match=message):
        parse_expansion(content)


async def test_request_expansion_calls_the_teacher_through_the_gateway() -> None:
    gateway = CannedGateway(json.dumps({"queries": ["深圳今晚会降温吗？", "南京周日适合爬山吗？"]}))
    request = build_expansion_request(EXAMPLES, scenario="weather", lang="zh", n=2, seed=9)
    parsed = await request_expansion(gateway, request)
    assert parsed.texts == ["深圳今晚会降温吗？", "南京周日适合爬山吗？"]
    [(role, request, stage)] = gateway.calls
    assert (role, stage) == ("teacher", "collect_queries")
    assert request.seed == 9 and request.response_format is not None


async def test_request_expansion_raises_on_a_broken_answer() -> None:
    with pytest.raises(ExpansionError):
        request = build_expansion_request(EXAMPLES, scenario="w", lang="zh", n=2)
        await request_expansion(CannedGateway("not json"), request)
