"""Grammar masks for some rows of a ``generate`` batch, the other rows left free.

xgrammar's own HF processor takes one grammar for every row, so the local provider used to
generate constrained and free requests in separate batches: with synthesis's mix (planning
steps under the step grammar, concluder and free requests without) eight requests in flight
became two batches of four, and every decode step ran twice. On CPU a decode step of 4 rows costs
nearly what one of 8 does (small matrix products are dominated by their fixed cost), so one
mixed batch decodes the same tokens in about half the time. Constrained rows get exactly the
mask xgrammar's processor gives them.
"""

from __future__ import annotations

import torch
import transformers
import xgrammar as xgr


class RowGrammars(transformers.LogitsProcessor):
    """One use per ``generate`` call: ``grammars[i]`` constrains row ``i``; None leaves it free."""

    def __init__(self, grammars: list[xgr.CompiledGrammar | None]) -> None:
        used = [g for g in grammars if g is not None]
        if not used:
            raise ValueError("RowGrammars needs at least one grammar")
        self.vocab_size = used[0].tokenizer_info.vocab_size
        self.matchers = {i: xgr.GrammarMatcher(g) for i, g in enumerate(grammars)
                         if g is not None}
        self.rows = sorted(self.matchers)
        self.bitmask = xgr.allocate_token_bitmask(len(grammars), self.vocab_size)
        self.started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 ) -> torch.FloatTensor:
        if self.started:  # the token each row got in the last step
            for i in self.rows:
                matcher = self.matchers[i]
                if not matcher.is_terminated() and not matcher.accept_token(
                        int(input_ids[i, -1])):
                    raise RuntimeError(f"row {i}: the grammar refused the token it allowed")
        self.started = True
        for i in self.rows:
            if not self.matchers[i].is_terminated():
                self.matchers[i].fill_next_token_bitmask(self.bitmask, i)
        device = scores.device
        if device.type != "cuda":
            scores = scores.to("cpu")
        xgr.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device),
                                        indices=self.rows)
        return scores.to(device)
