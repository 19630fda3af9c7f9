"""templates/chatml_training.j2: tools, tool calls and generation markers for ChatML models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentune.paths import templates_dir

TEMPLATE = (templates_dir() / "chatml_training.j2").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from agentune.tasks.llm.embedded_model import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path("embedded"))


def render(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None, **kw: Any) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, chat_template=TEMPLATE,
                                         tokenize=False, **kw)


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}


def test_string_arguments_are_not_encoded_twice(tokenizer: Any) -> None:
    as_dict = [{"role": "user", "content": "查一下"}, {"role": "assistant", "content": None,
                "tool_calls": [{"type": "function",
                                "function": {"name": "lookup", "arguments": {"q": "天气"}}}]}]
    as_text = [as_dict[0], {"role": "assistant", "content": None, "tool_calls": [{
        "type": "function", "function": {"name": "lookup", "arguments": '{"q": "天气"}'}}]}]
    expected = '<tool_call>\n{"name": "lookup", "arguments": {"q": "天气"}}\n</tool_call><|im_end|>'
    assert expected in render(tokenizer, as_dict, [TOOL])
    assert render(tokenizer, as_dict, [TOOL]) == render(tokenizer, as_text, [TOOL])


def test_system_prompt_and_tools_share_the_system_turn(tokenizer: Any) -> None:
    text = render(tokenizer, [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "hi"}], [TOOL])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert text.count("<|im_start|>system") == 1
    assert '<tools>\n{"type":"function","function":{"name":"lookup"' in text  # compact
    plain = render(tokenizer, [{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_consecutive_tool_results_share_one_user_turn(tokenizer: Any) -> None:
    text = render(tokenizer, [
        {"role": "user", "content": "both"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "lookup", "arguments": {"q": "a"}}},
            {"type": "function", "function": {"name": "lookup", "arguments": {"q": "b"}}}]},
        {"role": "tool", "content": "A"}, {"role": "tool", "content": "B"},
    ], [TOOL])
    assert text.endswith("<|im_start|>user\n<tool_response>\nA\n</tool_response>\n"
                         "<tool_response>\nB\n</tool_response><|im_end|>\n")
    assert "</tool_call>\n<tool_call>" in text


def test_trl_accepts_it_for_assistant_only_loss(tokenizer: Any) -> None:
    from trl.chat_template_utils import (
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    tokenizer = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    tokenizer.chat_template = TEMPLATE
    assert get_training_chat_template(tokenizer) is None  # nothing left for TRL to patch
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    assert is_chat_template_stop_token_trained(tokenizer)


def test_the_embedded_model_trains_with_it_and_qwen_with_trls_own(tokenizer: Any) -> None:
    import trl

    from agentune.tasks.common.chat_audit import training_chat_template

    template, origin = training_chat_template(tokenizer)
    assert template == TEMPLATE and origin == "templates/chatml_training.j2"
    qwen = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    chat_templates = Path(trl.__file__).parent / "chat_templates"
    qwen.chat_template = (chat_templates / "qwen2_5.jinja").read_text(encoding="utf-8")
    template, _ = training_chat_template(qwen)
    assert template == (chat_templates / "qwen2_5_training.jinja").read_text(encoding="utf-8")
