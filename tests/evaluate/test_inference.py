"""Answering benchmark prompts: the memory cut, the OpenAI-compatible test server (request shape,
decoding, failures), the local provider in process (a tiny random model; the embedded model in a
slow test), and the official prediction-file format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentune.config.evaluate import EvaluateConfig
from agentune.config.llm import LLMConfig, RoleConfig
from agentune.tasks.evaluate.benchmarks.kagentbench.format import SourceLine, parse_sample
from agentune.tasks.evaluate.benchmarks.kagentbench.inference import PromptCutter, predict_benchmark
from agentune.tasks.llm.gateway import LLMGateway

from support.openai_server import Fail, Reply
from support.tiny_eval_model import LINES, make_tiny_model


def _samples() -> list[Any]:
    return [parse_sample(line, SourceLine("bench.jsonl", i), with_prediction=False)
            for i, line in enumerate(LINES, 1)]


def _gateway(tmp_path: Path, role: RoleConfig) -> LLMGateway:
    return LLMGateway(LLMConfig(student=role, cache_dir=str(tmp_path / "cache")))


# --------------------------------------------------------------------------- the memory cut


def test_short_prompts_are_left_alone() -> None:
    assert PromptCutter(100).cut("short prompt", ["memory"]) == ("short prompt", False)


def test_long_memory_loses_its_middle_and_the_rest_stays() -> None:
    memory = "".join(f"<{i:03d}>" for i in range(200))  # 1000 characters
    prompt = f"HEAD {memory} TAIL"
    cutter = PromptCutter(100)  # no tokenizer: 300 characters
    text, cut = cutter.cut(prompt, ["", memory])
    assert cut and len(text) == 300
    assert text.startswith("HEAD <000>") and text.endswith("<199> TAIL")
    assert "<100>" not in text


def test_without_memory_in_the_prompt_the_prompt_loses_its_middle() -> None:
    prompt = "A" * 200 + "B" * 200
    text, cut = PromptCutter(100).cut(prompt, ["not in it"])
    assert cut and text == "A" * 150 + "B" * 150


def test_token_counting_with_a_tokenizer(tiny_model: Path) -> None:
    cutter = PromptCutter.for_model(64, tiny_model)
    prompt = "weather " * 300
    text, cut = cutter.cut(prompt)
    assert cut and len(cutter.units.encode(text)) <= 66  # re-tokenising the seam may merge


# --------------------------------------------------------------------------- the test server


async def test_openai_endpoint_gets_plain_prompts_and_the_official_decoding(
        tmp_path: Path, openai_server) -> None:
    server = openai_server(lambda body, n: Reply(f"answer {n}"))
    role = RoleConfig(provider="openai", model="served-model", base_url=server.base_url,
                      api_key_env="AGENTUNE_TEST_KEY", max_retries=0)
    async with _gateway(tmp_path, role) as gateway:
        run = await predict_benchmark(_samples(), gateway, settings=EvaluateConfig(), seed=0,
                                      cutter=PromptCutter(3096))
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 3
    for body in bodies:
        assert body["model"] == "served-model"
        assert "tools" not in body and "response_format" not in body
        assert body["temperature"] == 0.1 and body["top_p"] == 0.75 and body["top_k"] == 40
        assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
    prompts = {b["messages"][0]["content"] for b in bodies}
    assert prompts == {"ReACT prompt: 北京天气", "KuaiAgent prompt", "Who are you?"}
    # The official prediction format: the input line as read + model_predict.
    first, second = run.lines
    assert {k: v for k, v in first.items() if k != "model_predict"} == LINES[0]
    assert set(first["model_predict"]) == {"ReACT", "KuaiAgent"}
    assert first["model_predict"]["ReACT"].startswith("answer ")
    assert isinstance(second["model_predict"], str) and second["id"] == 7
    assert run.prompts == 3 and run.failures == [] and run.cut == 0


async def test_a_failed_prompt_is_recorded_and_answered_empty(tmp_path: Path,
                                                              openai_server) -> None:
    def script(body: dict[str, Any], n: int) -> Any:
        if body["messages"][0]["content"] == "KuaiAgent prompt":
            return Fail(400, message="bad request")
        return Reply("fine")

    server = openai_server(script)
    role = RoleConfig(provider="openai", model="m", base_url=server.base_url,
                      api_key_env="AGENTUNE_TEST_KEY", max_retries=0)
    async with _gateway(tmp_path, role) as gateway:
        run = await predict_benchmark(_samples(), gateway, cutter=PromptCutter(3096))
    assert run.lines[0]["model_predict"] == {"ReACT": "fine", "KuaiAgent": ""}
    assert len(run.failures) == 1
    assert run.failures[0]["key"] == "KuaiAgent" and "400" in run.failures[0]["error"]


async def test_answers_are_cached_so_a_rerun_repeats_no_call(tmp_path: Path,
                                                             openai_server) -> None:
    server = openai_server(lambda body, n: Reply("same"))
    role = RoleConfig(provider="openai", model="m", base_url=server.base_url,
                      api_key_env="AGENTUNE_TEST_KEY")
    for _ in range(2):
        async with _gateway(tmp_path, role) as gateway:
            run = await predict_benchmark(_samples(), gateway, cutter=PromptCutter(3096))
    assert len(server.requests) == 3
    assert run.lines[1]["model_predict"] == "same"


# --------------------------------------------------------------------------- local provider


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-eval-model"))


async def test_local_provider_answers_every_prompt_in_one_batch(tmp_path: Path,
                                                                tiny_model: Path) -> None:
    role = RoleConfig(provider="local", model=str(tiny_model), batch_size=8, dtype="float32")
    async with _gateway(tmp_path, role) as gateway:
        run = await predict_benchmark(_samples(), gateway,
                                      settings=EvaluateConfig(max_tokens=8), seed=0,
                                      cutter=PromptCutter.for_model(3096, tiny_model))
        usage = gateway.usage_total()
    assert run.failures == []
    assert set(run.lines[0]["model_predict"]) == {"ReACT", "KuaiAgent"}
    assert all(isinstance(v, str) for v in run.lines[0]["model_predict"].values())
    assert isinstance(run.lines[1]["model_predict"], str)
    assert usage["requests"] == 3 and 0 < usage["completion_tokens"] <= 24


@pytest.mark.slow
async def test_embedded_model_writes_free_text_in_the_templates_format(tmp_path: Path) -> None:
    role = RoleConfig(provider="local", model="embedded", batch_size=4)
    async with _gateway(tmp_path, role) as gateway:
        run = await predict_benchmark(_samples(), gateway, settings=EvaluateConfig(max_tokens=24),
                                      seed=0, cutter=PromptCutter.for_model(3096, None))
    answers = [*run.lines[0]["model_predict"].values(), run.lines[1]["model_predict"]]
    assert run.failures == [] and all(a.strip() for a in answers)
    # Not the local provider's JSON tool-call protocol: no tools were offered.
    assert not any(a.lstrip().startswith('{"name"') for a in answers)
