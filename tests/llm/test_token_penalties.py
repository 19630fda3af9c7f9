"""OpenAI's frequency and presence penalties in the local provider (tasks/llm/token_penalties.py):
counted over the answer only, per row, applied before the grammar so that it is always honoured;
a greedy loop of a tiny random model is broken by them."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from agentune.config.llm import RoleConfig
from agentune.tasks.llm.local_provider import LocalProvider
from agentune.tasks.llm.token_penalties import TokenPenalties
from agentune.tasks.llm.types import ChatRequest

from support.tiny_models import tiny_llama

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
          "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")
SCHEMA = {"type": "object", "properties": {"tool": {"type": "string", "enum": ["a", "b"]},
                                           "note": {"type": "string", "maxLength": 12}},
          "required": ["tool", "note"], "additionalProperties": False}


def test_counts_only_what_the_row_generated() -> None:
    penalties = TokenPenalties([0.5, 0.0], [1.0, 0.0])
    prompt = torch.tensor([[3, 3, 3], [3, 3, 3]])  # the prompt's tokens are not counted
    scores = torch.zeros(2, 6)
    assert torch.equal(penalties(prompt, scores), scores)
    step = torch.tensor([[3, 3, 3, 4], [3, 3, 3, 4]])
    assert penalties(step, torch.zeros(2, 6))[0].tolist() == [0, 0, 0, 0, -1.5, 0]
    again = torch.tensor([[3, 3, 3, 4, 4], [3, 3, 3, 4, 4]])
    first, second = penalties(again, torch.zeros(2, 6))
    assert first.tolist() == [0, 0, 0, 0, -2.0, 0]  # 2 x 0.5 + 1.0 once
    assert second.tolist() == [0.0] * 6  # a row without penalties is left as it is


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = ["You are an agent. Tools: search, weather, calculator. Step 1: call a tool."] * 4
    return tiny_llama(tmp_path_factory.mktemp("tiny"), corpus, chat_template=CHATML,
                      vocab_size=300, max_positions=1024, hidden_size=64)


def _request(penalty: float | None, schema: bool = False) -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "user", "content": "Tell me about the weather, step by step."}],
        max_tokens=60 if schema else 40, temperature=0.0, frequency_penalty=penalty,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}
        if schema else None)


async def test_a_greedy_loop_is_broken_and_the_grammar_still_holds(model_dir: Path) -> None:
    provider = LocalProvider(RoleConfig(model=str(model_dir), batch_size=4, dtype="float32"))
    try:
        free, zero, penalised, constrained = await asyncio.gather(
            provider.complete(_request(None)), provider.complete(_request(0.0)),
            provider.complete(_request(2.0)), provider.complete(_request(2.0, schema=True)))
        # In the same batch as penalised rows, a row without a penalty answers as alone.
        alone = await provider.complete(_request(None))
    finally:
        await provider.aclose()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    looped = Counter(tokenizer(free.content or "")["input_ids"]).most_common(1)[0][1]
    broken = Counter(tokenizer(penalised.content or "")["input_ids"]).most_common(1)[0][1]
    assert looped >= 5, "the tiny model should loop greedily; the test needs a loop to break"
    assert broken < looped
    assert zero.content == free.content == alone.content
    answer = json.loads(constrained.content or "")  # the grammar decided the shape
    assert constrained.finish_reason == "stop"
    assert answer["tool"] in {"a", "b"} and len(answer["note"]) <= 12

