"""Answering every benchmark prompt with one model, through the LLM gateway.

Each template prompt of each sample is sent as one user message, as plain text and without
``tools``: the model must write the template's own format (the local provider would otherwise
constrain it to a JSON tool call). Requests go out together, so the local provider batches them
(``batch_size``) and an OpenAI-compatible endpoint (a vLLM server serving the checkpoint, OpenAI)
gets ``max_concurrency`` at a time; every answer lands in the gateway's response cache, so a
re-run repeats no call.

The decoding is evaluate's, whose defaults are the official KAgentBench inference's: temperature
0.1, top_p 0.75, top_k 40. Like it, an over-long prompt is cut to ``max_prompt_tokens``: when the
sample's memory text is found in the prompt, the memory's middle goes (its first and last tokens
stay); otherwise the prompt's middle goes. (The official script counts the tokens of the whole
chat-formatted prompt and leaves a prompt over-long when the rest alone exceeds the limit; here
the user text is counted, and such a prompt is cut in the middle.) Without a tokenizer (an endpoint
with no ``tokenizer`` configured) characters are counted, three to a token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentune.config.evaluate import EvaluateConfig
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.benchmarks.kagentbench.format import (
    PROFILE_KEY,
    BenchSample,
    prediction_line,
)
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.types import ChatRequest

CHARS_PER_TOKEN = 3


class _Units(Protocol):
    def encode(self, text: str) -> list[Any]: ...

    def decode(self, units: list[Any]) -> str: ...


class _Characters:
    def encode(self, text: str) -> list[Any]:
        return list(text)

    def decode(self, units: list[Any]) -> str:
        return "".join(units)


class _Tokens:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[Any]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, units: list[Any]) -> str:
        return self.tokenizer.decode(units, skip_special_tokens=False)


def _head_tail(units: list[Any], keep: int) -> list[Any]:
    """The first ``keep // 2`` and last ``keep - keep // 2`` units."""
    head = keep // 2
    tail = keep - head
    return units[:head] + (units[len(units) - tail:] if tail else [])


class PromptCutter:
    """Cuts prompts over ``max_tokens`` in the middle of their memory, else of the whole."""

    def __init__(self, max_tokens: int, tokenizer: Any | None = None) -> None:
        self.units: _Units = _Tokens(tokenizer) if tokenizer is not None else _Characters()
        self.limit = max_tokens if tokenizer is not None else max_tokens * CHARS_PER_TOKEN

    @classmethod
    def for_model(cls, max_tokens: int, tokenizer_path: str | Path | None) -> PromptCutter:
        """With the tokenizer of a local model folder, or counting characters (None)."""
        if tokenizer_path is None:
            return cls(max_tokens)
        from transformers import AutoTokenizer

        return cls(max_tokens, AutoTokenizer.from_pretrained(tokenizer_path))

    def cut(self, prompt: str, memories: Sequence[str] = ()) -> tuple[str, bool]:
        """The prompt within the limit, and whether it had to be cut."""
        units = self.units.encode(prompt)
        if len(units) <= self.limit:
            return prompt, False
        for memory in memories:
            if not memory or memory not in prompt:
                continue
            memory_units = self.units.encode(memory)
            other = len(units) - len(memory_units)
            if self.limit > other:
                kept = self.units.decode(_head_tail(memory_units, self.limit - other))
                return prompt.replace(memory, kept, 1), True
            break
        return self.units.decode(_head_tail(units, self.limit)), True


@dataclass
class PredictionRun:
    """One model's answers to a benchmark, in the official prediction-file format."""

    lines: list[dict[str, Any]]
    failures: list[dict[str, str]] = field(default_factory=list)
    """Prompts the model could not answer (their answer is ""), with the error."""
    prompts: int = 0
    cut: int = 0


def _requests(sample: BenchSample) -> list[tuple[str, str]]:
    if sample.type == "profile":
        return [(PROFILE_KEY, sample.prompts.get(PROFILE_KEY, sample.query))]
    return list(sample.prompts.items())


async def predict_benchmark(samples: Sequence[BenchSample], gateway: LLMGateway, *,
                            settings: EvaluateConfig | None = None, seed: int = 0,
                            cutter: PromptCutter,
                            role: str = "student", stage: str = STAGE,
                            on_progress: Callable[[int, int], Awaitable[None]] | None = None,
                            ) -> PredictionRun:
    """Every prompt of every sample answered by the gateway's ``role`` model, sampled with
    ``settings``' temperature, top_p, top_k and max_tokens (None: evaluate's defaults) and
    ``seed``. ``on_progress`` gets (answered, total): once with 0 before the first request, then
    after each answer."""
    decoding = settings or EvaluateConfig()
    run = PredictionRun(lines=[])
    jobs: list[tuple[BenchSample, str, str]] = []
    for sample in samples:
        if not sample.prompts and sample.type != "profile":
            raise ValueError(f"sample {sample.type} {sample.id!r} (line {sample.line}) has no "
                             "prompt_input: nothing to answer")
        for key, prompt in _requests(sample):
            memories = [sample.memory_sections.get(key, ""), sample.memory]
            text, was_cut = cutter.cut(prompt, memories)
            run.cut += was_cut
            jobs.append((sample, key, text))
    run.prompts = len(jobs)
    done = 0

    async def answer(sample: BenchSample, key: str, prompt: str) -> str:
        nonlocal done
        request = ChatRequest(
            messages=[{"role": "user", "content": prompt}], temperature=decoding.temperature,
            top_p=decoding.top_p, top_k=decoding.top_k, max_tokens=decoding.max_tokens,
            seed=seed)
        try:
            result = await gateway.chat(role, request, stage=stage)  # type: ignore[arg-type]
            text = result.content or ""
        except GatewayError as exc:
            run.failures.append({"sample_id": str(sample.id), "type": sample.type, "key": key,
                                 "error": str(exc)})
            text = ""
        done += 1
        if on_progress is not None:
            await on_progress(done, len(jobs))
        return text

    if on_progress is not None:
        await on_progress(0, len(jobs))
    answers = await asyncio.gather(*(answer(*job) for job in jobs))
    by_sample: dict[tuple[str, Any], dict[str, str]] = {}
    for (sample, key, _), text in zip(jobs, answers, strict=True):
        by_sample.setdefault(sample.key, {})[key] = text
    for sample in samples:
        got = by_sample.get(sample.key, {})
        prediction: str | dict[str, str] = got.get(PROFILE_KEY, "") \
            if sample.type == "profile" else got
        run.lines.append(prediction_line(sample, prediction))
    return run
