"""OpenAI's ``frequency_penalty`` and ``presence_penalty`` for the local provider's ``generate``.

The guard against degenerate repetition. Greedy decoding of a small model can fall into a loop
("09:30 星期一</tid>2025-06-02 09:30 星期一</tid>20CA150120256C2222222222..."): on the 135M such
loops, in one dtype and not in the other, were among the rejections of an fp32 `make demo` that
published 19 verified trajectories where bf16 had published 36. The penalties are OpenAI's, so the same request means
the same thing to an API, to vLLM and here: each token's logit is lowered by
``frequency_penalty`` times the number of times the row has generated it so far, plus
``presence_penalty`` once it has appeared at all. Only the answer counts, not the prompt: a reply
may and must repeat the facts it was given.

The penalties run before the grammar's mask (tasks/llm/row_grammars.py), so the grammar is always
honoured: they reorder what it allows, and a token it forces stays forced.
"""

from __future__ import annotations

import torch
import transformers


class TokenPenalties(transformers.LogitsProcessor):
    """One use per ``generate`` call: row ``i`` is penalised by ``frequency[i]`` and
    ``presence[i]`` (0 leaves it as it is)."""

    def __init__(self, frequency: list[float], presence: list[float]) -> None:
        if len(frequency) != len(presence):
            raise ValueError("one frequency and one presence penalty per row")
        self.frequency = torch.tensor(frequency, dtype=torch.float32).unsqueeze(1)
        self.presence = torch.tensor(presence, dtype=torch.float32).unsqueeze(1)
        self.counts: torch.Tensor | None = None
        """``[rows, vocab]``: each token's count in the answer so far (None before the first
        step: the first call sees only the prompt)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 ) -> torch.FloatTensor:
        if self.counts is None:
            self.counts = torch.zeros(scores.shape, dtype=torch.float32)
        else:  # the token each row got in the last step
            last = input_ids[:, -1:].to("cpu")
            self.counts.scatter_add_(1, last, torch.ones(last.shape, dtype=torch.float32))
        penalty = self.frequency * self.counts + self.presence * (self.counts > 0)
        return scores - penalty.to(device=scores.device, dtype=scores.dtype)
