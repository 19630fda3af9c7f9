"""Tool calls read from free text: Hermes ``<tool_call>`` blocks and fenced JSON call blocks."""

from __future__ import annotations

import json

import pytest

from agentune.tasks.llm.tool_call_text import read_tool_calls

WEATHER = ("get_weather", json.dumps({"city": "Paris"}))


def test_hermes_blocks_are_calls_and_the_text_before_is_the_content() -> None:
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}'
            "\n</tool_call>")
    content, calls = read_tool_calls(text)
    assert content == "Let me look."
    assert calls == [WEATHER, ("calculator", json.dumps({"expression": "2+2"}))]


def test_an_unclosed_hermes_block_at_the_end_is_read() -> None:
    content, calls = read_tool_calls('<tool_call>{"name": "get_weather", "arguments": '
                                     '{"city": "Paris"}}')
    assert (content, calls) == (None, [WEATHER])


def test_an_almost_json_block_is_repaired() -> None:
    _, calls = read_tool_calls('<tool_call>\n{"name": "get_weather", "arguments": '
                               '{"city": "Paris",}\n</tool_call>')
    assert calls == [WEATHER]


def test_a_hermes_block_that_is_not_a_call_stays_in_the_content() -> None:
    text = ('<tool_call>I cannot decide</tool_call>\n<tool_call>{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}</tool_call>')
    content, calls = read_tool_calls(text)
    assert calls == [WEATHER] and content == "<tool_call>I cannot decide</tool_call>"
    assert read_tool_calls("<tool_call>nothing here</tool_call>") == (
        "<tool_call>nothing here</tool_call>", [])


def test_a_fenced_json_call_as_qwen_coder_writes_it() -> None:
    text = ('To get the weather, I will call the tool:\n\n```json\n{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}\n```\n\nThis returns the current weather.')
    content, calls = read_tool_calls(text)
    assert calls == [WEATHER]
    assert content == ("To get the weather, I will call the tool:\n"
                       "This returns the current weather.")


@pytest.mark.parametrize("block", [
    '```\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```',
    '```JSON\n[{"name": "get_weather", "arguments": {"city": "Paris"}}]\n```',
    '```json\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n```',
])
def test_fenced_variants(block: str) -> None:
    assert read_tool_calls(block) == (None, [WEATHER])


def test_several_fenced_calls() -> None:
    text = ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\nand\n'
            '```json\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n```')
    content, calls = read_tool_calls(text)
    assert content == "and"
    assert calls == [WEATHER, ("get_weather", json.dumps({"city": "Rome"}))]


@pytest.mark.parametrize("text", [
    'The user is:\n```json\n{"name": "Ada", "age": 36}\n```',  # a JSON answer, no arguments
    "```python\nprint('hi')\n```",
    '```json\n[{"name": "get_weather", "arguments": {}}, 3]\n```',  # not all calls
    "The weather in Paris is sunny.",
])
def test_text_that_holds_no_call_is_left_as_it_is(text: str) -> None:
    assert read_tool_calls(text) == (text, [])


def test_hermes_blocks_win_over_fenced_ones() -> None:
    text = ('```json\n{"name": "calculator", "arguments": {"expression": "1"}}\n```\n'
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    content, calls = read_tool_calls(text)
    assert calls == [WEATHER]
    assert content is not None and content.startswith("```json")
