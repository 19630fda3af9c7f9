"""Whether a final answer states the facts a scenario requires, and whether it is an answer at all.

A fact is found when its normalised text is in the normalised answer: Unicode NFKC, case folded,
punctuation and spaces dropped (so "1,200 元" and "1200元" match), a number's thousands separators
and trailing ``.0`` removed. ``A|B`` in a fact means either wording counts (``Friday|周五``).
Free-text facts that no normalisation catches can go to the judge (position-swapped, see
:func:`judge_facts`), when the verifier is configured to use one.

Facts alone cannot tell an answer from text that merely contains them, and a request with no
facts to state (``no_tool``, ``irrelevant``) would take any text. :func:`answer_defect` names what
makes a text no answer, whatever the request: it loops (a sentence three times in a row, a short
unit six times in a row, a run of punctuation), it is a tool call or tool schema written out as text, it
carries a chat format's control tokens or the prompt's tool block, or it only restates the
request.
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


# A full stop between digits (a price, a version) ends no sentence.
_SENTENCE_END = re.compile(r"(?:(?<!\d)\.|\.(?!\d)|[!?。！？;；\n}])+")
_UNIT_LOOP = re.compile(r"(.{2,20}?)\1{5,}", re.DOTALL)  # a unit and five more copies of it
# Markdown's table, rule and emphasis characters run on legitimately ("|---|---|").
_PUNCTUATION_RUN = re.compile(r"[^\w\s|\-=*#_~`:]{8,}")
_WRITTEN_CALL = re.compile(r'<tool_call>|</tool_call>|"name"\s*:\s*"[^"]*"\s*,\s*"arguments"\s*:'
                           r'|"type"\s*:\s*"function"')
_PROMPT_LEAK = re.compile(r"<\|[^|<>\s]{1,32}\|>|</?tools>|^# Tools\b", re.MULTILINE)
SENTENCE_REPEATS = 3
"""A sentence said this many times in a row (of at least :data:`MIN_REPEATED_CHARS`; shorter
fragments between them do not count) is a loop. Not in a row, a sentence may recur: a list says
"Status: shipped" under each of its orders."""
MIN_REPEATED_CHARS = 6


def answer_defect(answer: str, request: str) -> str | None:
    """What makes ``answer`` no answer to ``request`` (see the module's docstring), or None."""
    sentences = [normalise(part) for part in _SENTENCE_END.split(answer)]
    previous, run = "", 0
    for sentence in (s for s in sentences if len(s) >= MIN_REPEATED_CHARS):
        run = run + 1 if sentence == previous else 1
        previous = sentence
        if run >= SENTENCE_REPEATS:
            return f"repeats itself ({sentence[:40]!r} {run} times in a row)"
    for loop in _UNIT_LOOP.finditer(answer):
        if any(ch.isalnum() for ch in loop.group(1)):
            return f"repeats itself ({loop.group(0)[:40]!r})"
    run = _PUNCTUATION_RUN.search(answer)
    if run:
        return f"runs on in punctuation ({run.group(0)[:20]!r})"
    written = _WRITTEN_CALL.search(answer)
    if written:
        return f"writes a tool call or schema as text ({written.group(0)[:40]!r})"
    leak = _PROMPT_LEAK.search(answer)
    if leak:
        return f"carries prompt markup ({leak.group(0)!r})"
    said, asked = normalise(answer), normalise(request)
    # The request again (once or more), or most of it cut out of it: an echo, not a reply.
    if said and asked and (not said.replace(asked, "") or
                           (said in asked and 2 * len(said) >= len(asked))):
        return "only restates the request"
    return None


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
