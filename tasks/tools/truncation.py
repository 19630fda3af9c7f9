"""Cutting an observation down to a token budget before it joins the agent's memory.

The sides follow MindSpeed-RL's ``tool_response_truncate_side`` (and verl's agent loop, where the
setting comes from): ``left`` keeps the beginning, ``right`` keeps the end, ``middle`` keeps both
ends and drops the middle. Note that this is the opposite of a Hugging Face tokenizer's
``truncation_side``, which names the side that is removed.

With a tokenizer (anything with Hugging Face's ``encode(text, add_special_tokens=False)`` and
``decode(ids)``) the budget is in that tokenizer's tokens and is met exactly, the marker included.
Without one it is an estimate: one token per CJK (or other wide) character, one per four ASCII
characters, one per two other characters, which errs on the long side for Qwen- and Llama-style
vocabularies.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentune.config.tools import TruncateSide

MARKERS: dict[TruncateSide, tuple[str, str]] = {
    "left": ("", " …(truncated)"),
    "right": ("(truncated)… ", ""),
    "middle": ("", " …(truncated)… "),
}
_REPLACEMENT = "\ufffd"  # what a byte-level decoder yields for a character cut in half


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class Truncation:
    text: str
    truncated: bool
    tokens: int  # size of the original text, in tokens (or estimated tokens)


def char_cost(char: str) -> float:
    """Estimated tokens for one character (see the module docstring)."""
    if char.isascii():
        return 0.25
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 1.0
    return 0.5


def estimate_tokens(text: str) -> int:
    return math.ceil(sum(char_cost(c) for c in text))


def count_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    if tokenizer is None:
        return estimate_tokens(text)
    return len(tokenizer.encode(text, add_special_tokens=False))


def truncate_observation(
    text: str, max_tokens: int, side: TruncateSide, tokenizer: Tokenizer | None = None
) -> Truncation:
    """``text`` cut to at most ``max_tokens`` tokens, keeping the part ``side`` names.

    The marker (``(truncated)``) counts against the budget; a budget smaller than the marker
    itself leaves only the marker.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if side not in MARKERS:
        raise ValueError(f"side must be left, right or middle, got {side!r}")
    if tokenizer is None:
        return _truncate_estimated(text, max_tokens, side)
    return _truncate_tokenized(text, max_tokens, side, tokenizer)


def _assemble(side: TruncateSide, head: str, tail: str) -> str:
    before, after = MARKERS[side]
    head = head.rstrip(_REPLACEMENT)
    tail = tail.lstrip(_REPLACEMENT)
    if side == "left":
        return head + after
    if side == "right":
        return before + tail
    return head + after + tail


def _split(keep: int, side: TruncateSide) -> tuple[int, int]:
    """How many units to keep at the head and at the tail."""
    if side == "left":
        return keep, 0
    if side == "right":
        return 0, keep
    return (keep + 1) // 2, keep // 2


def _truncate_tokenized(
    text: str, max_tokens: int, side: TruncateSide, tokenizer: Tokenizer
) -> Truncation:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return Truncation(text, False, len(ids))
    marker_tokens = count_tokens("".join(MARKERS[side]), tokenizer)
    keep = max(max_tokens - marker_tokens, 0)
    while True:
        head_n, tail_n = _split(keep, side)
        head = tokenizer.decode(ids[:head_n]) if head_n else ""
        tail = tokenizer.decode(ids[len(ids) - tail_n :]) if tail_n else ""
        result = _assemble(side, head, tail)
        # Tokens can merge differently across the joins: re-count, and give back the excess.
        excess = count_tokens(result, tokenizer) - max_tokens
        if excess <= 0 or keep == 0:
            return Truncation(result, True, len(ids))
        keep = max(keep - excess, 0)


def _truncate_estimated(text: str, max_tokens: int, side: TruncateSide) -> Truncation:
    costs = [char_cost(c) for c in text]
    total = math.ceil(sum(costs))
    if total <= max_tokens:
        return Truncation(text, False, total)
    budget = max_tokens - estimate_tokens("".join(MARKERS[side]))
    head_budget, tail_budget = _split(max(budget, 0), side)
    head_end = _fit(costs, head_budget)
    tail_len = _fit(costs[::-1], tail_budget)
    tail = text[len(text) - tail_len :] if tail_len else ""
    return Truncation(_assemble(side, text[:head_end], tail), True, total)


def _fit(costs: Sequence[float], budget: float) -> int:
    """How many leading characters fit in ``budget`` estimated tokens."""
    used = 0.0
    for i, cost in enumerate(costs):
        used += cost
        if used > budget:
            return i
    return len(costs)
