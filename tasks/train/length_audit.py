"""Preference pairs measured the way TRL's DPOTrainer will tokenize them, before it does.

TRL renders ``prompt`` (with its tools, generation prompt added) and ``prompt + chosen`` /
``prompt + rejected`` with the chat template, and the completion is what follows the shared
prefix. With ``truncation_mode="keep_start"`` (its only supported mode) a sequence over
``max_length`` loses the end of its completion, the decision itself, without a word, and a row
whose prompt alone fills ``max_length`` is dropped, also without a word. This audit finds both
kinds of row first, so the run refuses them (naming the rows) or leaves them out and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PairLength:
    prompt: int
    chosen: int
    rejected: int

    @property
    def longest(self) -> int:
        return self.prompt + max(self.chosen, self.rejected)

    @property
    def tokens(self) -> int:
        """Tokens TRL feeds the model for the pair: two sequences sharing the prompt."""
        return 2 * self.prompt + self.chosen + self.rejected


def pair_length(tokenizer: Any, example: Mapping[str, Any], chat_template: str) -> PairLength:
    tools = list(example.get("tools") or []) or None
    prompt = list(example["prompt"])

    def ids(messages: list[Any], **kw: Any) -> list[int]:
        return tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template,
                                             tokenize=True, return_dict=True, **kw)["input_ids"]

    asked = ids(prompt, add_generation_prompt=True)
    chosen = ids(prompt + list(example["chosen"]))
    rejected = ids(prompt + list(example["rejected"]))
    shared = min(_common_prefix(asked, chosen), _common_prefix(asked, rejected))
    return PairLength(shared, len(chosen) - shared, len(rejected) - shared)


@dataclass
class LengthAudit:
    max_length: int
    rows: int = 0
    longest: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)
    """(example index, what TRL would do to it)."""
    lengths: list[PairLength] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> dict[str, Any]:
        return {"max_length": self.max_length, "pairs": self.rows,
                "longest pair (tokens)": self.longest, "over max_length": len(self.problems)}


def audit_pairs(tokenizer: Any, examples: Sequence[Mapping[str, Any]], *, chat_template: str,
                max_length: int) -> LengthAudit:
    audit = LengthAudit(max_length=max_length, rows=len(examples))
    for i, example in enumerate(examples):
        length = pair_length(tokenizer, example, chat_template)
        audit.lengths.append(length)
        audit.longest = max(audit.longest, length.longest)
        if length.prompt >= max_length:
            audit.problems.append((i, f"its prompt with its tools is {length.prompt} tokens, "
                                   f">= max_length {max_length}: TRL would drop the pair"))
        elif length.longest > max_length:
            cut = length.longest - max_length
            audit.problems.append((i, f"prompt {length.prompt} + decision "
                                   f"{max(length.chosen, length.rejected)} tokens > max_length "
                                   f"{max_length}: TRL would cut the last {cut} tokens of the "
                                   "decision"))
    return audit
