"""The one precision policy (tasks/llm/precision.py): ``auto`` is bf16 only where the CPU multiplies
bf16 natively, for the local provider, the trainer and the vLLM engine's command line alike; an
explicit dtype wins; the choice and its reason are logged once per load."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from agentune.config.llm import RoleConfig
from agentune.tasks.llm import precision
from agentune.tasks.llm.local_provider import LocalProvider
from agentune.tasks.llm.types import ChatRequest
from agentune.tasks.llm.vllm_engine import VllmEngine
from agentune.tasks.train.stage import resolve_precision as training_precision

from support.tiny_models import tiny_llama

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
          "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture
def native_bf16(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The CPU check patched to the test's answer (and no GPU, whatever the machine has)."""
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: request.param)
    monkeypatch.setattr(precision, "cpu_capability", lambda: "AVX512" if request.param else "AVX2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return request.param


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("tiny"), ["You are an agent."] * 4,
                      chat_template=CHATML, vocab_size=300, max_positions=512, hidden_size=64)


@pytest.mark.parametrize("native_bf16", [True, False], indirect=True)
def test_auto_follows_the_cpu(native_bf16: bool) -> None:
    chosen = precision.resolve_precision("auto", "cpu")
    assert chosen.name == ("bfloat16" if native_bf16 else "float32")
    assert chosen.reason.startswith("this CPU multiplies bf16 natively (AVX512)" if native_bf16
                                    else "this CPU has no native bf16 (AVX2)")
    assert training_precision("auto", cuda=False) == ("bf16" if native_bf16 else "fp32")


@pytest.mark.parametrize("native_bf16", [True, False], indirect=True)
def test_an_explicit_dtype_wins(native_bf16: bool) -> None:
    assert precision.resolve_precision("float32", "cpu").name == "float32"
    assert precision.resolve_precision("bfloat16", "cpu").name == "bfloat16"
    assert precision.resolve_precision("fp16", "cpu").dtype == torch.float16
    assert training_precision("bf16", cuda=False) == "bf16"
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        precision.resolve_precision("int4", "cpu")


@pytest.mark.parametrize("native_bf16", [True, False], indirect=True)
async def test_the_local_provider_loads_in_the_policys_dtype(
        native_bf16: bool, model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    provider = LocalProvider(RoleConfig(model=str(model_dir), batch_size=2))
    caplog.set_level(logging.INFO, logger="agentune.llm")
    try:
        for _ in range(2):
            await provider.complete(ChatRequest(messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=3))
        loaded = provider.engine._loaded
        assert loaded is not None
        assert loaded.model.dtype == (torch.bfloat16 if native_bf16 else torch.float32)
    finally:
        await provider.aclose()
    lines = [r.getMessage() for r in caplog.records  # the precision lines (not the prefill's)
             if r.getMessage().startswith(f"local model {model_dir}") and "bf16" in r.getMessage()]
    expected = ("bfloat16: this CPU multiplies bf16 natively" if native_bf16
                else "float32: this CPU has no native bf16 (AVX2)")
    assert len(lines) == 1 and expected in lines[0]  # once per load, not per request


@pytest.mark.parametrize("native_bf16", [True, False], indirect=True)
def test_the_vllm_command_line_gets_the_policys_dtype(native_bf16: bool, model_dir: Path) -> None:
    server = VllmEngine(RoleConfig(model=str(model_dir)))._new_server()
    server.python = Path("python")  # the command line only: no vLLM venv needed
    command = server._command()
    dtype = command[command.index("--dtype") + 1]
    assert dtype == ("bfloat16" if native_bf16 else "float32")
    explicit = VllmEngine(RoleConfig(model=str(model_dir), dtype="float32"))._new_server()
    assert explicit.dtype == "float32"
