"""KuaiAgent's planner, which forbids asking the user, lets the agent ask where ``ask_user`` is
offered, and keeps its original wording where it is not (KAgentBench prompts). AutoGPT keeps its
wording everywhere: branches added to its text diluted the wording build_templates compares
Meta-Agent drafts against, so a copy of AutoGPT was no longer caught as a near duplicate."""

from __future__ import annotations

from datetime import datetime

import pytest

from agentune.tasks.agent.prompt_templates import AgentPromptInputs, benchmark_template
from agentune.tasks.verifier.rollout import ask_user_tool

NOW = datetime(2025, 6, 2, 9, 30)
WEATHER = {"name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
ASK = ask_user_tool()
ASK_ENTRY = {"name": ASK.name, "description": ASK.description, "parameters": ASK.parameters}

# Per template and language: what forbids asking, and what says when to ask instead.
WORDING = {
    ("kuaiagent", "en"): (["Do not ask the user for help.", "without\nhuman help"],
                          "Ask the user (ask_user) only for what the request leaves out."),
    ("kuaiagent", "zh"): (["不向用户求助。", "无需人类协助"],
                          "只在请求缺少必要信息时，用 ask_user 向用户询问。"),
}


def _render(template: str, lang: str, tools: list[dict]) -> str:
    goal = "Book me a meeting." if lang == "en" else "帮我约个会。"
    return benchmark_template(template).render(
        AgentPromptInputs.for_query(goal, tools, current_time=NOW, lang=lang))


@pytest.mark.parametrize("template, lang", sorted(WORDING))
def test_asking_is_allowed_only_where_ask_user_is_offered(template: str, lang: str) -> None:
    forbidding, asking = WORDING[(template, lang)]
    offered = _render(template, lang, [WEATHER, ASK_ENTRY])
    assert asking in offered
    assert not any(text in offered for text in forbidding)
    benchmark = _render(template, lang, [WEATHER])
    assert all(text in benchmark for text in forbidding)
    assert asking not in benchmark and "ask_user" not in benchmark
