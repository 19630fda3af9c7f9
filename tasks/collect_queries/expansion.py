"""Teacher expansion of thin query sets: the request (format_input), the answer parser
(format_output), and one async call through the LLM gateway between them.

The request asks for exactly ``n`` new queries in the set's scenario and language with a
``json_schema`` response format (``{"queries": [string, ...]}``, each string length-bounded so a
grammar-constrained local model cannot run away inside one). The prompt text is
``templates/query_expansion.j2``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.agent.prompt_templates import macro_request
from agentune.tasks.collect_queries import STAGE
from agentune.tasks.llm.types import ChatGateway, ChatRequest

TEMPLATE = "query_expansion.j2"

LANGUAGE_NAMES = {
    "zh": "Simplified Chinese (简体中文)",
    "en": "English",
    "ja": "Japanese (日本語)",
    "ko": "Korean (한국어)",
}


class ExpansionError(ValueError):
    """A teacher answer that cannot be read as a list of queries."""


def expansion_schema(n: int, max_chars: int) -> dict[str, Any]:
    """JSON Schema of the answer: exactly ``n`` strings of 2..``max_chars`` characters."""
    return {
        "type": "object",
        "properties": {
            "queries": {
                "type": "array",
                "items": {"type": "string", "minLength": 2, "maxLength": max_chars},
                "minItems": n,
                "maxItems": n,
            }
        },
        "required": ["queries"],
        "additionalProperties": False,
    }


def build_expansion_request(
    examples: Sequence[str],
    *,
    scenario: str | None,
    lang: str,
    n: int,
    max_chars: int = 160,
    avoid: Sequence[str] = (),
    temperature: float | None = 0.9,
    seed: int | None = None,
) -> ChatRequest:
    """The teacher request for ``n`` new queries like ``examples``.

    ``avoid`` lists queries made in earlier rounds, so a second round asks for something else
    (and is a different request for the response cache). ``max_tokens`` covers the worst case of
    ``n`` strings of ``max_chars`` Chinese characters (up to 3 tokens each) plus the JSON.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if not examples:
        raise ValueError("at least one example is needed")
    user = dict(
        examples=list(examples),
        scenario=scenario or "general",
        language_name=LANGUAGE_NAMES.get(lang, lang),
        n=n,
        max_chars=max_chars,
        avoid=list(avoid),
    )
    return macro_request(
        TEMPLATE, user, schema_name="query_expansion", schema=expansion_schema(n, max_chars),
        temperature=temperature,
        seed=seed,
        max_tokens=n * (3 * max_chars + 8) + 32,
    )


@dataclass
class ParsedExpansion:
    texts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """One line per answer item that was not a usable string."""


def parse_expansion(content: str | None) -> ParsedExpansion:
    """The queries in a teacher answer.

    Accepts ``{"queries": [...]}`` or a bare list; items that are not non-empty strings are
    reported in ``problems`` instead of failing the answer. Raises :class:`ExpansionError` when
    the answer is not JSON or has no list of queries.
    """
    if not content or not content.strip():
        raise ExpansionError("empty answer")
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ExpansionError(f"not valid JSON: {exc.msg} at char {exc.pos}") from None
    if isinstance(data, dict):
        if "queries" not in data:
            raise ExpansionError(f"no 'queries' key; keys are {sorted(data)}")
        data = data["queries"]
    if not isinstance(data, list):
        raise ExpansionError(f"'queries' must be a list, got {type(data).__name__}")
    parsed = ParsedExpansion()
    for i, item in enumerate(data):
        if isinstance(item, str) and item.strip():
            parsed.texts.append(item.strip())
        else:
            parsed.problems.append(f"item {i}: not a non-empty string ({json.dumps(item)[:60]})")
    return parsed


async def request_expansion(
    gateway: ChatGateway, request: ChatRequest, *, stage: str = STAGE
) -> ParsedExpansion:
    """Send a request from ``build_expansion_request`` to the teacher and parse the answer
    (may raise ExpansionError)."""
    result = await gateway.chat("teacher", request, stage=stage)
    return parse_expansion(result.content)
