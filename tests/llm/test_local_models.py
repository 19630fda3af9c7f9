"""One load per model (tasks/llm/local_models.py): a gateway's roles of one model share its load
whatever their other settings; gateways made inside ``share_models`` ask the loads of the
gateway that owns the pool and load nothing of their own; closing the owner frees them. Loads
are counted at the provider's load function. (vLLM servers: tests/llm/test_vllm_engine.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.tasks.llm import local_provider
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.local_models import share_models
from agentune.tasks.llm.local_provider import LocalModel, LocalProvider
from agentune.tasks.llm.types import ChatRequest

from support.tiny_eval_model import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folder of every model the local provider loads."""
    folders: list[Path] = []
    load = local_provider.load_causal_lm

    def counting(folder: Path, **kwargs: Any) -> Any:
        folders.append(Path(folder))
        return load(folder, **kwargs)

    monkeypatch.setattr(local_provider, "load_causal_lm", counting)
    return folders


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], max_tokens=3)


def _llm(**roles: RoleConfig) -> LLMConfig:
    return LLMConfig(cache=False, **roles)


async def test_views_of_one_model_batch_apart(tiny: Path, loads: list[Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch holds one view's requests and reuses that view's prefixes: a role answers as a
    provider of its own would, whatever the other roles asked the model before."""
    from transformers import LlamaForCausalLM

    batches: list[int] = []
    generate = LlamaForCausalLM.generate

    def counting(self: LlamaForCausalLM, *args: Any, **kwargs: Any) -> Any:
        batches.append(kwargs["input_ids"].shape[0])
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "generate", counting)
    role = RoleConfig(model=str(tiny), dtype="float32", batch_size=4)
    engine = LocalModel(role)
    views = [LocalProvider(role, engine=engine) for _ in range(2)]
    try:
        await asyncio.gather(*(view.complete(_ask(f"hi {i}")) for i in range(2) for view in views))
    finally:
        await engine.aclose()
    assert batches == [2, 2] and loads == [tiny]
    assert views[0].prefixes is not views[1].prefixes


async def test_a_gateways_roles_of_one_model_share_its_load(tiny: Path,
                                                            loads: list[Path]) -> None:
    role = RoleConfig(model=str(tiny), dtype="float32")
    config = _llm(teacher=role.model_copy(update={"batch_size": 2, "default_max_tokens": 8}),
                  student=role.model_copy(update={"tool_format": "chat_template"}))
    for _ in range(2):  # closing the gateway freed it: the next one loads it again
        async with LLMGateway(config) as gateway:
            for answering in ("teacher", "student", "teacher"):
                await gateway.chat(answering, _ask(answering), stage="test")
            assert gateway.provider("teacher") is not gateway.provider("student")
    assert loads == [tiny, tiny]


async def test_gateways_inside_share_models_ask_the_owners_loads(tiny: Path,
                                                                 loads: list[Path]) -> None:
    role = RoleConfig(model=str(tiny), dtype="float32")
    async with LLMGateway(_llm()) as owner:
        with share_models(owner.models):
            for student in (role, role.model_copy(update={"tool_format": "chat_template",
                                                          "batch_size": 1})):
                async with LLMGateway(_llm(student=student, teacher=role)) as gateway:
                    await gateway.chat("student", _ask("hi"), stage="test")
                    await gateway.chat("teacher", _ask("hi"), stage="test")
        assert loads == [tiny]
        async with LLMGateway(_llm(student=role)) as alone:  # outside: a load of its own
            await alone.chat("student", _ask("hi"), stage="test")
        assert loads == [tiny, tiny]
    with share_models(owner.models):  # closed with its owner
        async with LLMGateway(_llm(student=role)) as late:
            with pytest.raises(GatewayError, match="closed"):
                await late.chat("student", _ask("hi"), stage="test")
    assert loads == [tiny, tiny]



async def test_an_idle_worker_ends_and_the_model_stays_loaded(
        tiny: Path, loads: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A run keeps its models loaded, but not their idle worker threads (a live thread that has
    run torch slows the others' torch work): the next request starts a new one, with no load."""
    monkeypatch.setattr(local_provider, "_IDLE_S", 0.05)
    provider = LocalProvider(RoleConfig(model=str(tiny), dtype="float32"))
    try:
        for _ in range(2):
            await provider.complete(_ask("hi"))
            for _ in range(100):
                if provider.engine._worker is None:
                    break
                await asyncio.sleep(0.05)
            assert provider.engine._worker is None and provider.engine._loaded is not None
    finally:
        await provider.aclose()
    assert loads == [tiny] and provider.engine._loaded is None
