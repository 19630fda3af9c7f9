"""Row prefill with prefix reuse (tasks/llm/row_prefill.py) against the left-padded batch prefill
it replaced: the same states, the same greedy answers, shared prefixes computed once.

A tiny random Llama (2 layers, grouped KV heads), built in seconds; the greedy answers compared in
fp32 and in bf16 (the two dtypes the precision policy picks on CPU)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentune.config.llm import RoleConfig
from agentune.tasks.llm.local_provider import LocalProvider
from agentune.tasks.llm.row_prefill import PrefixCache, RoomyLayer, prefill_rows
from agentune.tasks.llm.types import ChatRequest

from support.tiny_models import tiny_llama

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
          "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")
SCHEMA = {"type": "object", "properties": {"tool": {"type": "string", "enum": ["a", "b"]},
                                           "note": {"type": "string", "maxLength": 12}},
          "required": ["tool", "note"]}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = ["You are an agent. Tools: search, weather, calculator. Step 1: call a tool."] * 4
    return tiny_llama(tmp_path_factory.mktemp("tiny"), corpus, chat_template=CHATML,
                      vocab_size=300, max_positions=2048, hidden_size=64)


def _requests() -> list[ChatRequest]:
    """Prompts of different lengths sharing a long head, as synthesis steps do."""
    head = "You are an agent. Tools: search, weather, calculator. " * 6
    tails = ["Step 1: call a tool.", "Step 2: search returned 3 rows; call the next tool.",
             "Q?", "Step 3: " + "the weather is fine. " * 5]
    out = []
    for i, tail in enumerate(tails):
        out.append(ChatRequest(messages=[{"role": "system", "content": head},
                                          {"role": "user", "content": tail}],
                               max_tokens=12, temperature=0.0,
                               response_format={"type": "json_schema", "json_schema": {
                                   "name": "s", "schema": SCHEMA}} if i % 2 else None))
    return out


def test_row_states_equal_a_full_forward(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 20, 21], [30, 31]]
    prefixes = PrefixCache(2**30)
    with torch.inference_mode():
        cache = prefill_rows(model, prompts, prefixes, torch.device("cpu"))
        for row, prompt in enumerate(prompts):
            alone = model(input_ids=torch.tensor([prompt[:-1]]), use_cache=True).cache
            for layer, batched in zip(alone.layers, cache.layers, strict=True):
                n = len(prompt) - 1
                torch.testing.assert_close(batched.keys[row, :, -n:], layer.keys[0])
                torch.testing.assert_close(batched.values[row, :, -n:], layer.values[0])
                assert not batched.keys[row, :, : 6 - n].any()  # zero pads at the left
    # The second prompt shares 4 tokens with the first: computed once.
    assert prefixes.reused_tokens == 4 and prefixes.computed_tokens == 6 + 1 + 1


async def _answers(model_dir: Path, dtype: str, prefill: str = "rows",
                   reuse: bool = True) -> list[tuple[str | None, int]]:
    provider = LocalProvider(RoleConfig(model=str(model_dir), batch_size=4, dtype=dtype),
                             prefill=prefill)
    if not reuse:
        monkeypatch = pytest.MonkeyPatch()
        monkeypatch.setattr(PrefixCache, "longest", lambda self, ids: (0, None))
    try:
        results = await asyncio.gather(*(provider.complete(r) for r in _requests()))
        again = await provider.complete(_requests()[3])  # its whole prompt cached now
    finally:
        await provider.aclose()
        if not reuse:
            monkeypatch.undo()
    assert again.content == results[3].content
    return [(r.content, r.usage.completion_tokens) for r in results]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
async def test_greedy_answers_match_the_padded_batch(model_dir: Path, dtype: str) -> None:
    rows = await _answers(model_dir, dtype)
    assert rows == await _answers(model_dir, dtype, prefill="batch")
    assert rows == await _answers(model_dir, dtype, reuse=False)


async def test_closing_logs_what_the_prefix_cache_saved(
        model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    provider = LocalProvider(RoleConfig(model=str(model_dir), batch_size=1, dtype="float32"))
    first, second = _requests()[0], _requests()[2]  # the same system message, other requests
    try:
        await provider.complete(first)
        await provider.complete(second)
        prefixes = provider.prefixes
        assert prefixes is not None and prefixes.reused_tokens > 0
        reused, computed = prefixes.reused_tokens, prefixes.computed_tokens
    finally:
        with caplog.at_level("INFO", logger="agentune.llm"):
            await provider.aclose()
    share = round(100 * reused / (reused + computed))
    assert (f"prompt tokens computed {computed}, reused from earlier prompts {reused} "
            f"({share}%)") in caplog.text


def test_prefix_cache_drops_least_recently_used() -> None:
    def states(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.zeros(1, 1, n, 4), torch.zeros(1, 1, n, 4))]  # 32 bytes a token

    cache = PrefixCache(max_bytes=32 * 9)
    cache.add(torch.tensor([1, 2, 3, 4]), states(4))
    cache.add(torch.tensor([7, 8, 9]), states(3))
    assert cache.longest(torch.tensor([1, 2, 5]))[0] == 2  # [1, 2, 3, 4] used last now
    cache.add(torch.tensor([4, 4, 4]), states(3))  # 10 tokens: over 9, [7, 8, 9] goes
    assert cache.longest(torch.tensor([7, 8]))[0] == 0
    assert cache.longest(torch.tensor([1, 2, 3, 4, 5]))[0] == 4
    cache.add(torch.tensor(list(range(20))), states(20))  # larger than the whole budget
    assert cache.longest(torch.tensor([0, 1]))[0] == 0


def test_a_roomy_layer_holds_what_concatenation_would_and_grows_when_full() -> None:
    keys, values = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    layer = RoomyLayer(keys, values, room=2)
    held_k, held_v = keys, values
    for _ in range(4):  # the third step is past the room: the buffers grow
        k, v = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
        got_k, got_v = layer.update(k, v)
        held_k, held_v = torch.cat([held_k, k], dim=-2), torch.cat([held_v, v], dim=-2)
        torch.testing.assert_close(got_k, held_k)
        torch.testing.assert_close(got_v, held_v)
    assert layer.get_seq_length() == 9
