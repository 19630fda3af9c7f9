"""Rows derived from verified trajectories (issue 44): each derivation on a fixture whose offers
vary and whose first call is mostly the first tool offered, then through the whole build: the
mix reaches its share, the position cue goes, the same seed gives the same rows, only train rows
are sources (and the leak check sees derived rows by their ids), a row the verifier fails is a
reject, the card and PNG count them, and ``show`` prints a flip beside its source."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from benchmarks.outcome import leaks

from agentune.config import RunConfig
from agentune.config.build_dataset import AugmentConfig, BuildDatasetConfig
from agentune.tasks.build_dataset.card import plot_rows, render_card
from agentune.tasks.build_dataset.derivations import (
    DECLINES,
    _renamed_arguments,
    called_names,
    decision_shares,
    derive,
    flips_needed,
    masked_names,
    relevance_flip,
    shuffled_offers,
    tool_name,
    tool_pool,
    with_general_tools,
)
from agentune.tasks.build_dataset.derived_check import derived_problem
from agentune.tasks.build_dataset.general_data import load_general_data
from agentune.tasks.build_dataset.samples import Sample, sample_from_general
from agentune.tasks.build_dataset.side_by_side import flip_beside_source
from agentune.tasks.build_dataset.stage import (
    DatasetBuild,
    DatasetInputs,
    build_sft_dataset,
    dataset_params,
)
from agentune.tasks.common.chat_audit import ChatAuditor
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.store.artifact_store import ArtifactStore

from support.trajectories import TOOLS, make_trajectories, samples_of


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"Look up one {name.split('_')[-1]} by its number",
        "parameters": {"type": "object", "properties": {"number": {"type": "string"}},
                       "required": ["number"]}}}


CATALOG = TOOLS + [_tool(f"lookup_{w}") for w in ("order", "ticket", "invoice", "user", "room")]
OFFER = 4


def offer_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Trajectory rows offering 4 tools of CATALOG: the called ones first in 3 of 4 rows (the
    position cue of today's data); every 4th row a decline of an ``irrelevant`` scenario.
    Tool results carry the tool's ``name``."""
    rng = random.Random(seed)
    rows = make_trajectories(n, seed=seed).rows
    for i, row in enumerate(sorted(rows, key=lambda r: r["id"])):
        row["scenario_id"] = row["query_id"]
        if i % 4 == 0:
            row["kind"] = "irrelevant"
            row["messages"] = row["messages"][:2] + [
                {"role": "assistant", "content": "Sorry, no tool here can do that for you."}]
            row["tools"] = rng.sample(CATALOG, OFFER)
            continue
        row["kind"] = "single_call"
        names = {}
        for message in row["messages"]:
            for call in message.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
            if message["role"] == "tool":
                message["name"] = names[message["tool_call_id"]]
        called = list(dict.fromkeys(names.values()))
        by_name = {tool_name(t): t for t in CATALOG}
        offer = [by_name[c] for c in called] + rng.sample(
            [t for t in CATALOG if tool_name(t) not in called], OFFER - len(called))
        if rng.random() < 0.25:
            rng.shuffle(offer)
        row["tools"] = offer
    return rows


def train_samples(n: int = 24, seed: int = 0) -> list[Sample]:
    samples = samples_of(offer_rows(n, seed))
    for s in samples:
        s.split = "train"
    return samples


def calling(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if called_names(s.messages)]


# --------------------------------------------------------------------------- each derivation


def test_a_flip_offers_none_of_the_needed_tools_keeps_the_length_and_declines() -> None:
    samples = train_samples()
    pool = tool_pool(samples)
    for source in calling(samples):
        flip = relevance_flip(source, pool, seed=0)
        assert flip is not None
        needed = set(called_names(source.messages))
        offered = [tool_name(t) for t in flip.tools]
        assert not needed & set(offered) and len(offered) == len(source.tools) == OFFER
        assert len(set(offered)) == OFFER
        assert flip.messages[:-1] == source.messages[:2]  # system and request as they were
        assert flip.messages[-1] == {"role": "assistant", "content": flip.messages[-1]["content"]}
        assert flip.messages[-1]["content"] in DECLINES["zh" if source.lang == "zh" else "en"]
        assert (flip.kind, flip.derivation, flip.derived_from) == ("irrelevant", "flip", source.id)
        assert (flip.query_id, flip.set_id) == (source.query_id, source.set_id)
        assert derived_problem(flip) is None  # verified as an irrelevant row
    # Too few other tools to keep the length: no flip.
    source = calling(samples)[0]
    assert relevance_flip(source, tool_pool([source]), seed=0) is None


