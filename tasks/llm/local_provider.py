"""The `local` provider: in-process transformers generation with grammar-constrained output.

How it answers:

- **Batching.** ``complete`` queues the request; one worker thread (so the event loop stays free)
  takes what is queued, waits ``_GATHER_S`` for more, and generates up to ``role.batch_size``
  requests in one ``generate`` call. Only requests that sample alike share a batch (same
  temperature, top_p, top_k and seed); constrained and free rows mix (tasks/llm/row_grammars.py),
  and each answer is cut at its own max_tokens (and penalised by its own ``frequency_penalty`` /
  ``presence_penalty``, tasks/llm/token_penalties.py). Each prompt is prefilled alone, reusing the
  longest prefix of a recent prompt, and the rows' states are laid left-padded into the batch's
  cache (tasks/llm/row_prefill.py).
- **Structured output.** ``response_format`` ``json_schema`` compiles that schema with xgrammar
  (no free whitespace), so a finished answer always validates; ``json_object`` compiles
  ``{"type": "object"}`` rather than xgrammar's builtin JSON grammar, which also admits arrays and
  unbounded whitespace (a small model can loop on newlines).
- **Tools.** The model's chat template need not know tools: they are described in the system
  message and the answer is constrained to ``{"name": <tool>, "arguments": <its parameters>}``
  (one ``anyOf`` branch per tool, name as a ``const``) or, unless ``tool_choice`` forbids it,
  ``{"content": ...}``. Earlier assistant tool calls are shown to the model in the same form.
  One call per answer.
- **Tools through the chat template** (``tool_format: chat_template``): the request's messages
  and tools are rendered by the model's chat template (or ``chat_template``), generation is free,
  and every ``<tool_call>{"name", "arguments"}</tool_call>`` block of the answer is a tool call
  (Hermes, as vLLM's hermes parser reads it); the text before the first block is the content. A
  block that is not JSON stays in the content. Without such a block, fenced ```json call blocks
  (Qwen2.5-Coder's habit) are read instead (tasks/llm/tool_call_text.py). This is how a model
  trained on the messages form is evaluated: in the format it was trained in, without a grammar's help.
- **Running out of tokens.** A grammar cannot bound a string the schema leaves unbounded. When
  ``max_tokens`` ends the answer first, the result has ``finish_reason="length"`` and the partial
  text as ``content`` (no tool call); whether to retry with a larger budget is the caller's call.
- ``stop`` strings cut the returned text (for tool-protocol answers, the answer's content); the
  generation itself runs on to the end of its answer, and ``usage`` counts what was generated.
- **One load, many roles.** :class:`LocalModel` is a loaded model and the worker generating with
  it; a :class:`LocalProvider` is one role's view of it (its batch size, tool format, chat
  template, default max_tokens and recent prefixes). A run's gateways share one ``LocalModel``
  per (model, dtype, device) through tasks/llm/local_models.py. A batch holds one view's
  requests and reuses that view's prefixes only: a view answers as a provider of its own would,
  whatever the other views asked before (in bf16, reused prefix states can tip a greedy answer).
- **Closing** drops the model and hands the freed heap back to the system (glibc keeps the arenas
  of every model loaded and dropped otherwise: a process that ran stage after stage, as
  ``make outcome`` does, grew to 8.6 GiB resident and was OOM-killed beside DeepSpeed ranks).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import itertools
import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import xgrammar as xgr
from transformers import (
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from agentune.config.llm import RoleConfig
from agentune.tasks.common.resources import AsyncResource
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.errors import GatewayError, ModelUnavailable
from agentune.tasks.llm.model_folders import load_causal_lm
from agentune.tasks.llm.precision import resolve_device, resolve_precision
from agentune.tasks.llm.row_grammars import RowGrammars
from agentune.tasks.llm.row_prefill import PrefixCache, prefill_rows
from agentune.tasks.llm.token_penalties import TokenPenalties
from agentune.tasks.llm.tool_call_text import read_tool_calls
from agentune.tasks.llm.types import ChatRequest, ChatResult, ToolCall, Usage

log = logging.getLogger("agentune.llm")

# How long the worker waits after the first queued request for others to batch with it.
_GATHER_S = 0.05
# A worker idle this long ends (the next request starts another; the model stays loaded): a live
# thread that has run torch slows every other thread's torch work even while it waits (1.6x on 2
# cores: OpenMP spins less once it manages more threads than there are CPUs), and a run keeps
# every model it loaded.
_IDLE_S = 1.0
# Recent prompts' key/value states kept for reuse: ~45k tokens of the 135M model, ~85k of
# Qwen2.5-0.5B (a few scenarios' steps and attempts).
PREFIX_CACHE_BYTES = 2**30


@dataclass(frozen=True)
class _Decoding:
    """What requests must agree on to share a ``generate`` call."""

    max_tokens: int
    constrained: bool
    temperature: float | None = None  # None: greedy (then top_p, top_k and seed play no part)
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None

    def sampling(self) -> tuple[float | None, float | None, int | None, int | None]:
        """What a batch must share: a row's grammar and max_tokens are its own (one mixed
        batch decodes what two would, in about the time of one: tasks/llm/row_grammars.py)."""
        return self.temperature, self.top_p, self.top_k, self.seed


@dataclass(frozen=True)
class _Plan:
    """A request turned into what the model sees and how its answer is read."""

    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None  # the answer's JSON schema; None: free text
    tool_protocol: bool  # the answer is {"name", "arguments"} or {"content"}
    json_content: bool  # the content is a JSON value (response_format), not a string
    tools: list[dict[str, Any]] = field(default_factory=list)  # for the chat template
    native_tools: bool = False  # calls are the template's <tool_call> blocks in free text


@dataclass(eq=False)
class _Job:
    request: ChatRequest
    view: LocalProvider  # the role asking: how its prompt is rendered and its answer read
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[ChatResult]
    # Filled in by the worker.
    plan: _Plan | None = None
    prompt_ids: list[int] = field(default_factory=list)
    grammar: xgr.CompiledGrammar | None = None
    decoding: _Decoding | None = None


@dataclass
class _Loaded:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    compiler: xgr.GrammarCompiler  # caches compiled grammars by schema
    eos_ids: list[int]
    pad_id: int
    device: torch.device


class LocalProvider:
    """Answers requests as ``role`` with a local transformers model (``role.model``: a folder or
    ``embedded``).

    ``engine``: the loaded model to ask (a run's, shared with other roles: closing this view leaves
    it loaded); without one, the view loads its own on the first request and frees it on closing.
    """

    name = "local"

    def __init__(self, role: RoleConfig, *, prefill: str = "rows",
                 engine: LocalModel | None = None) -> None:
        """``prefill``: ``rows`` (each prompt alone, recent prefixes reused) or ``batch`` (the
        left-padded batch at once, as before; for comparisons)."""
        self.model = role.model
        self.role = role
        self.engine = engine or LocalModel(role)
        # Used by the engine's worker thread only. None: the batch is prefilled as one.
        self.prefixes = PrefixCache(PREFIX_CACHE_BYTES) if prefill == "rows" else None
        self._owns_engine = engine is None
        self._closed = False
        try:
            # Overrides the tokenizer's template.
            self.chat_template = (Path(role.chat_template).read_text(encoding="utf-8")
                                  if role.chat_template else None)
        except OSError as exc:
            raise ModelUnavailable(f"local model {self.model!r}: its chat template cannot be "
                                   f"read: {exc}") from None

    async def complete(self, request: ChatRequest) -> ChatResult:
        if self._closed:
            raise GatewayError(f"local provider for {self.model!r} is closed")
        return await self.engine.submit(self, request)

    async def aclose(self) -> None:
        """Refuse further requests; free the model if it is this view's own, else the prefix
        states it kept (handing the heap back, as closing a model does)."""
        self._closed = True
        if self.prefixes is not None and self.prefixes.computed_tokens:
            reused, computed = self.prefixes.reused_tokens, self.prefixes.computed_tokens
            log.info("local model %s: prompt tokens computed %d, reused from earlier prompts %d "
                     "(%.0f%%)", self.model, computed, reused, 100 * reused / (reused + computed))
        self.prefixes = None
        if self._owns_engine:
            await self.engine.aclose()
        else:
            await asyncio.to_thread(_release_heap)


class LocalModel(AsyncResource):
    """A loaded local model and the worker thread that generates with it, for every view
    (:class:`LocalProvider`) asking it. Loaded on the first request, in the worker thread."""

    SETTINGS = frozenset({"model", "dtype", "device"})
    """The role fields that decide the loaded model; a view's other fields are its own."""

    def __init__(self, role: RoleConfig) -> None:
        self.model = role.model
        self._role = role  # only its SETTINGS count here
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()  # the worker's start, its end when idle, and closing
        self._closed = False
        self._loaded: _Loaded | None = None
        self._call_ids = itertools.count(1)

    async def submit(self, view: LocalProvider, request: ChatRequest) -> ChatResult:
        """``request`` answered as ``view``'s role."""
        loop = asyncio.get_running_loop()
        job = _Job(request, view, loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise GatewayError(f"local model {self.model!r} is closed")
            self._queue.put(job)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._serve, name=f"agentune-local-{self.model}", daemon=True
                )
                self._worker.start()
        return await job.future

    async def aclose(self) -> None:
        """Stop the worker (after the batch it is generating) and release the model."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
            if worker is not None:
                self._queue.put(None)
        if worker is not None:
            await asyncio.to_thread(worker.join)
        if worker is not None or self._loaded is not None:
            self._loaded = None
            # The worker's frame, the model's last holder, is gone now.
            await asyncio.to_thread(_release_heap)

    # --- the worker thread -------------------------------------------------------------------

    def _serve(self) -> None:
        pending: list[_Job] = []
        retired = False
        try:
            while True:
                fresh, stop = self._take(wait=not pending)
                if stop:
                    for job in pending + fresh:
                        _settle(job, error=GatewayError(f"local provider for {self.model!r} closed"))
                    break
                if not fresh and not pending:  # idle for _IDLE_S
                    retired = self._retire()
                    if retired:
                        return
                if fresh:
                    try:
                        lm = self._load()
                    except Exception as exc:
                        error = ModelUnavailable(
                            f"local model {self.model!r} could not be loaded: {exc}")
                        for job in fresh:
                            _settle(job, error=error)
                        continue
                    pending += [job for job in fresh if self._prepare(job, lm)]
                pending = [job for job in pending if not job.future.cancelled()]
                if pending:
                    batch, pending = _pick_batch(pending)
                    self._generate(batch)
        finally:
            if not retired:  # stopped, or failed: closing then frees the model
                self._loaded = None

    def _retire(self) -> bool:
        """End this idle worker unless a request came meanwhile."""
        with self._lock:
            if not self._queue.empty():
                return False
            self._worker = None
            return True

    def _take(self, wait: bool) -> tuple[list[_Job], bool]:
        """Queued jobs, and whether a stop was asked for. With ``wait``, block for the first job
        and then gather for ``_GATHER_S``, so requests sent together are batched together."""
        jobs: list[_Job] = []
        try:
            item = self._queue.get(timeout=_IDLE_S) if wait else self._queue.get_nowait()
            deadline = time.monotonic() + _GATHER_S
            while item is not None:
                jobs.append(item)
                if wait:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                else:
                    item = self._queue.get_nowait()
        except queue.Empty:
            return jobs, False
        return jobs, True

    def _load(self) -> _Loaded:
        if self._loaded is None:
            path = resolve_model_path(self.model)
            device = resolve_device(self._role.device)
            tokenizer = AutoTokenizer.from_pretrained(path)
            # A LoRA version's folder may hold only its adapter: applied to its base, merged.
            precision = resolve_precision(self._role.dtype, device)
            precision.log(f"local model {self.model}")
            model = load_causal_lm(path, dtype=precision.dtype)
            model.to(device).eval()
            eos = model.generation_config.eos_token_id
            if eos is None:
                eos = tokenizer.eos_token_id
            eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
            if not eos_ids:
                raise ValueError(
                    f"{path}: neither generation_config nor tokenizer names an EOS token"
                )
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
            # The grammar must end on the tokens generate() stops at, or a finished row runs on.
            info = xgr.TokenizerInfo.from_huggingface(
                tokenizer, vocab_size=model.config.vocab_size, stop_token_ids=eos_ids
            )
            self._loaded = _Loaded(
                model, tokenizer, xgr.GrammarCompiler(info), eos_ids, pad_id, device,
            )
        return self._loaded

    def _prepare(self, job: _Job, lm: _Loaded) -> bool:
        """Render the prompt and compile the grammar; False (job failed) if that is impossible."""
        request, role = job.request, job.view.role
        try:
            native = role.tool_format == "chat_template"
            plan = _template_plan(request) if native else _plan(request)
            text = lm.tokenizer.apply_chat_template(
                plan.messages, tools=plan.tools or None, tokenize=False,
                add_generation_prompt=True, chat_template=job.view.chat_template)
            job.prompt_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
            if plan.schema is not None:
                job.grammar = lm.compiler.compile_json_schema(
                    json.dumps(plan.schema, ensure_ascii=False), any_whitespace=False
                )
        except Exception as exc:
            _settle(job, error=GatewayError(f"local provider cannot answer this request: {exc}"))
            return False
        job.plan = plan
        max_tokens = request.max_tokens or role.default_max_tokens
        if request.temperature:
            job.decoding = _Decoding(
                max_tokens,
                job.grammar is not None,
                request.temperature,
                request.top_p,
                request.top_k,
                request.seed,
            )
        else:
            job.decoding = _Decoding(max_tokens, job.grammar is not None)
        return True

    def _generate(self, batch: list[_Job]) -> None:
        lm = self._load()
        decoding = batch[0].decoding
        assert decoding is not None
        width = max(len(job.prompt_ids) for job in batch)
        input_ids = torch.full((len(batch), width), lm.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, job in enumerate(batch):  # left padding: every prompt ends at column `width`
            input_ids[row, width - len(job.prompt_ids) :] = torch.tensor(job.prompt_ids)
            attention_mask[row, width - len(job.prompt_ids) :] = 1
        options: dict[str, Any] = {
            # Each row's answer is cut at its own max_tokens (_result).
            "max_new_tokens": max(job.decoding.max_tokens for job in batch if job.decoding),
            "eos_token_id": lm.eos_ids,
            "pad_token_id": lm.pad_id,
        }
        if decoding.temperature:
            # OpenAI semantics: an unset top_p / top_k does not filter (transformers would use 50).
            options |= {
                "do_sample": True,
                "temperature": decoding.temperature,
                "top_p": decoding.top_p or 1.0,
                "top_k": decoding.top_k or 0,
            }
            if decoding.seed is not None:  # the batch's seed: the same batch samples the same
                torch.manual_seed(decoding.seed)
        else:
            options["do_sample"] = False
        processors: list[Any] = []
        frequency = [job.request.frequency_penalty or 0.0 for job in batch]
        presence = [job.request.presence_penalty or 0.0 for job in batch]
        if any(frequency) or any(presence):  # before the grammar's mask: it is always honoured
            processors.append(TokenPenalties(frequency, presence))
        if any(job.grammar is not None for job in batch):
            # A new processor per call: it keeps per-row matcher state and cannot be reused.
            processors.append(RowGrammars([job.grammar for job in batch]))
        if processors:
            options["logits_processor"] = processors
        try:
            with torch.inference_mode():
                prefixes = batch[0].view.prefixes
                if prefixes is not None and min(len(job.prompt_ids) for job in batch) > 1:
                    # Each prompt prefilled alone, shared prefixes reused (tasks/llm/row_prefill.py).
                    options["cache"] = prefill_rows(
                        lm.model, [job.prompt_ids for job in batch], prefixes, lm.device,
                        room=options["max_new_tokens"] + 1)
                output = lm.model.generate(
                    input_ids=input_ids.to(lm.device),
                    attention_mask=attention_mask.to(lm.device),
                    **options,
                )
        except Exception as exc:
            for job in batch:
                _settle(job, error=GatewayError(f"local generation failed: {exc!r}"))
            return
        for job, row in zip(batch, output[:, width:].tolist()):
            try:
                _settle(job, result=self._result(job, row, lm))
            except Exception as exc:  # a bug here must not kill the worker and strand the batch
                _settle(
                    job, error=GatewayError(f"local provider could not read the answer: {exc!r}")
                )

    def _result(self, job: _Job, generated: list[int], lm: _Loaded) -> ChatResult:
        assert job.plan is not None and job.decoding is not None
        generated = generated[: job.decoding.max_tokens]  # its batch may have run on longer
        ends = [i for i, token in enumerate(generated) if token in lm.eos_ids]
        finished = bool(ends)
        used = ends[0] + 1 if finished else len(generated)
        text = lm.tokenizer.decode(generated[:used], skip_special_tokens=True)
        content: str | None = text
        calls: list[ToolCall] = []
        if job.plan.native_tools:
            content, found = read_tool_calls(text)
            calls = [ToolCall(id=f"call_{next(self._call_ids)}", name=name, arguments=arguments)
                     for name, arguments in found]
        elif job.plan.schema is not None and finished:
            # The grammar guarantees a finished answer parses, but xgrammar lets a schema's
            # strings hold raw control characters (a tab ...) that strict JSON forbids: such an
            # answer is re-serialised with them escaped.
            answer = json.loads(text, strict=False)
            if not job.plan.tool_protocol:
                content = text if _strict_json(text) else json.dumps(answer, ensure_ascii=False)
            elif "name" in answer:
                content = None
                calls.append(
                    ToolCall(
                        id=f"call_{next(self._call_ids)}",
                        name=answer["name"],
                        arguments=json.dumps(answer["arguments"], ensure_ascii=False),
                    )
                )
            elif job.plan.json_content:
                content = json.dumps(answer["content"], ensure_ascii=False)
            else:
                content = answer["content"]
        finish_reason = "tool_calls" if calls else ("stop" if finished else "length")
        if content is not None and job.request.stop:
            cuts = [content.find(stop) for stop in job.request.stop if stop and stop in content]
            if cuts:
                content, finish_reason = content[: min(cuts)], "stop"
        return ChatResult(
            content=content,
            tool_calls=calls,
            finish_reason=finish_reason,
            usage=Usage(prompt_tokens=len(job.prompt_ids), completion_tokens=used),
            model=job.view.model,
        )


def _settle(job: _Job, result: ChatResult | None = None, error: Exception | None = None) -> None:
    """Hand a job's outcome to its event loop (from the worker thread)."""

    def settle() -> None:
        if job.future.done():  # cancelled meanwhile (the caller timed out)
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits any more
        job.loop.call_soon_threadsafe(settle)


