"""Pairs for the decision to call a tool or not, from sft_dataset rows: a decline over a call
(a flip's own source call, or a failed attempt's), the right call over a distractor's; every row
without a pair counted, the rows in the preferences schema, and the stage adding them to the
attempts' pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.tasks.build_preferences.decisions import decision_pairs, distractor_call
from agentune.tasks.build_preferences.pairs import Candidate, pair_key
from agentune.tasks.build_preferences.stage import pair, summary_rows
from agentune.tasks.common.schemas import PREFERENCE_FEATURES
from agentune.tasks.store.artifact_store import ArtifactStore


def tool(name: str, **properties: Any) -> dict[str, Any]:
    required = [p for p, spec in properties.items() if spec.pop("required", False)]
    return {"type": "function", "function": {
        "name": name, "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": properties, "required": required}}}


WEATHER = tool("get_weather", city={"type": "string", "required": True}, date={"type": "string"})
FORECAST = tool("get_forecast", city={"type": "string", "required": True},
                days={"type": "integer", "required": True},
                unit={"type": "string", "enum": ["c", "f"], "required": True})
ORDER = tool("lookup_order", number={"type": "string", "required": True})
SYSTEM = {"role": "system", "content": "You are a helpful agent."}
CALL = {"role": "assistant", "content": "Let me look.", "tool_calls": [{
    "id": "c1", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "date": "2026-06-06"}}}]}
DECLINE = {"role": "assistant", "content": "Sorry, none of my tools can do that."}


def row(row_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
        derivation: str = "none", derived_from: str | None = None, kind: str = "single_call",
        split: str = "train", query_id: str | None = None) -> dict[str, Any]:
    return {"id": row_id, "split": split, "source": "agent", "query_id": query_id or f"s-{row_id}",
            "set_id": "set", "lang": "en", "kind": kind, "messages": messages, "tools": tools,
            "derivation": derivation, "derived_from": derived_from}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def rows() -> list[dict[str, Any]]:
    weather = [SYSTEM, user("Weather in Paris on 6 June?"), CALL,
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
               {"role": "assistant", "content": "Sunny."}]
    return [
        row("r1", weather, [WEATHER, FORECAST, ORDER]),
        row("r1~shuffled1", weather, [ORDER, WEATHER, FORECAST], derivation="shuffled",
            derived_from="r1"),
        row("r1~flip", [SYSTEM, user("Weather in Paris on 6 June?"), DECLINE],
            [tool("send_mail"), FORECAST, ORDER], derivation="flip", derived_from="r1",
            kind="irrelevant"),
        row("r2", [SYSTEM, user("Write me a poem."), DECLINE], [ORDER], kind="irrelevant",
            query_id="s2"),
        row("r3", [SYSTEM, user("Sing a song."), DECLINE], [ORDER], kind="irrelevant"),
        row("r4", weather, [WEATHER]),
        row("r5", weather, [WEATHER, ORDER], split="val"),
    ]


def attempts() -> list[Candidate]:
    wrong = {"role": "assistant", "content": "", "tool_calls": [{
        "id": "x", "type": "function", "function": {"name": "lookup_order",
                                                    "arguments": '{"number": "poem"}'}}]}
    return [Candidate(id="s2.c0.a1", source="attempts", scenario_id="s2", kind="irrelevant",
                      lang="en", messages=[SYSTEM, user("Write me a poem."), wrong],
                      tools=[ORDER], reward=0.1, components={})]


def test_declines_are_chosen_over_calls_and_calls_over_distractors() -> None:
    built = decision_pairs(rows(), attempts(), val_ratio=0.0, seed=0, mirror=True)
    by_chosen = {p["chosen_id"]: p for p in built.rows if p["rejected_id"] != "r1~flip"}
    assert set(by_chosen) == {"r1~flip", "r2", "r1"}
    flip = by_chosen["r1~flip"]
    assert flip["rejected_id"] == "r1" and flip["kind"] == "irrelevant"
    assert flip["prompt"] == [SYSTEM, user("Weather in Paris on 6 June?")]
    assert flip["tools"][0]["function"]["name"] == "send_mail"  # the flip's own offer
    assert flip["chosen"] == [DECLINE]
    assert flip["rejected"][0]["tool_calls"][0]["function"]["name"] == "get_weather"
    # Its mirror: the same request with the needed tool offered, the call over the decline.
    mirror = next(p for p in built.rows if p["rejected_id"] == "r1~flip")
    assert mirror["chosen_id"] == "r1" and mirror["kind"] == "single_call"
    assert mirror["prompt"] == flip["prompt"]
    assert [t["function"]["name"] for t in mirror["tools"]] == [
        "get_weather", "get_forecast", "lookup_order"]  # the source's own offer
    assert mirror["chosen"] == [CALL] and mirror["rejected"] == [DECLINE]
    decline = by_chosen["r2"]
    assert decline["rejected_id"] == "s2.c0.a1" and decline["scenario_id"] == "s2"
    assert decline["rejected"][0]["tool_calls"][0]["function"]["arguments"] == {"number": "poem"}
    call = by_chosen["r1"]
    assert call["chosen"][0]["tool_calls"][0]["function"]["name"] == "get_weather"
    wrong = call["rejected"][0]["tool_calls"][0]["function"]
    assert call["rejected_id"] == f"r1~distractor:{wrong['name']}"
    assert wrong["arguments"] == {"get_forecast": {"city": "Paris", "days": 0, "unit": "c"},
                                  "lookup_order": {"number": ""}}[wrong["name"]]
    for pair_row in built.rows:
        assert pair_row["source"] == "decisions" and pair_row["split"] == "train"
        assert (pair_row["chosen_reward"], pair_row["rejected_reward"], pair_row["margin"]) == (
            1.0, 0.0, 1.0)
    assert dict(built.counts) == {"flip": 1, "mirror": 1, "decline": 1, "distractor": 1,
                                  "no_call_to_reject": 1, "no_distractor": 1}
    assert decision_pairs(rows(), attempts(), val_ratio=0.0, seed=0, mirror=True).rows == (
        built.rows)
    plain = decision_pairs(rows(), attempts(), val_ratio=0.0, seed=0)  # the default: no mirrors
    assert plain.rows == [p for p in built.rows if p["rejected_id"] != "r1~flip"]
    assert "mirror" not in plain.counts
    distractors = {p["rejected_id"] for seed in range(8) for p in decision_pairs(
        rows(), attempts(), val_ratio=0.0, seed=seed).rows
        if p["chosen_id"] == "r1" and p["rejected_id"] != "r1~flip"}
    assert distractors == {"r1~distractor:get_forecast", "r1~distractor:lookup_order"}


def test_a_pair_already_made_is_not_made_again_and_the_rows_publish(tmp_path: Path) -> None:
    first = decision_pairs(rows(), attempts(), val_ratio=0.0, seed=0)
    again = decision_pairs(rows(), attempts(), val_ratio=0.0, seed=0,
                           known=[pair_key(first.rows[0])])
    assert len(again.rows) == len(first.rows) - 1 and again.counts["duplicate"] == 1
    store = ArtifactStore(tmp_path)
    manifest = store.publish("preferences", first.rows, features=PREFERENCE_FEATURES)
    assert manifest.rows == len(first.rows)


def test_the_stage_adds_decision_pairs_to_the_attempts_pairs() -> None:
    config = RunConfig()
    built = pair(config, attempts(), rows())
    stats = built.stats()
    assert stats["by_source"] == {"decisions": 3}
    assert stats["decisions"]["flip"] == 1 and "mirror" not in stats["decisions"]
    metrics = {r["metric"]: r["value"] for r in summary_rows(stats, None)}
    assert metrics["decision pairs: flip"] == 1 and metrics["pairs from decisions"] == 3
    mirrored = pair(RunConfig(preferences={"mirror_flips": True}), attempts(), rows())
    assert mirrored.stats()["decisions"]["mirror"] == 1
    assert pair(config, attempts()).rows == []  # no dataset rows: no decision pairs


def test_a_missing_info_row_that_asks_first_is_no_decline() -> None:
    """Its scenario's attempt that called first may have been right to (a lookup, then the
    question): no pair, counted as ``asks`` (it was paired as a decline)."""
    ask = {"role": "assistant", "content": "", "tool_calls": [{
        "id": "a", "type": "function",
        "function": {"name": "ask_user", "arguments": {"question": "Which order?"}}}]}
    lookup = {"role": "assistant", "content": "", "tool_calls": [{
        "id": "x", "type": "function", "function": {"name": "lookup_order",
                                                    "arguments": {"number": "A-1"}}}]}
    asking = row("m1", [SYSTEM, user("Where is my order?"), ask,
                        {"role": "tool", "tool_call_id": "a", "content": "A-1"}],
                 [ORDER], kind="missing_info", query_id="s-m")
    attempt = Candidate(id="s-m.c0.a0", source="attempts", scenario_id="s-m", kind="missing_info",
                        lang="en", messages=[SYSTEM, user("Where is my order?"), lookup],
                        tools=[ORDER], reward=1.0, components={})
    built = decision_pairs([asking], [attempt], val_ratio=0.0, seed=0)
    assert built.rows == [] and dict(built.counts) == {"asks": 1}


def test_a_distractor_takes_the_right_calls_values_from_json_text_arguments() -> None:
    """OpenAI's form: arguments as JSON text (they were read as no values at all)."""
    text_call = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "function": {
        "name": "get_weather", "arguments": '{"city": "Paris", "date": "2026-06-06"}'}}]}
    wrong = distractor_call(FORECAST, text_call)["tool_calls"][0]["function"]
    assert wrong == {"name": "get_forecast", "arguments": {"city": "Paris", "days": 0,
                                                           "unit": "c"}}