def _renamed(source: Sample, prefix: str) -> Sample:
    """``source`` with every tool name prefixed, in the offer, the calls and the results."""
    row = copy.deepcopy(source)
    row.id = prefix + row.id
    for tool in row.tools:
        tool["function"]["name"] = prefix + tool["function"]["name"]
    for message in row.messages:
        for call in message.get("tool_calls") or []:
            call["function"]["name"] = prefix + call["function"]["name"]
        if message.get("role") == "tool" and message.get("name"):
            message["name"] = prefix + message["name"]
    return row


def test_rows_that_call_nothing_are_offered_what_calling_rows_are(tmp_path: Path) -> None:
    """Two environments that no row offers together (the fixture's tools, and the same rows
    with every tool renamed): a flip's substitutes come from its own environment, and a general
    row's tools from one row's offer, so the tools offered tell nothing of the answer."""
    home = calling(train_samples())
    away = [_renamed(s, "away_") for s in home]
    pool = tool_pool(home + away)
    catalog = {tool_name(t) for t in CATALOG}
    for source in home + away:
        flip = relevance_flip(source, pool, seed=0)
        assert flip is not None
        inside = {tool_name(t) in catalog for t in flip.tools}
        assert inside == {tool_name(source.tools[0]) in catalog}  # one environment, its own
    chat = tmp_path / "g.jsonl"
    chat.write_text(json.dumps({"instruction": "Name three colours.", "input": "",
                                "output": "Red, green and blue."}) + "\n", encoding="utf-8")
    general = sample_from_general(load_general_data([str(chat)])[0][0])
    offers = {frozenset(o) for o in pool.offers}
    for seed in range(20):
        row = with_general_tools(general, pool, 3, seed=seed)
        names = {tool_name(t) for t in row.tools}
        assert len(names) == 3 and any(names <= o for o in offers)


def test_shuffled_offers_keep_the_calls_byte_identical() -> None:
    source = calling(train_samples())[0]
    copies = shuffled_offers(source, 3, seed=0)
    orders = {tuple(tool_name(t) for t in c.tools) for c in copies}
    assert len(copies) == 3 == len(orders)
    assert tuple(tool_name(t) for t in source.tools) not in orders
    for c in copies:
        assert json.dumps(c.messages) == json.dumps(source.messages)
        assert sorted(map(json.dumps, c.tools)) == sorted(map(json.dumps, source.tools))
        assert c.derivation == "shuffled" and c.derived_from == source.id
        assert derived_problem(c) is None
    two = copy.deepcopy(source)
    two.tools = two.tools[:2]
    assert len(shuffled_offers(two, 3, seed=0)) == 1  # a 2-tool offer has one other order


def test_masked_names_are_consistent_across_offer_calls_and_results() -> None:
    source = calling(train_samples())[0]
    masked = masked_names(source, seed=0)
    originals = {tool_name(t) for t in source.tools}
    text = json.dumps([masked.messages, masked.tools], ensure_ascii=False)
    assert not any(f'"{name}"' in text for name in originals)
    offer = {tool_name(t): t["function"]["parameters"]["properties"] for t in masked.tools}
    assert len(offer) == OFFER
    ids_to_name = {}
    for message in masked.messages:
        for call in message.get("tool_calls") or []:
            name = call["function"]["name"]
            assert name in offer and set(call["function"]["arguments"]) <= set(offer[name])
            ids_to_name[call["id"]] = name
        if message["role"] == "tool":
            assert message["name"] == ids_to_name[message["tool_call_id"]]
    # The same renaming everywhere: mapping the names back gives the source's calls.
    back = {tool_name(m): tool_name(s) for m, s in zip(masked.tools, source.tools, strict=True)}
    assert [back[n] for n in called_names(masked.messages)] == called_names(source.messages)
    assert derived_problem(masked) is None  # still verifies against its (masked) offer
    assert masked_names(source, seed=0) == masked and masked_names(source, seed=1) != masked


def test_general_rows_with_tools_call_nothing_and_keep_their_answer(tmp_path: Path) -> None:
    general = tmp_path / "g.jsonl"
    general.write_text(json.dumps({"instruction": "Write a haiku about autumn rain.",
                                   "input": "", "output": "Cold rain on the roof, / leaves "
                                   "drift down the gutter, / the kettle is on."}) + "\n")
    source = sample_from_general(load_general_data([str(general)])[0][0])
    pool = tool_pool(train_samples())
    row = with_general_tools(source, pool, 3, seed=0)
    assert len(row.tools) == 3 and all(t in pool.tools.values() for t in row.tools)
    assert row.messages == source.messages and not called_names(row.messages)
    assert (row.kind, row.derivation, row.derived_from) == ("no_tool", "general_tools", source.id)
    assert derived_problem(row) is None  # verified as a no_tool row
    echo = copy.deepcopy(row)
    echo.messages[-1]["content"] = echo.messages[0]["content"]
    assert "only restates the request" in (derived_problem(echo) or "")