def _strict_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _release_heap() -> None:
    """Collect what a dropped model left and return free heap pages to the system where the C
    library has glibc's ``malloc_trim``; elsewhere, or if the library cannot be opened, only the
    collection."""
    gc.collect()
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)


def _pick_batch(pending: list[_Job]) -> tuple[list[_Job], list[_Job]]:
    """The oldest job and up to its view's ``batch_size - 1`` more of that view that sample
    alike; the rest, in order."""
    oldest = pending[0]
    assert oldest.decoding is not None
    key = oldest.decoding.sampling()
    batch = [job for job in pending if job.view is oldest.view
             and job.decoding is not None and job.decoding.sampling() == key
             ][:oldest.view.role.batch_size]
    return batch, [job for job in pending if job not in batch]


# --- turning a request into a prompt and a grammar -----------------------------------------------


def _template_plan(request: ChatRequest) -> _Plan:
    """Messages and tools for the model's own chat template: nothing described, nothing
    constrained (a ``response_format`` is not combined with native tools)."""
    tools = [{"type": "function", "function": _function(t)} for t in request.tools or []]
    if request.response_format and (request.response_format.get("type") or "text") != "text":
        raise ValueError("tool_format chat_template does not take a response_format")
    messages = [{**m, "content": _message(m)["content"]} if not m.get("tool_calls")
                else {**m, "content": m.get("content") or "", "tool_calls": [
                    _with_decoded_arguments(c) for c in m["tool_calls"]]}
                for m in request.messages]
    return _Plan(messages, None, tool_protocol=False, json_content=False, tools=tools,
                 native_tools=True)


