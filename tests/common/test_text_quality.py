"""Quality gates for model-written user text: debris and script checks."""

from __future__ import annotations

import pytest

from agentune.tasks.common.text_quality import written_text_problem


@pytest.mark.parametrize("text, lang, problem", [
    ("[a-zA-Z]方向如[a-zA-Z]{6}的路线", "zh", "regex_debris"),
    ("Find flights matching \\d+ stops", "en", "regex_debris"),
    ("Book {{ goal }} for me", "en", "template_debris"),
    ("Call TOOL_NAME with ARG_VALUE", "en", "template_debris"),
    ("!!! ??? ... ###", "en", "too_few_letters"),
    ("the the the the the the", "en", "repeated_word"),
    ("What is the weather in Oslo?", "zh", "wrong_script"),
    ("明天北京天气如何？", "en", "wrong_script"),
    ("帮我查一下明天北京的天气", "zh", None),
    ("查订单 O-1001 的物流", "zh", None),
    ("Cancel booking TB-0007, please.", "en", None),
])
def test_written_text_problems(text: str, lang: str, problem: str | None) -> None:
    assert written_text_problem(text, lang) == problem
