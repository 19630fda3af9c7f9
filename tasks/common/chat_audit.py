"""The training-set audit, with the student's tokenizer and the chat template training uses.

Each sample is rendered and tokenised once by ``apply_chat_template(..., tools=...,
return_assistant_tokens_mask=True)``: the template's ``{% generation %}`` blocks mark the tokens
the assistant-only loss trains on, exactly as TRL's SFTTrainer will see them. From that come
the token length distribution, the rows over ``max_length``, the fraction of tokens trained
(assistant tokens within ``max_length`` over all tokens within it), and the rows with no
trainable token (which SFTTrainer refuses, so they are dropped).

Which template: :func:`training_chat_template` — an explicit file, else the student's own
template when it has generation markers, else TRL's training variant of it, else, for ChatML
models such as the embedded SmolLM2 (whose template knows neither tools nor generation markers),
``templates/chatml_training.j2``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentune.paths import templates_dir

CHATML_TRAINING_TEMPLATE = "chatml_training.j2"


def training_chat_template(tokenizer: Any, override: str | Path | None = None) -> tuple[str, str]:
    """(template text, where it came from) for rendering training samples with ``tokenizer``."""
    from trl.chat_template_utils import (
        get_training_chat_template,
        has_generation_markers,
    )

    if override is not None:
        path = Path(override)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: chat template file not found")
        return path.read_text(encoding="utf-8"), str(path)
    own = tokenizer.chat_template
    if own and has_generation_markers(own):
        return own, "the student's own template"
    if own:
        try:
            patched = get_training_chat_template(tokenizer)
        except ValueError:  # TRL has no training variant of this template
            patched = None
        if patched:
            return patched, "TRL's training variant of the student's template"
        if "<|im_start|>" in own:
            path = templates_dir() / CHATML_TRAINING_TEMPLATE
            return path.read_text(encoding="utf-8"), f"templates/{CHATML_TRAINING_TEMPLATE}"
    raise ValueError(
        "the student's chat template has no {% generation %} markers and no known training "
        "variant: set dataset.chat_template to a template file with them"
    )


@dataclass(frozen=True)
class RowAudit:
    n_tokens: int
    """Tokens of the whole rendered sample (steps form: of all its examples)."""
    n_trained: int
    """Assistant tokens within max_length: what the loss is computed on after truncation."""
    max_length: int
    examples: tuple[int, ...] = ()
    """Steps form: each example's length (a row trains as one example per step); empty: the
    row is one example of ``n_tokens``."""

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.examples or (self.n_tokens,)

    @property
    def over_max_length(self) -> bool:
        return max(self.lengths) > self.max_length

    @property
    def tokens_seen(self) -> int:
        """Tokens the trainer feeds the model (each example truncated to max_length)."""
        return sum(min(n, self.max_length) for n in self.lengths)


class ChatAuditor:
    """The student's tokenizer with the training chat template, and ``max_length``."""

    def __init__(self, model_path: str | Path, *, max_length: int,
                 chat_template: str | Path | None = None) -> None:
        from transformers import AutoTokenizer

        self.model_path = Path(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.template, self.template_origin = training_chat_template(self.tokenizer, chat_template)
        self.max_length = max_length

    def encode(self, messages: Sequence[Mapping[str, Any]],
               tools: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
        """Token ids of the rendered sample and its assistant mask (1 = trained)."""
        out: Any = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tools=[dict(t) for t in tools] or None,
            chat_template=self.template, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True,
        )
        return list(out["input_ids"]), list(out["assistant_masks"])

    def audit(self, messages: Sequence[Mapping[str, Any]],
              tools: Sequence[Mapping[str, Any]]) -> RowAudit:
        ids, mask = self.encode(messages, tools)
        return RowAudit(len(ids), int(sum(mask[: self.max_length])), self.max_length)

    def audit_steps(self, steps: Sequence[Mapping[str, Any]]) -> RowAudit:
        """The row in the ``steps`` form: each step one example, its prompt as the user turn
        and its completion as the assistant turn (how the trainer renders them)."""
        lengths, trained = [], 0
        for step in steps:
            ids, mask = self.encode([{"role": "user", "content": step["prompt"]},
                                     {"role": "assistant", "content": step["completion"]}], [])
            lengths.append(len(ids))
            trained += int(sum(mask[: self.max_length]))
        return RowAudit(sum(lengths), trained, self.max_length, tuple(lengths))


_QUANTILES = (50, 90, 99)


def length_histogram(lengths: Sequence[int], max_length: int) -> dict[str, int]:
    """Row counts in power-of-two buckets of token length, up to max_length, then over it."""
    edges = [2**k for k in range(6, 64) if 2**k < max_length] + [max_length]
    counts: dict[str, int] = {}
    low = 0
    for high in edges:
        counts[f"{low + 1}-{high}"] = sum(1 for n in lengths if low < n <= high)
        low = high
    counts[f">{max_length}"] = sum(1 for n in lengths if n > max_length)
    return counts


def audit_summary(audits: Sequence[RowAudit], max_length: int) -> dict[str, Any]:
    """The audit numbers for a set of rows (they go into the manifest and the dataset card);
    lengths are those of the training examples (a steps-form row is one example per step)."""
    if not audits:
        return {"rows": 0}
    tokens = np.array([n for a in audits for n in a.lengths])
    seen = int(sum(a.tokens_seen for a in audits))
    trained = int(sum(a.n_trained for a in audits))
    summary: dict[str, Any] = {
        "rows": len(audits),
        "examples": len(tokens),
        "tokens": int(tokens.sum()),
        "tokens_seen": seen,
        "tokens_trained": trained,
        "trained_fraction": round(trained / seen, 4) if seen else 0.0,
        "length_min": int(tokens.min()),
        "length_mean": round(float(tokens.mean()), 1),
        **{f"length_p{q}": int(np.percentile(tokens, q, method="inverted_cdf"))
           for q in _QUANTILES},
        "length_max": int(tokens.max()),
        "over_max_length": sum(1 for a in audits if a.over_max_length),
        "no_trainable_token": sum(1 for a in audits if a.n_trained == 0),
        "histogram": length_histogram(tokens.tolist(), max_length),
    }
    return summary
