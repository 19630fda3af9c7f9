"""A random tiny ChatML model for the evaluation tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.tiny_models import tiny_llama

LINES: list[dict[str, Any]] = [
    {"id": "p1", "query": "北京天气", "type": "plantooluse",
     "golden_result_list": [{"thought": "查天气", "tool_name": "get_weather",
                             "tool_args": {"city": "北京"}}],
     "funcs": [{"name": "get_weather", "parameters": {"properties": {"city": {}}}}],
     "prompt_input": {"ReACT": "ReACT prompt: 北京天气", "KuaiAgent": "KuaiAgent prompt"},
     "memory": "", "memory_type": "task",
     "memory_last_task": {"tool_name": "None", "tool_args": {}}, "extra_field": [1, 2]},
    {"id": 7, "query": "who are you", "type": "profile",
     "golden_result_list": [{"golden_result": "an assistant"}], "funcs": [],
     "prompt_input": {"prompt": "Who are you?"}, "memory": ""},
]


def make_tiny_model(folder: Path) -> Path:
    """A random 2-layer Llama with a small byte-level BPE tokenizer and a ChatML template."""
    corpus = [json.dumps(LINES, ensure_ascii=False), "Thought: Action: Action Input: "
              "Final Answer: system user assistant weather"] * 4
    return tiny_llama(folder, corpus, vocab_size=400, max_positions=4096, chat_template=(
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
        "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"))
