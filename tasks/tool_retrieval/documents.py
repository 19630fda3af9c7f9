"""The views of a tool that retrieval indexes.

``both``: the tool as the catalog writes it (the demo's descriptions carry an English and a
Chinese sentence). ``en``: every CJK character stripped from its description and parameter
descriptions, the cross-language setting: a Chinese request against an English-only catalog,
where BM25 has no shared word to match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.selection import tool_document

CatalogView = Literal["both", "en"]
# CJK ideographs, CJK punctuation and full-width forms.
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]+")


def strip_cjk(text: str) -> str:
    return " ".join(_CJK.sub(" ", text).split())


def _strip_schema(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: strip_cjk(v) if k == "description" and isinstance(v, str) else _strip_schema(v)
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [_strip_schema(v) for v in schema]
    return schema


def english_only(tool: ToolSpec) -> ToolSpec:
    return ToolSpec(tool.name, strip_cjk(tool.description), _strip_schema(tool.parameters))


def catalog_view(tools: Sequence[ToolSpec], view: CatalogView) -> list[ToolSpec]:
    return list(tools) if view == "both" else [english_only(t) for t in tools]


def tool_text(tool: ToolSpec) -> str:
    """What the dense encoder embeds for a tool: the same text BM25 indexes."""
    return tool_document(tool)
