"""Whether a final answer states the facts a scenario requires.

A fact is found when its normalised text is in the normalised answer: Unicode NFKC, case folded,
punctuation and spaces dropped (so "1,200 元" and "1200元" match), a number's thousands separators
and trailing ``.0`` removed. ``A|B`` in a fact means either wording counts (``Friday|周五``).
Free-text facts that no normalisation catches can go to the judge (position-swapped, see
:func:`judge_facts`), when the verifier is configured to use one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatGateway, ChatRequest

_THOUSANDS = re.compile(r"(?<=\d)[,，](?=\d{3}\b)")
_TRAILING_ZEROS = re.compile(r"(\d+)\.0+\b")
_DROP = re.compile(r"[\s\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _THOUSANDS.sub("", text)
    text = _TRAILING_ZEROS.sub(r"\1", text)
    return _DROP.sub("", text)


def fact_found(fact: str, answer: str) -> bool:
    said = normalise(answer)
    return any(normalise(option) and normalise(option) in said for option in fact.split("|"))


def missing_facts(facts: Sequence[str], answer: str) -> list[str]:
    return [f for f in facts if not fact_found(f, answer)]


_JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"stated": {"type": "array", "items": {"type": "boolean"}}},
    "required": ["stated"], "additionalProperties": False,
}


def _judge_request(request: str, facts: Sequence[str], answer: str) -> ChatRequest:
    listed = "\n".join(f"{i}. {f}" for i, f in enumerate(facts, 1))
    return ChatRequest(
        messages=[
            {"role": "system", "content": "You check whether an assistant's answer states given "
             "facts. A fact is stated when the answer says it, in any wording or language; it is "
             "not stated when the answer omits or contradicts it. Reply with JSON only."},
            {"role": "user", "content": f"User request:\n{request}\n\nAnswer:\n{answer}\n\n"
             f"Facts:\n{listed}\n\nReply {{\"stated\": [...]}}: one true/false per fact, in "
             "order."}],
        response_format={"type": "json_schema", "json_schema": {
            "name": "facts_stated", "schema": _JUDGE_SCHEMA, "strict": True}},
        temperature=0.0, seed=0, max_tokens=16 + 8 * len(facts))


async def judge_facts(gateway: ChatGateway, request: str, facts: Sequence[str], answer: str,
                      *, stage: str) -> list[bool]:
    """Per fact, whether the judge says the answer states it, asked twice with the facts in
    opposite orders (a fact counts only when both say so: position bias cannot add one)."""
    verdicts: list[list[bool]] = []
    for order in (list(range(len(facts))), list(reversed(range(len(facts))))):
        try:
            result = await gateway.chat("judge", _judge_request(
                request, [facts[i] for i in order], answer), stage=stage)
            stated = result.parsed_content().get("stated", [])
        except (GatewayError, ValueError, AttributeError):
            return [False] * len(facts)
        if not isinstance(stated, list) or len(stated) != len(facts):
            return [False] * len(facts)
        by_fact = [False] * len(facts)
        for position, i in enumerate(order):
            by_fact[i] = stated[position] is True
        verdicts.append(by_fact)
    return [a and b for a, b in zip(*verdicts, strict=True)]
