"""A random tiny model fitted to the training tests' conversations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.config.store import StoreConfig
from agentune.config.train import TrainConfig
from agentune.tasks.store.artifact_store import ArtifactStore

from support.tiny_models import tiny_llama

# SmolLM2's own template: ChatML, no tools, no {% generation %} markers.
SMOLLM_CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string"}},
                   "required": ["city"]}}}


SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "top_k": {"type": "integer"}},
                   "required": ["query"]}}}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS: list[dict[str, Any]] = [
    {"lang": "zh", "messages": [
        {"role": "user", "content": "北京今天天气怎么样?"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("c1", "get_weather", {"city": "北京"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "晴,25度"},
        {"role": "assistant", "content": "北京今天晴,25度。"}]},
    {"lang": "en", "messages": [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Find the latest news on DeepSpeed."},
        {"role": "assistant", "content": "Let me search.",
         "tool_calls": [_call("c2", "web_search", {"query": "DeepSpeed news", "top_k": 3})]},
        {"role": "tool", "tool_call_id": "c2", "content": "DeepSpeed 0.19 released"},
        {"role": "assistant", "content": "DeepSpeed 0.19 was released."}]},
    {"lang": "zh", "messages": [
        {"role": "user", "content": "上海明天用华氏度显示天气"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("c3", "get_weather", {"city": "上海", "unit": "F"})]},
        {"role": "tool", "tool_call_id": "c3", "content": "雨,68F"},
        {"role": "assistant", "content": "上海明天有雨,68华氏度。"}]},
    {"lang": "en", "messages": [
        {"role": "user", "content": "Say hello in one word."},
        {"role": "assistant", "content": "Hello."}]},
]


def make_tiny_model(folder: Path, chat_template: str = SMOLLM_CHATML) -> Path:
    """A random 2-layer Llama with a byte-level BPE tokenizer fitted to the test texts."""
    corpus = [json.dumps(conv["messages"], ensure_ascii=False) for conv in CONVERSATIONS]
    corpus += [json.dumps([WEATHER, SEARCH]),
               ("<tool_call> </tool_call> <tool_response> </tool_response> <tools> </tools> "
                "# Tools You may call one or more functions Question: Thought: Final Answer: "
                "system user assistant")]
    return tiny_llama(folder, corpus * 4, chat_template=chat_template, vocab_size=512,
                      max_positions=2048)


def sft_rows(copies: int = 2) -> list[dict[str, Any]]:
    """A tiny sft_dataset: each conversation ``copies`` times in train, once in val and test."""
    rows = []
    splits = ["train"] * copies + ["val", "test"]
    for c, conv in enumerate(CONVERSATIONS):
        tools = [WEATHER, SEARCH] if len(conv["messages"]) > 2 else []
        user = next(m["content"] for m in conv["messages"] if m["role"] == "user")
        answer = conv["messages"][-1]["content"]
        for k, split in enumerate(splits):
            rows.append({
                "id": f"r{c}-{k}", "split": split, "source": "agent" if tools else "general",
                "query_id": f"q{c}", "set_id": f"s{c}", "template_id": "react",
                "template_source": "benchmark",
                "task_type": "tool_selection" if tools else "general",
                "lang": conv["lang"], "messages": conv["messages"], "tools": tools,
                "steps": [{"step": 1, "kind": "conclude",
                           "prompt": f"Question: {user}\nThought:",
                           "completion": f" I know it.\nFinal Answer: {answer}"}],
                "cluster_id": f"k{c}", "n_tokens": None,
                "kind": None, "derivation": "none", "derived_from": None,
            })
    return rows


def train_run_config(store: ArtifactStore, model: Path, tmp_path: Path, **train: Any) -> RunConfig:
    """The train tests' run config: ZeRO-3 over 2 gloo processes in fp32 on ``model``, checkpoints
    under ``tmp_path``; ``train`` overrides any train setting."""
    settings = {
        "base_model": str(model), "nproc_per_node": 2, "precision": "fp32", "max_length": 512,
        "per_device_batch_size": 2, "gradient_accumulation_steps": 1, "learning_rate": 5e-3,
        "warmup_ratio": 0.0, "logging_steps": 1, "eval_steps": 1000, "save_steps": 1000,
        "work_dir": str(tmp_path / "runs"),
    } | train
    return RunConfig(store=StoreConfig(root=str(store.root)), train=TrainConfig(**settings))
