"""Prompt prefill one row at a time, reusing the key/value states of the longest prompt prefix
seen recently, for the local provider's batched ``generate``.

Why (profiled on the synthesis requests, tests/benchmarks/test_local_generation.py): prefilling
a left-padded batch of 8 prompts of ~300-1,800 tokens spent as long in attention as in every
linear layer together. A padded batch attends over the widest prompt with an explicit mask, so
the causal half is not skipped and every pad is a query and a key; one row alone attends
causally over its own tokens. Synthesis also sends the same template, tools and earlier steps
again and again (the steps and attempts of one scenario, ~40% of its prompt tokens): those
states are taken from :class:`PrefixCache` instead of computed.

:func:`prefill_rows` prefills each prompt but its last token, then lays the rows' states
left-padded into one ``DynamicCache``; ``generate`` then runs the prompts' last tokens and
decodes the batch as before (same positions: ``generate`` counts them from the attention mask).
The batch's layers keep room for the tokens still to come (:class:`RoomyLayer`), so a decode step
writes its token in place instead of copying the whole cache.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer: keys and values of one row, ``[1, kv_heads, tokens, head_dim]``."""


@dataclass
class _Entry:
    ids: torch.Tensor
    layers: KV
    bytes: int


class PrefixCache:
    """The key/value states of recent prompts (one row each), least recently used dropped first
    once they hold more than ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._held = 0
        self._next = 0
        self.reused_tokens = 0
        self.computed_tokens = 0

    def longest(self, ids: torch.Tensor) -> tuple[int, KV | None]:
        """The longest cached prefix of ``ids``: its length and the entry holding it."""
        best, found, key = 0, None, None
        for k, entry in self._entries.items():
            n = min(len(entry.ids), len(ids))
            if n <= best:
                continue
            same = entry.ids[:n] == ids[:n]
            shared = n if bool(same.all()) else int((~same).nonzero()[0])
            if shared > best:
                best, found, key = shared, entry.layers, k
        if key is not None:
            self._entries.move_to_end(key)
        return best, found

    def add(self, ids: torch.Tensor, layers: KV) -> None:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                   for k, v in layers)
        if size > self.max_bytes:
            return
        self._entries[self._next] = _Entry(ids, layers, size)
        self._next += 1
        self._held += size
        while self._held > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._held -= dropped.bytes

    def clear(self) -> None:
        self._entries.clear()
        self._held = 0


def _row_states(model: PreTrainedModel, ids: torch.Tensor, prefixes: PrefixCache) -> KV:
    """Keys and values of every token of ``ids`` (one row), from the cache where it can."""
    reuse, cached = prefixes.longest(ids)
    cache = DynamicCache(config=model.config)
    if cached is not None and reuse:
        # Slices: the cat in DynamicLayer.update leaves the cached tensors as they are.
        cache = DynamicCache(ddp_cache_data=[(k[:, :, :reuse], v[:, :, :reuse])
                                             for k, v in cached], config=model.config)
    if reuse < len(ids):
        model(input_ids=ids[reuse:].unsqueeze(0),
              position_ids=torch.arange(reuse, len(ids), device=ids.device).unsqueeze(0),
              cache=cache, use_cache=True, logits_to_keep=1)
    prefixes.reused_tokens += reuse
    prefixes.computed_tokens += len(ids) - reuse
    layers = [(layer.keys, layer.values) for layer in cache.layers]
    if reuse < len(ids):
        prefixes.add(ids, layers)
    return layers


class RoomyLayer(DynamicLayer):
    """A full-attention layer's keys and values as views of buffers with room to grow: a decode
    step writes its token in place. ``DynamicLayer`` concatenates, copying every cached token at
    every step; profiled on the synthesis requests (8 rows of ~1,000-1,800 tokens, the 135M's 30
    layers) that copy was ~300 MB a step, more than the step's matrix products. The buffers
    double when full."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.length = 0
        shape = (*keys.shape[:2], keys.shape[2] + max(room, 1), keys.shape[3])
        self._keys = keys.new_zeros(shape)
        self._values = values.new_zeros(shape)
        self.update(keys, values)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            grown = max(end, 2 * self._keys.shape[-2])
            self._keys = F.pad(self._keys, (0, 0, 0, grown - self._keys.shape[-2]))
            self._values = F.pad(self._values, (0, 0, 0, grown - self._values.shape[-2]))
        self._keys[:, :, self.length:end] = key_states
        self._values[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values


def prefill_rows(model: PreTrainedModel, prompts: list[list[int]], prefixes: PrefixCache,
                 device: torch.device, room: int = 0) -> DynamicCache:
    """The batch's cache for every prompt but its last token, each row left-padded (with zeros,
    masked by the attention mask) to the longest, with ``room`` for as many tokens more (the
    prompts' last tokens and the answers). Every prompt has at least 2 tokens."""
    rows = [_row_states(model, torch.tensor(p[:-1], device=device), prefixes) for p in prompts]
    width = max(len(p) for p in prompts) - 1
    padded = []
    for layer in range(len(rows[0])):
        keys, values = [], []
        for row in rows:
            k, v = row[layer]
            pad = (0, 0, width - k.shape[-2], 0)  # on the token axis, at the left
            keys.append(F.pad(k, pad))
            values.append(F.pad(v, pad))
        padded.append((torch.cat(keys), torch.cat(values)))
    cache = DynamicCache(ddp_cache_data=padded, config=model.config)
    # Sliding-window layers (none in the models used here) keep their own update.
    cache.layers = [RoomyLayer(layer.keys, layer.values, room) if type(layer) is DynamicLayer
                    else layer for layer in cache.layers]
    return cache
