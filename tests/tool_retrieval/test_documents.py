"""The English-only view strips every Chinese character from descriptions, keeps the rest."""

from __future__ import annotations

from agentune.tasks.tool_retrieval.documents import catalog_view, english_only, strip_cjk, tool_text
from agentune.tasks.tools.catalog import ToolSpec


def test_english_only_view() -> None:
    tool = ToolSpec("get_weather", "Weather of a city. 查询城市天气。",
                    {"type": "object", "properties": {"city": {
                        "type": "string", "description": "City, e.g. \"北京\" or \"Beijing\"."}}})
    en = english_only(tool)
    assert en.description == "Weather of a city."
    assert en.parameters["properties"]["city"] == {"type": "string",
                                                  "description": "City, e.g. \" \" or \"Beijing\"."}
    assert tool.description.endswith("查询城市天气。")  # the original is untouched
    assert strip_cjk("订机票，北京到上海 CA1501") == "CA1501"
    assert catalog_view([tool], "both") == [tool]
    assert "city" in tool_text(en) and "天气" not in tool_text(en)
