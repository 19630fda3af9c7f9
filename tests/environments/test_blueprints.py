"""Task recipes rendered: slots said per language, dates in every form, a lone slot keeping its
type in a call, facts read from the results, and recipes that cannot make scenarios named."""

from __future__ import annotations

import random

import pytest

from agentune.tasks.environments.blueprints import (
    Day,
    Recipe,
    Text,
    Unbound,
    call,
    choose,
    recipe_problem,
    render,
)

RECIPE = Recipe(
    id="travel.book", kind="multi_step",
    calls=[[call("search_flights", origin="{origin}", destination="{to}", departure_date="{day}")],
           [call("book_flight", flight_id="{flight}", passenger="{who}", seats="{seats}")]],
    phrasings={"zh": {"order": "帮{who}订{day:zh}从{origin}到{to}的机票。",
                      "form": "订票｜{origin}→{to}｜{day}"},
               "en": {"order": "Book {origin} to {to} on {day:enw} for {who}.",
                      "form": ["From {origin:zh} ({origin}) to {to}, {day:en}.",
                               "{origin}-{to}, {day:en}."]}},
    facts=["{flight}", "{results[1][0][booking_id]}"])
SLOTS = {"origin": Text("北京", "Beijing"), "to": Text("上海", "Shanghai"),
         "day": Day("2025-06-06"), "flight": "MU5102", "who": "张伟", "seats": 2}


def test_a_request_says_the_slots_in_its_language_and_calls_take_plain_values() -> None:
    zh = render(RECIPE, SLOTS, "zh", "order", random.Random(0))
    assert zh.request == "帮张伟订6月6日从北京到上海的机票。"
    assert zh.ground_truth[0][0].arguments == {"origin": "北京", "destination": "上海",
                                               "departure_date": "2025-06-06"}
    assert zh.ground_truth[1][0].arguments["seats"] == 2  # a lone slot keeps its type
    en = render(RECIPE, SLOTS, "en", "order", random.Random(0))
    assert en.request == "Book Beijing to Shanghai on Friday, June 6 for 张伟."
    assert en.ground_truth[0][0].arguments["origin"] == "Beijing"
    assert render(RECIPE, SLOTS, "zh", "form", random.Random(0)).request == \
        "订票｜北京→上海｜2025-06-06"
    wordings = {render(RECIPE, SLOTS, "en", "form", random.Random(i)).request for i in range(20)}
    assert wordings == {"From 北京 (Beijing) to Shanghai, June 6.", "Beijing-Shanghai, June 6."}


def test_facts_read_the_results_and_a_missing_one_raises() -> None:
    draft = render(RECIPE, SLOTS, "en", "order", random.Random(0))
    results = [[[{"flight_id": "MU5102"}]], [{"booking_id": "TB-0042"}]]
    assert draft.facts(results) == ["MU5102", "TB-0042"]
    with pytest.raises(IndexError):
        draft.facts([[[]]])
    assert draft.slot_record()["day"] == "2025-06-06"


def test_day_forms() -> None:
    day = Day("2025-06-02")
    assert [format(day, s) for s in ("", "zh", "en", "zhw", "enw")] == [
        "2025-06-02", "6月2日", "June 2", "6月2日（周一）", "Monday, June 2"]
    with pytest.raises(ValueError, match="formats as"):
        format(day, "fr")


@pytest.mark.parametrize(("change", "field"), [
    ({"id": "has space"}, "id"),
    ({"kind": "chat"}, "kind"),
    ({"phrasings": {"zh": {"only": "一个"}}}, "phrasings.zh"),
    ({"phrasings": {"fr": {"a": "x", "b": "y"}}}, "phrasings"),
    ({"kind": "missing_info"}, "hidden"),
    ({"kind": "no_tool"}, "calls"),
])
def test_a_recipe_that_cannot_make_scenarios_is_named(change: dict, field: str) -> None:
    recipe = Recipe(**{**RECIPE.__dict__, **change})
    problem = recipe_problem(recipe)
    assert problem is not None and problem[0] == field
    assert recipe_problem(RECIPE) is None
    assert recipe_problem("not a recipe") == ("", "not a Recipe: str")


def test_choose_raises_unbound_naming_what_is_missing() -> None:
    assert choose(random.Random(0), ["a"], "nothing") == "a"
    with pytest.raises(Unbound, match="no paid order"):
        choose(random.Random(0), [], "no paid order")
