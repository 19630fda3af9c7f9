"""Which slot values a paraphrase loses: any surface form of a value counts as kept."""

from __future__ import annotations

import random

from agentune.tasks.build_scenarios.paraphrase import lost_values, read_paraphrase
from agentune.tasks.environments.blueprints import Day, Recipe, Text, call, render
from agentune.tasks.llm.types import ChatResult

RECIPE = Recipe(id="t.book", kind="single_call",
                calls=[[call("search_flights", origin="{origin}", destination="上海",
                             departure_date="{day}")]],
                phrasings={"zh": {"a": "查{day:zh}{origin}到上海的航班", "b": "{origin}→上海 {day}"},
                           "en": {"a": "Flights from {origin} on {day:en}", "b": "{origin}: {day}"}},
                facts=["{origin}"])
SLOTS = {"origin": Text("北京", "Beijing"), "day": Day("2025-06-06")}


def test_a_value_kept_in_another_surface_form_is_not_lost() -> None:
    draft = render(RECIPE, SLOTS, "zh", "a", random.Random(0))
    assert lost_values(draft, "帮我看看2025-06-06从北京飞上海的班次") == []
    assert lost_values(draft, "Beijing to Shanghai, Friday, June 6?") == []
    assert lost_values(draft, "帮我查一下去上海的航班") == ["北京", "6月6日"]


def test_the_answer_is_read_as_one_unquoted_line() -> None:
    assert read_paraphrase(ChatResult(content='"Flights from Beijing on June 6?"\nsecond')) == \
        "Flights from Beijing on June 6?"
    assert read_paraphrase(ChatResult(content=None)) == ""
