"""A tool as a request in one language sees it: bilingual descriptions cut to that language.

The demo catalog writes each description as an English and a Chinese sentence (so that retrieval
matches requests in both languages); a prompt for a Chinese request needs only the Chinese one,
an English request only the English one, and the other half costs tokens (a Chinese character
is 2-3 tokens in the embedded model's tokenizer). A description is split into sentences, each
tagged by its script (:func:`~agentune.tasks.common.text_cleaning.detect_language`: Han characters
weigh about as much as a Latin word, so "e.g. \\"光合作用\\"" inside an English sentence keeps it
English); the sentences of the request's language are kept. A description with no sentence in
that language (a monolingual catalog, an English-only parameter) is kept whole: a tool is never
left undescribed.
"""

from __future__ import annotations

import re
from typing import Any

from agentune.tasks.common.text_cleaning import detect_language
from agentune.tasks.tools.catalog import ToolSpec

# Where the language may change: after a Chinese full stop, question or exclamation mark, and
# after a Latin one followed by a space and a Han character (not after "e.g." before an English
# word); the terminator stays with its sentence.
_SENTENCE_END = re.compile(r"(?<=[。！？])|(?<=[.!?])\s+(?=[\u3400-\u4dbf\u4e00-\u9fff])")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def in_language(text: str, lang: str) -> str:
    """The sentences of ``text`` written in ``lang`` (``zh``; anything else: English), or the
    whole text when none is."""
    want = "zh" if lang == "zh" else "en"
    parts = sentences(text)
    kept = [s for s in parts if (detect_language(s) == "zh") == (want == "zh")]
    return " ".join(kept) if kept and len(kept) < len(parts) else text


def _schema_in_language(schema: Any, lang: str) -> Any:
    if isinstance(schema, dict):
        return {k: in_language(v, lang) if k == "description" and isinstance(v, str)
                else _schema_in_language(v, lang) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_schema_in_language(v, lang) for v in schema]
    return schema


def tool_in_language(tool: ToolSpec, lang: str) -> ToolSpec:
    """``tool`` with its description and its parameters' descriptions in ``lang`` only."""
    return ToolSpec(tool.name, in_language(tool.description, lang),
                    _schema_in_language(tool.parameters, lang))
