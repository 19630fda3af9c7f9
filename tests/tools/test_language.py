"""Tool descriptions cut to the request's language: the bilingual demo catalog's English or Chinese
sentence, an abbreviation or a quoted example in the other script left in its sentence, and a
description with nothing in that language kept whole."""

from __future__ import annotations

import pytest

from agentune.paths import PROJECT_ROOT
from agentune.tasks.tools.catalog import ToolSpec, load_tool_catalog
from agentune.tasks.tools.language import in_language, tool_in_language

BILINGUAL = ("Search flights between two cities on a date, with prices and free seats. "
             "按日期查询两城之间的航班、票价和余票。")


@pytest.mark.parametrize(("lang", "expected"), [
    ("en", "Search flights between two cities on a date, with prices and free seats."),
    ("zh", "按日期查询两城之间的航班、票价和余票。"),
])
def test_a_bilingual_description_keeps_the_requests_sentence(lang, expected) -> None:
    assert in_language(BILINGUAL, lang) == expected


@pytest.mark.parametrize("text", [
    'The entity or concept to look up, e.g. "Mount Everest" or "光合作用".',
    "Departure city, e.g. 北京 or Beijing.",
    "查询天气。",
    "Return the weather. Use a city name.",
])
def test_a_description_without_a_sentence_in_the_language_is_kept_whole(text) -> None:
    assert in_language(text, "zh" if text.isascii() else "en") == text


def test_chinese_first_then_english() -> None:
    text = "计算数学表达式。Calculate an expression, e.g. 3.5 * 2."
    assert in_language(text, "zh") == "计算数学表达式。"
    assert in_language(text, "en") == "Calculate an expression, e.g. 3.5 * 2."


def test_a_tool_in_a_language_keeps_its_schema_and_cuts_every_description() -> None:
    tool = ToolSpec("search_flights", BILINGUAL, {
        "type": "object", "required": ["origin"], "additionalProperties": False,
        "properties": {"origin": {"type": "string", "description": "Departure city. 出发城市。"},
                       "when": {"type": "string", "enum": ["am", "pm"]}}})
    zh = tool_in_language(tool, "zh")
    assert zh.name == tool.name and zh.description == "按日期查询两城之间的航班、票价和余票。"
    assert zh.parameters["properties"]["origin"] == {"type": "string", "description": "出发城市。"}
    assert {k: v for k, v in zh.parameters.items() if k != "properties"} == \
        {k: v for k, v in tool.parameters.items() if k != "properties"}
    assert zh.parameters["properties"]["when"] == tool.parameters["properties"]["when"]


def test_every_demo_tool_is_described_in_both_languages_and_shorter_in_each() -> None:
    for tool in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml"):
        en, zh = in_language(tool.description, "en"), in_language(tool.description, "zh")
        assert en and zh and en != zh, tool.name
        assert len(en) < len(tool.description) and len(zh) < len(tool.description), tool.name