def test_flips_fill_the_share_of_rows_calling_nothing() -> None:
    assert flips_needed(70, 30, 0.3) == 0 and flips_needed(80, 10, 0.0) == 0
    need = flips_needed(80, 10, 0.3)
    assert (10 + need) / (90 + need) >= 0.3 > (10 + need - 1) / (90 + need - 1)


def test_derive_is_seeded_and_independent_of_row_order() -> None:
    samples = train_samples()
    cfg = AugmentConfig(orders=2, no_call_share=0.3)  # a share this fixture's calling rows fill
    made = derive(samples, cfg, seed=3, keep=lambda s: True)
    again = derive(list(reversed(samples)), cfg, seed=3, keep=lambda s: True)
    other = derive(samples, cfg, seed=4, keep=lambda s: True)
    assert sorted(made.rows, key=lambda s: s.id) == sorted(again.rows, key=lambda s: s.id)
    assert sorted(map(repr, made.rows)) != sorted(map(repr, other.rows))
    assert made.kept["flip"] == made.flips_wanted > 0 and not made.stats()["flips_short"]


# --------------------------------------------------------------------------- through the build


@pytest.fixture(scope="module")
def auditor() -> ChatAuditor:
    return ChatAuditor(resolve_model_path("embedded"), max_length=4096)


