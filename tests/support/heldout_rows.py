"""sft_dataset and templates rows for the held-out benchmark and evaluate flow tests."""

from __future__ import annotations

import json
from typing import Any

from agentune.tasks.agent.prompt_templates import compose_template

SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "date": {"type": "string"}},
                   "required": ["city"]}}}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _agent_row(row_id: str, query_id: str, split: str, template_id: str, lang: str,
               query: str, calls: list[tuple[str, str, dict[str, Any], str]],
               answer: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"},
                                      {"role": "user", "content": query}]
    steps = []
    for k, (thought, tool, args, observation) in enumerate(calls):
        messages.append({"role": "assistant", "content": thought,
                         "tool_calls": [_call(f"{row_id}-c{k}", tool, args)]})
        messages.append({"role": "tool", "tool_call_id": f"{row_id}-c{k}",
                         "content": observation})
        steps.append({"step": k, "kind": "plan", "prompt": f"[{template_id}] step {k}: {query}",
                      "completion": thought})
    messages.append({"role": "assistant", "content": answer})
    # As synthesis writes them: the planner's finishing step, then a two-stage protocol's
    # concluder step.
    steps.append({"step": len(calls), "kind": "plan",
                  "prompt": f"[{template_id}] finish: {query}", "completion": answer})
    if template_id == "tpl-seen":  # a KuaiAgent template
        steps.append({"step": len(calls) + 1, "kind": "conclude",
                      "prompt": f"[{template_id}] conclude: {query}", "completion": answer})
    return {"id": row_id, "split": split, "source": "agent", "query_id": query_id,
            "set_id": f"set-{query_id}", "template_id": template_id,
            "template_source": "benchmark" if template_id.startswith("bench-") else "meta-agent",
            "task_type": "multi_step_planning", "lang": lang, "messages": messages,
            "tools": [SEARCH, WEATHER], "steps": steps, "cluster_id": row_id, "n_tokens": 100,
            "kind": None, "derivation": "none", "derived_from": None}


def _general_row(row_id: str, split: str, lang: str, prompt: str, answer: str) -> dict[str, Any]:
    return {"id": row_id, "split": split, "source": "general", "query_id": None, "set_id": None,
            "template_id": None, "template_source": None, "task_type": "general", "lang": lang,
            "messages": [{"role": "user", "content": prompt},
                         {"role": "assistant", "content": answer}],
            "tools": [], "steps": [{"step": 0, "kind": "conclude", "prompt": prompt,
                                    "completion": answer}],
            "cluster_id": row_id, "n_tokens": 20, "kind": None, "derivation": "none",
            "derived_from": None}


def sft_dataset_rows() -> list[dict[str, Any]]:
    """Train rows (they make bench-react and tpl-seen "seen"), and a test split with: a zh query
    answered twice (two templates) with the same first call and different second calls; an en
    query whose first call fails (its second step is a reflection); an en query needing no tool;
    two general rows."""
    error = json.dumps({"error": "city not found", "city": "Pari"})
    return [
        _agent_row("tr1", "q-train", "train", "bench-react", "en", "weather in Oslo?",
                   [("look it up", "get_weather", {"city": "Oslo"}, "rain")], "It rains."),
        _agent_row("tr2", "q-train2", "train", "tpl-seen", "zh", "上海天气？",
                   [("查天气", "get_weather", {"city": "上海"}, "晴")], "晴天。"),
        _agent_row("t1", "q-zh", "test", "bench-react", "zh", "北京明天天气怎么样？要带伞吗？",
                   [("先搜索北京明天的天气", "web_search", {"query": "北京 明天 天气"},
                     "北京明天有雨"),
                    ("查询北京的天气预报", "get_weather", {"city": "北京", "date": "明天"},
                     "小雨，18度")],
                   "北京明天小雨，18度，建议带伞。"),
        _agent_row("t2", "q-zh", "test", "tpl-seen", "zh", "北京明天天气怎么样？要带伞吗？",
                   [("先搜索北京明天的天气", "web_search", {"query": "北京 明天 天气"},
                     "北京明天有雨"),
                    ("再确认一下天气", "get_weather", {"city": "北京"}, "小雨")],
                   "明天北京有小雨，要带伞。"),
        _agent_row("t3", "q-en", "test", "bench-autogpt", "en", "What is the weather in Paris?",
                   [("check the weather", "get_weather", {"city": "Pari"}, error),
                    ("the city name was wrong, retry", "get_weather", {"city": "Paris"},
                     "sunny, 24C")],
                   "It is sunny in Paris, 24C."),
        _agent_row("t4", "q-none", "test", "bench-react", "en", "Say hello to me.", [],
                   "Hello!"),
        _general_row("g1", "test", "en", "Name a prime number.", "7 is a prime number."),
        _general_row("g2", "test", "zh", "一年有几个月？", "一年有十二个月。"),
        _general_row("g3", "train", "en", "Count to three.", "1, 2, 3."),
    ]


def template_rows() -> list[dict[str, Any]]:
    """The templates artifact: a seen and an unseen Meta-Agent planner, an unseen dropped one."""
    sections = {
        "profile": "You are a travel helper.",
        "instruction": "Use one tool per step; finish when you know enough.",
        "tools": "Tools:\n{tools}",
        "goal": "Now: {current_time}\nRequest: {goal}",
        "memory": "Done so far:\n{completed_tasks}\n{conversation_history}\n{knowledge}",
        "format": "{output_format}",
    }
    text = compose_template(sections)
    row = {"source": "meta-agent", "kind": "planner", "lang": "en", "text": text,
           "sections": sections, "kept": True}
    return [{"id": "tpl-seen", "protocol": "kuaiagent", **row},
            {"id": "tpl-unseen", "protocol": "toolllama", **row},
            {"id": "tpl-dropped", "protocol": "react", **row, "kept": False}]
