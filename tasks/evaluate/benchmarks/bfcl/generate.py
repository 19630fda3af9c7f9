"""BFCL answers from the model under test, through agentune's LLM gateway, in BFCL's result
format.

The split: BFCL's data, prompts and environments stay in bfcl-eval's venv (``bfcl_worker.py``);
the model is asked from agentune's process, where the gateway and the in-process model live.

- **single-turn** (AST and irrelevance categories): one request per entry. Prompt mode: the
  entry's messages with BFCL's system prompt, the result is the model's text (``"[f(a=1)]"``);
  fc mode: the functions as ``tools``, the result is ``[{"f": "{\\"a\\": 1}"}]`` (or the text
  when it made no call), as BFCL's OpenAI handler records it.
- **multi-turn**: BFCL's own loop, turn by turn: the user's message, then model steps until a
  step decodes to no call (or fails to decode), each step's calls executed by the worker in
  BFCL's environment classes and fed back (prompt mode: one user message, BFCL's format; fc mode:
  ``tool`` messages). At ``max_steps`` steps in one turn the entry stops, as BFCL's force-quit.
  The result is ``[turn][step]`` of the raw responses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentune.config.evaluate import BfclConfig
from agentune.tasks.evaluate.benchmarks.bfcl.worker import WorkerSession
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatGateway, ChatRequest, ChatResult


def sample_ids(ids: Sequence[str], cap: int | None, seed: int, category: str) -> list[str]:
    """A fixed seeded subset of ``cap`` ids (all when ``cap`` is None), in BFCL's order."""
    if cap is None or cap >= len(ids):
        return list(ids)

    def rank(test_id: str) -> str:
        return hashlib.sha256(f"{seed}:bfcl:{category}:{test_id}".encode()).hexdigest()

    chosen = set(sorted(ids, key=rank)[:cap])
    return [i for i in ids if i in chosen]


@dataclass
class EntryAnswer:
    id: str
    category: str
    result: Any
    """What goes into BFCL's result file: a string or list (single-turn), [turn][step]."""
    error: str | None = None
    steps: int = 0


def _response(result: ChatResult, mode: str) -> Any:
    """One model step as BFCL records it."""
    if mode == "fc" and result.tool_calls:
        return [{call.name: call.arguments} for call in result.tool_calls]
    return result.content or ""


def _assistant(result: ChatResult, mode: str) -> dict[str, Any]:
    if mode == "fc" and result.tool_calls:
        return {"role": "assistant", "content": result.content or "",
                "tool_calls": [{"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments}}
                               for c in result.tool_calls]}
    return {"role": "assistant", "content": result.content or ""}


class BfclAnswerer:
    """Answers BFCL entries as the ``student`` role of a gateway, in ``settings``' mode, with its
    temperature, max_tokens and max_steps; ``seed``: the requests' (None: none, for greedy
    decoding)."""

    def __init__(self, gateway: ChatGateway, settings: BfclConfig, seed: int | None, stage: str,
                 session: WorkerSession | None, session_name: str) -> None:
        self.gateway, self.settings, self.seed, self.stage = gateway, settings, seed, stage
        self.session, self.session_name = session, session_name

    async def _ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
                   ) -> ChatResult:
        request = ChatRequest(messages=messages, tools=tools or None,
                              temperature=self.settings.temperature,
                              max_tokens=self.settings.max_tokens, seed=self.seed)
        return await self.gateway.chat("student", request, stage=self.stage)

    async def answer(self, entry: Mapping[str, Any]) -> EntryAnswer:
        tools = entry["tools"] if self.settings.mode == "fc" else []
        if entry["multi_turn"]:
            return await self._multi_turn(entry, tools)
        try:
            result = await self._ask(list(entry["turns"][0]), tools)
        except GatewayError as exc:
            return EntryAnswer(entry["id"], entry["category"], "", f"model: {exc}")
        return EntryAnswer(entry["id"], entry["category"], _response(result, self.settings.mode),
                           steps=1)

    async def _multi_turn(self, entry: Mapping[str, Any], tools: list[dict[str, Any]]
                          ) -> EntryAnswer:
        if self.session is None:
            raise RuntimeError("multi-turn entries need a bfcl worker session")
        mode, messages = self.settings.mode, []
        answer = EntryAnswer(entry["id"], entry["category"], [])
        for turn in entry["turns"]:
            messages += list(turn)
            responses: list[Any] = []
            answer.result.append(responses)
            steps = 0
            while True:
                try:
                    result = await self._ask(list(messages), tools)
                except GatewayError as exc:
                    answer.error = f"model: {exc}"
                    return answer
                response = _response(result, mode)
                responses.append(response)
                messages.append(_assistant(result, mode))
                answer.steps += 1
                done = await self.session.step({
                    "op": "step", "session": self.session_name, "id": entry["id"],
                    "initial_config": entry["initial_config"],
                    "involved_classes": entry["involved_classes"],
                    "long_context": entry.get("long_context", False), "mode": mode,
                    "response": response})
                if not done["calls"]:
                    break  # no call, or undecodable: the turn is over
                if mode == "fc":
                    messages += [{"role": "tool", "tool_call_id": call.id, "content": text}
                                 for call, text in zip(result.tool_calls, done["results"],
                                                       strict=False)]
                else:
                    messages.append({"role": "user", "content": done["feedback"]})
                steps += 1
                if steps >= self.settings.max_steps:
                    answer.error = f"forced to quit after {steps} steps in one turn"
                    return answer
        return answer


async def answer_entries(answerer: BfclAnswerer, entries: Sequence[Mapping[str, Any]],
                         concurrency: int,
                         on_progress: Callable[[int, int], Awaitable[None]] | None = None
                         ) -> list[EntryAnswer]:
    """Every entry answered (entries in flight at once: ``concurrency``), in entry order."""
    limit = asyncio.Semaphore(max(1, concurrency))
    done: list[int] = [0]
    if on_progress is not None:
        await on_progress(0, len(entries))

    async def one(entry: Mapping[str, Any]) -> EntryAnswer:
        async with limit:
            answer = await answerer.answer(entry)
        done[0] += 1
        if on_progress is not None:
            await on_progress(done[0], len(entries))
        return answer

    # Single-turn entries first, multi-turn after: a local model batches prompts of one phase
    # together, and a multi-turn prompt (thousands of tokens of function docs) would pad a
    # batch of short ones to its length.
    answers: dict[str, EntryAnswer] = {}
    for multi in (False, True):
        phase = [e for e in entries if bool(e["multi_turn"]) == multi]
        for answer in await asyncio.gather(*(one(e) for e in phase)):
            answers[answer.id] = answer
    return [answers[e["id"]] for e in entries]


def result_line(answer: EntryAnswer) -> str:
    return json.dumps({"id": answer.id, "result": answer.result}, ensure_ascii=False)
