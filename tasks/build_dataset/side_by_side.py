"""A relevance flip beside the row it was made from, as ``agentune show sft_dataset`` prints it:
the offered tools (by name), then each message (role, text, calls), the source on the left."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from itertools import zip_longest
from typing import Any

import pandas as pd

from agentune.tasks.build_dataset.derivations import tool_name

WIDTH = 60


def _decoded(value: Any) -> Any:
    """A ``Json()`` cell as pandas reads it (JSON text) or as datasets does (decoded)."""
    if isinstance(value, str):
        return json.loads(value)
    return [_decoded(v) for v in value] if not isinstance(value, Mapping) else value


def _call(call: Mapping[str, Any]) -> str:
    """A tool call (OpenAI's ``{"function": {...}}`` or flat) as ``name({arguments})``."""
    fn = call.get("function") or call
    return f"{fn.get('name')}({json.dumps(fn.get('arguments'), ensure_ascii=False)})"


def _lines(row: Mapping[str, Any]) -> list[str]:
    tools = [tool_name(t) for t in _decoded(row["tools"])]
    out = [f"{row['derivation']} {row['id']}", f"offer: {', '.join(tools) or '-'}"]
    for message in _decoded(row["messages"]):
        text = " ".join(str(message.get("content") or "").split())
        calls = [_call(c) for c in message.get("tool_calls") or []]
        said = " ".join([text, *(f"-> {c}" for c in calls)]).strip()
        out += textwrap.wrap(f"{message.get('role')}: {said}", WIDTH) or [""]
    return out


def flip_beside_source(frame: pd.DataFrame) -> str | None:
    """The first relevance flip of an sft_dataset table beside its source, or None when the
    table holds no flip whose source is in it."""
    if "derivation" not in frame.columns:
        return None
    by_id = frame.set_index("id", drop=False)
    for _, flip in frame[frame["derivation"] == "flip"].iterrows():
        if flip["derived_from"] in by_id.index:
            source = by_id.loc[flip["derived_from"]]
            pairs = zip_longest(_lines(source), _lines(flip), fillvalue="")
            return "\n".join(f"{left:<{WIDTH}} | {right}" for left, right in pairs)
    return None