def general_file(path: Path, n: int, echo: int = 0) -> Path:
    """``n`` alpaca rows; the first ``echo`` answer with their own instruction (no answer)."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            ask = f"Tell me something about the number {i} please."
            fh.write(json.dumps({"instruction": ask, "input": "", "output": ask if i < echo else
                                 f"{i} is a fine number; it comes after {i - 1}."}) + "\n")
    return path


def build(tmp_path: Path, auditor: ChatAuditor, *, seed: int = 0, n: int = 48, echo: int = 0,
          **settings: Any) -> DatasetBuild:
    general = general_file(tmp_path / "g.jsonl", 40, echo)
    cfg = BuildDatasetConfig(general_data=[str(general)], agent_to_general=4.0, **settings)
    samples, rejects = load_general_data(cfg.general_data)
    inputs = DatasetInputs(offer_rows(n), "trajectories@test", samples, rejects, [general.name])
    return build_sft_dataset(inputs, cfg, seed=seed, auditor=auditor)


def test_build_reaches_the_mix_and_removes_the_position_cue(tmp_path, auditor) -> None:
    built = build(tmp_path, auditor, val_fraction=0.0, test_fraction=0.0)
    derived = built.stats["derivations"]
    before, after = derived["train_before"], derived["train_after"]
    assert before["calling_none_share"] < 0.3 <= after["calling_none_share"]
    # One shuffled order (the default) lowers the cue; on this fixture two bring it under half
    # (the outcome's data: 48.5% with one).
    assert before["first_called_first_offered_share"] > 0.6
    assert after["first_called_first_offered_share"] < before["first_called_first_offered_share"]
    two = build(tmp_path, auditor, val_fraction=0.0, test_fraction=0.0, augment={"orders": 2})
    assert two.stats["derivations"]["train_after"]["first_called_first_offered_share"] <= 0.5
    assert after == decision_shares(built.samples)
    counts = Counter(s.derivation for s in built.samples)
    assert {d: counts[d] for d in derived["kept"]} == derived["kept"]
    assert built.stats["counts"]["derivation"] == dict(sorted(counts.items()))
    assert counts["flip"] and counts["shuffled"] and counts["general_tools"]
    assert not counts["masked"]  # off by default
    steps = {r["step"]: r for r in built.stats["summary"]}
    assert steps["derive flip (train)"]["kept"] == counts["flip"]
    assert list(built.rows()[0]) == list(SFT_FEATURES)
    for s in built.samples:  # every derived row's source is a verified train row or general row
        assert (s.derivation == "none") == (s.derived_from is None)


def test_masked_rows_go_through_the_build_when_on(tmp_path, auditor) -> None:
    built = build(tmp_path, auditor, augment={"mask_names": True})
    masked = [s for s in built.samples if s.derivation == "masked"]
    assert masked and built.stats["derivations"]["kept"]["masked"] == len(masked)


def test_the_same_seed_gives_the_same_rows(tmp_path, auditor) -> None:
    first = build(tmp_path, auditor, seed=5).rows()
    assert build(tmp_path, auditor, seed=5).rows() == first
    assert build(tmp_path, auditor, seed=6).rows() != first


def test_derived_rows_come_from_train_rows_only_and_the_leak_check_sees_them(
        tmp_path, auditor) -> None:
    built = build(tmp_path, auditor, n=64, val_fraction=0.2, test_fraction=0.2)
    by_id = {s.id: s for s in built.samples}
    derived = [s for s in built.samples if s.derivation != "none"]
    assert derived and {s.split for s in built.samples} == {"train", "val", "test"}
    for s in derived:
        assert s.split == "train"
        if s.source == "agent":
            source = by_id[s.derived_from]
            assert source.split == "train" and source.derivation == "none"
            assert (s.query_id, s.set_id) == (source.query_id, source.set_id)
    # A derived row carries its scenario's id: were that scenario evaluated, the outcome's leak
    # check would name it (here a flip alone, its request text hidden from the check).
    store = ArtifactStore(tmp_path / "store")
    flip = next(s for s in derived if s.derivation == "flip")
    scenarios = str(store.publish("scenarios", [
        {"id": flip.query_id, "split": "heldout", "request": "unrelated request text"}]).ref)
    only = str(store.publish("sft_dataset", [flip.sft_row()], features=SFT_FEATURES).ref)
    assert leaks(store, [only], scenarios) == [f"{only}: id {flip.query_id}"]


def test_a_derived_row_the_verifier_fails_is_a_reject_and_its_source_stays(
        tmp_path, auditor) -> None:
    built = build(tmp_path, auditor, echo=40, val_fraction=0.0, test_fraction=0.0,
                  augment={"general_tools": 1.0})
    failed = [r for r in built.rejects if r.reason == "derived_unverified"]
    assert failed and all("only restates the request" in r.detail for r in failed)
    ids = {s.id for s in built.samples}
    for reject in failed:
        assert reject.item_id.endswith("~general_tools")
        assert reject.item_id.removesuffix("~general_tools") in ids  # the general row stays
    assert built.stats["rejects"]["derived_unverified"] == len(failed)
    derived = built.stats["derivations"]
    assert derived["made"]["general_tools"] - derived["kept"]["general_tools"] == len(failed)


def test_steps_form_makes_no_derived_rows_and_says_why(tmp_path, auditor) -> None:
    general = general_file(tmp_path / "g.jsonl", 20)
    cfg = BuildDatasetConfig(general_data=[str(general)])
    samples, rejects = load_general_data(cfg.general_data)
    built = build_sft_dataset(DatasetInputs(offer_rows(24), "t@x", samples, rejects), cfg,
                              seed=0, auditor=auditor, form="steps")
    assert {s.derivation for s in built.samples} == {"none"}
    assert "steps form" in built.stats["derivations"]["note"]
    assert "steps form" in render_card(built.stats)


def test_card_and_png_count_rows_by_kind_derivation_and_language(tmp_path, auditor) -> None:
    built = build(tmp_path, auditor)
    card = render_card(built.stats)
    section = card.split("## Derivations")[1].split("\n## ")[0]
    for derivation, kept in built.stats["derivations"]["kept"].items():
        made = built.stats["derivations"]["made"][derivation]
        assert f"| {derivation} | {made} | {kept} |" in section
    counts = built.stats["counts"]
    assert counts["kind"]["irrelevant"] == sum(s.kind == "irrelevant" for s in built.samples)
    assert f"| flip | {counts['derivation']['flip']} |" in card
    assert "calling rows the first tool called is the first offered" in section
    png = plot_rows(built.stats, tmp_path / "rows.png", title="test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_show_prints_a_flip_beside_its_source(tmp_path, auditor) -> None:
    built = build(tmp_path, auditor, val_fraction=0.0, test_fraction=0.0)
    store = ArtifactStore(tmp_path / "store")
    ref = store.publish("sft_dataset", built.rows(), features=SFT_FEATURES).ref
    shown = flip_beside_source(store.read(ref))
    assert shown is not None
    lines = shown.splitlines()
    left, right = lines[0].split(" | ")
    assert left.startswith("none ") and right.startswith("flip ")
    assert right.split()[1] == left.split()[1] + "~flip"
    assert any("-> " in line.split(" | ")[0] for line in lines)  # the source's call
    assert not any("-> " in line.split(" | ")[1] for line in lines if " | " in line)
    assert flip_beside_source(pd.DataFrame({"id": ["a"]})) is None


def test_the_verifier_settings_decide_the_dataset_version() -> None:
    plain = RunConfig.model_validate({})
    judged = RunConfig.model_validate({"verifier": {"allow_recovered_errors": True}})
    assert dataset_params(plain)["verifier"] == plain.verifier.model_dump(mode="json")
    assert dataset_params(plain) != dataset_params(judged)


def test_masked_arguments_keep_their_form() -> None:
    keys = {"city": "arg_1"}
    assert _renamed_arguments({"city": "Oslo", "n": 1}, keys) == {"arg_1": "Oslo", "n": 1}
    assert _renamed_arguments('{"city": "北京"}', keys) == '{"arg_1": "北京"}'
    for kept in ('["city"]', '"city"', "not json", None, 3):
        assert _renamed_arguments(kept, keys) == kept