def _plan(request: ChatRequest) -> _Plan:
    messages = [_message(m) for m in request.messages]
    answer_schema = _answer_schema(request.response_format)
    tools, may_answer = _offered_tools(request)
    if not tools:
        return _Plan(messages, answer_schema, tool_protocol=False, json_content=False)
    defs: dict[str, Any] = {}
    branches = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["name"]},
                "arguments": _nestable(tool["parameters"], f"{tool['name']}.", defs),
            },
            "required": ["name", "arguments"],
        }
        for tool in tools
    ]
    if may_answer:
        content = (
            _nestable(answer_schema, "content.", defs)
            if answer_schema is not None
            else {"type": "string"}
        )
        branches.append(
            {"type": "object", "properties": {"content": content}, "required": ["content"]}
        )
    schema = branches[0] if len(branches) == 1 else {"anyOf": branches}
    if defs:
        schema = {"$defs": defs, **schema}
    guide = _tools_prompt(tools, may_answer)
    if messages and messages[0]["role"] == "system":
        messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{guide}"}
    else:
        messages.insert(0, {"role": "system", "content": guide})
    return _Plan(messages, schema, tool_protocol=True, json_content=answer_schema is not None)


_DEFS_KEYS = ("$defs", "definitions")


def _nestable(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` made fit to nest in a larger one: its definitions move into ``defs`` (the root's
    ``$defs``) as ``prefix + name`` and its ``$ref``s follow them. xgrammar resolves references
    from the root and cannot follow a pointer through ``anyOf``'s list."""
    moved = {
        f"#/{key}/{name}": f"#/$defs/{prefix}{name}"
        for key in _DEFS_KEYS
        for name in schema.get(key, {})
    }

    def relink(node: Any) -> Any:
        if isinstance(node, list):
            return [relink(item) for item in node]
        if not isinstance(node, dict):
            return node
        linked = {key: relink(value) for key, value in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str):
            for old, new in moved.items():
                if ref == old or ref.startswith(old + "/"):
                    linked["$ref"] = new + ref[len(old) :]
        return linked

    for key in _DEFS_KEYS:
        for name, definition in schema.get(key, {}).items():
            defs[prefix + name] = relink(definition)
    return relink({key: value for key, value in schema.items() if key not in _DEFS_KEYS})


def _answer_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = (response_format or {}).get("json_schema", {}).get("schema")
        if not isinstance(schema, dict):
            raise ValueError("response_format json_schema has no `json_schema.schema` object")
        return schema
    raise ValueError(f"unsupported response_format type {kind!r}")


def _offered_tools(request: ChatRequest) -> tuple[list[dict[str, Any]], bool]:
    """The function tools the model may call, and whether it may answer without calling one."""
    tools = [_function(tool) for tool in request.tools or []]
    choice = request.tool_choice
    if not tools or choice == "none":
        return [], True
    if choice is None or choice == "auto":
        return tools, True
    if choice == "required":
        return tools, False
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        named = [tool for tool in tools if tool["name"] == wanted]
        if not named:
            raise ValueError(f"tool_choice names {wanted!r}, which is not among the tools")
        return named, False
    raise ValueError(f"unsupported tool_choice {choice!r}")


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function" or "name" not in tool.get("function", {}):
        raise ValueError(f"only function tools with a name are supported, got {tool!r}")
    function = tool["function"]
    return {
        "name": function["name"],
        "description": function.get("description", ""),
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
    }


def _tools_prompt(tools: list[dict[str, Any]], may_answer: bool) -> str:
    lines = ["You can use these tools:"]
    for tool in tools:
        lines.append(
            f"- {tool['name']}: {tool['description']}"
            if tool["description"]
            else f"- {tool['name']}"
        )
        lines.append(
            f"  parameters (JSON schema): {json.dumps(tool['parameters'], ensure_ascii=False)}"
        )
    lines.append(
        'To call a tool, reply with only {"name": "<tool name>", "arguments": {<its parameters>}}.'
    )
    if may_answer:
        lines.append('To answer without a tool, reply with only {"content": "<your answer>"}.')
    else:
        lines.append("You must call a tool.")
    return "\n".join(lines)


def _message(message: dict[str, Any]) -> dict[str, str]:
    """An OpenAI message as plain role/content text, which every chat template can render."""
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    text = content if isinstance(content, str) else ""
    calls = [
        json.dumps(
            {
                "name": call["function"]["name"],
                "arguments": _decoded(call["function"].get("arguments")),
            },
            ensure_ascii=False,
        )
        for call in message.get("tool_calls") or []
    ]
    return {"role": message["role"], "content": "\n".join(part for part in [text, *calls] if part)}


def _with_decoded_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call with its arguments as a JSON value: a chat template renders a mapping
    (``tojson``); the string OpenAI sends would be encoded a second time."""
    function = call.get("function") or {}
    return {**call, "function": {**function, "arguments": _decoded(function.get("arguments"))}}


def _decoded(arguments: Any) -> Any:
    """Tool-call arguments as a JSON value (OpenAI sends them as a JSON string)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments if arguments is not None else {}
