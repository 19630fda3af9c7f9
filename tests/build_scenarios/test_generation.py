"""Scenarios generated from recipes: every shipped recipe executes in every phrasing family, the
same seed gives the same scenarios, splits hold apart by world seed and phrasing family, bad
recipes are rejected with the recipe and the reason, and an environment without sampler or
recipes is unchanged."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentune.config.build_scenarios import BuildScenariosConfig
from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_scenarios.generation import (
    RECIPE_FAULTS,
    GenerationPlan,
    GenerationResult,
    ScenarioMaker,
    generate_scenarios,
    split_families,
)
from agentune.tasks.build_scenarios.stage import build_scenario_set, execute_all
from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import load_scenarios
from agentune.tasks.verifier.answers import fact_found

DEMO = PROJECT_ROOT / "data" / "demo"


@pytest.fixture
async def demo() -> AsyncIterator[Episode]:
    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)
    async with executor_for(catalog, ToolsConfig()) as executor:
        yield Episode(catalog, executor, stage="build_scenarios")


async def test_every_shipped_recipe_executes_in_every_phrasing_family(demo: Episode) -> None:
    maker = ScenarioMaker(demo.catalog, demo, GenerationPlan(0, 0, 0), GenerationResult())
    missing = []
    recipes = [(spec, r) for spec in demo.catalog.environments.values() for r in spec.recipes]
    assert len(recipes) >= 36 and {spec.name for spec, _ in recipes} == {
        "travel", "shop", "calendar", "helpdesk"}
    for spec, recipe in recipes:
        for lang in recipe.languages():
            for family in recipe.families(lang):
                made = None
                for index in range(30):  # a world where the recipe binds
                    made = await maker.attempt(spec, recipe, split="train", index=index,
                                               lang=lang, family=family)
                    if made is not None:
                        break
                if made is None:
                    missing.append(f"{recipe.id}/{lang}/{family}")
                else:
                    assert made.scenario.blueprint["phrasing"] == family
                    assert made.scenario.kind == recipe.kind and made.scenario.lang == lang
    faults = [r for r in maker.result.rejects if r.reason in RECIPE_FAULTS]
    assert not faults, faults[:3]
    assert not missing


def scenario_keys(result: GenerationResult) -> list[str]:
    return [json.dumps([g.split, g.scenario.model_dump(mode="json")], sort_keys=True,
                       ensure_ascii=False) for g in result.made]


async def test_the_same_seed_gives_the_same_scenarios(demo: Episode) -> None:
    plan = GenerationPlan(60, 24, 12, seed=3)
    first = await generate_scenarios(demo.catalog, demo, plan)
    again = await generate_scenarios(demo.catalog, demo, plan)
    assert len(first.made) == 96 and scenario_keys(first) == scenario_keys(again)
    other = await generate_scenarios(demo.catalog, demo, GenerationPlan(60, 24, 12, seed=4))
    assert not set(scenario_keys(first)) & set(scenario_keys(other))


async def test_splits_hold_apart_by_world_and_phrasing_with_every_kind_and_language(
        demo: Episode) -> None:
    result = await generate_scenarios(demo.catalog, demo, GenerationPlan(360, 90, 24, seed=0))
    assert not result.shortfalls()
    by_split = {s: [g.scenario for g in result.made if g.split == s]
                for s in ("train", "heldout", "reserved")}
    assert [len(v) for v in by_split.values()] == [360, 90, 24]
    assert {s.environment for s in by_split["reserved"]} == {"helpdesk"}
    for environment in ("travel", "shop", "calendar"):
        worlds = {split: {s.blueprint["world_seed"] for s in by_split[split]
                          if s.environment == environment} for split in ("train", "heldout")}
        assert worlds["train"] and worlds["heldout"] and not worlds["train"] & worlds["heldout"]
    phrasing = {split: {(s.blueprint["recipe"], s.lang, s.blueprint["phrasing"])
                        for s in by_split[split]} for split in ("train", "heldout")}
    assert not phrasing["train"] & phrasing["heldout"]
    assert not {s.request for s in by_split["train"]} & {s.request for s in by_split["heldout"]}
    train = by_split["train"]
    kinds, langs = Counter(s.kind for s in train), Counter(s.lang for s in train)
    assert len(kinds) == 6 and min(kinds.values()) >= 0.08 * len(train)
    assert min(langs["zh"], langs["en"]) >= 0.4 * len(train)
    keys = [(s.request, json.dumps(s.initial_state, sort_keys=True)) for g in
            result.made for s in [g.scenario]]
    assert len(keys) == len(set(keys))
    for g in result.made:  # facts grounded in what the calls returned
        known = json.dumps(g.run.results, ensure_ascii=False) + g.scenario.request + (
            g.scenario.hidden or "")
        assert all(fact_found(f, known) for f in g.scenario.facts)


async def test_a_dev_split_is_to_train_what_heldout_is_and_shares_nothing_with_heldout(
        demo: Episode) -> None:
    without = await generate_scenarios(demo.catalog, demo, GenerationPlan(120, 30, 0, seed=1))
    result = await generate_scenarios(demo.catalog, demo, GenerationPlan(120, 30, 0, dev=30,
                                                                         seed=1))
    assert not result.shortfalls()
    assert not [k for k in without.asked if k.endswith("/dev")]  # none asked, none reported
    by_split = {s: [g.scenario for g in result.made if g.split == s]
                for s in ("train", "heldout", "dev")}
    assert [len(v) for v in by_split.values()] == [120, 30, 30]
    assert {s.environment for s in by_split["dev"]} == {"travel", "shop", "calendar"}
    worlds = {split: {(s.environment, s.blueprint["world_seed"]) for s in scenarios}
              for split, scenarios in by_split.items()}
    phrasing = {split: {(s.blueprint["recipe"], s.lang, s.blueprint["phrasing"])
                        for s in scenarios} for split, scenarios in by_split.items()}
    requests = {split: {s.request for s in scenarios} for split, scenarios in by_split.items()}
    for a, b in (("dev", "train"), ("dev", "heldout"), ("train", "heldout")):
        assert not worlds[a] & worlds[b] and not phrasing[a] & phrasing[b], (a, b)
        assert not requests[a] & requests[b], (a, b)
    # Held-out is the same with or without dev; dev's families are train's when no dev is asked,
    # and a recipe keeps at least one for train.
    assert [g.scenario for g in without.made if g.split == "heldout"] == by_split["heldout"]
    recipes = {r.id: r for spec in demo.catalog.environments.values() for r in spec.recipes}
    for recipe, lang, family in phrasing["dev"]:
        train_alone = split_families(recipes[recipe], lang, "train", seed=1, count=1)
        train = split_families(recipes[recipe], lang, "train", seed=1, count=1, dev_count=1)
        assert family in train_alone and family not in train and train


def test_train_keeps_a_family_and_dev_gets_none_it_cannot_spare() -> None:
    class Phrased:  # what split_families reads of a recipe
        def __init__(self, *families: str) -> None:
            self.id, self.names = "r", sorted(families)

        def families(self, lang: str) -> list[str]:
            return self.names

    def splits(recipe: Phrased, dev: int) -> dict[str, list[str]]:
        return {split: split_families(recipe, "en", split, seed=0, count=1, dev_count=dev)
                for split in ("train", "heldout", "dev", "reserved")}

    four = splits(Phrased("a", "b", "c", "d"), 1)
    assert [len(four[s]) for s in ("train", "heldout", "dev")] == [2, 1, 1]
    assert sorted(four["train"] + four["heldout"] + four["dev"]) == four["reserved"]
    assert splits(Phrased("a", "b", "c", "d"), 0)["train"] == sorted(four["train"] + four["dev"])
    two = splits(Phrased("a", "b"), 1)
    assert [len(two[s]) for s in ("train", "heldout", "dev")] == [1, 1, 0]
    one = splits(Phrased("a"), 1)
    assert (one["train"], one["heldout"], one["dev"]) == (["a"], [], [])


LEDGER = '''
    import random
    from typing import Any
    from agentune.tasks.environments.base import Environment, ToolError, writes

    class Ledger(Environment):
        name = "ledger"
        description = {"en": "A ledger."}

        def reset(self, **state: Any) -> None:
            self.entries = list(state.get("entries", [{"who": "Ann", "amount": 5}]))

        def state(self) -> dict:
            return {"entries": list(self.entries)}
        {sampler}
        def balance(self, who: str) -> dict:
            """A person's balance.

            Args:
                who: The person.
            """
            return {{"who": who, "balance": sum(e["amount"] for e in self.entries
                                                if e["who"] == who)}}

        @writes
        def add(self, who: str, amount: int) -> dict:
            """Add an amount to a person's balance.

            Args:
                who: The person.
                amount: The amount, above 0.
            """
            if amount <= 0:
                raise ToolError("amount must be above 0")
            self.entries.append({{"who": who, "amount": amount}})
            return {{"who": who, "added": amount}}
'''
SAMPLER = '''
        @classmethod
        def sample_state(cls, rng: random.Random) -> dict:
            return {"entries": [{"who": rng.choice(["Ann", "Bo", "Cy"]),
                                 "amount": rng.randint(1, 99)} for _ in range(3)]}
'''
RECIPES = '''
    from agentune.tasks.environments.blueprints import Recipe, Unbound, call

    def someone(world, rng):
        entry = rng.choice(world["entries"])
        return {"who": entry["who"], "amount": rng.randint(1, 9)}

    def nobody(world, rng):
        raise Unbound("no debtor in this ledger")

    def negative(world, rng):
        return {"who": "Ann", "amount": -3}

    TWO = {"en": {"a": "Add {amount} to {who}.", "b": "{who} gets {amount} more."}}
    RECIPES = [
        Recipe(id="ledger.add", kind="single_call", bind=someone, phrasings=TWO,
               calls=[[call("add", who="{who}", amount="{amount}")]], facts=["{amount}"]),
        Recipe(id="ledger.debtor", kind="single_call", bind=nobody, phrasings=TWO,
               calls=[[call("balance", who="{who}")]]),
        Recipe(id="ledger.negative", kind="multi_step", bind=negative, phrasings=TWO,
               calls=[[call("balance", who="{who}")], [call("add", who="{who}",
                                                              amount="{amount}")]]),
        Recipe(id="ledger.made_up_fact", kind="parallel_calls", bind=someone, phrasings=TWO,
               calls=[[call("balance", who="{who}"), call("balance", who="Zed")]],
               facts=["{who} owes a unicorn"]),
    ]
'''


def ledger_catalog(folder: Path, *, sampler: bool, recipes: str | None) -> EnvironmentCatalog:
    folder.mkdir(parents=True, exist_ok=True)
    source = textwrap.dedent(LEDGER).replace("{sampler}", SAMPLER if sampler else "")
    (folder / "ledger.py").write_text(source.replace("{{", "{").replace("}}", "}"), "utf-8")
    entry = "  - class: ledger.py:Ledger\n"
    if recipes is not None:
        (folder / "ledger_recipes.py").write_text(textwrap.dedent(recipes), "utf-8")
        entry += "    recipes: ledger_recipes.py:RECIPES\n"
    (folder / "tools.yaml").write_text("environments:\n" + entry, "utf-8")
    return load_environments(folder / "tools.yaml")


async def test_bad_recipes_are_rejected_with_the_recipe_and_the_reason(tmp_path: Path) -> None:
    catalog = ledger_catalog(tmp_path, sampler=True, recipes=RECIPES)
    async with executor_for(catalog, ToolsConfig()) as executor:
        result = await generate_scenarios(catalog, Episode(catalog, executor),
                                          GenerationPlan(12, 0, 0, max_worlds=20))
    reasons = {(r.reason, r.detail.split(":")[0]) for r in result.rejects
               if r.reason != "duplicate"}  # a small world repeats itself
    assert reasons == {("unbound_slots", "recipe ledger.debtor"),
                       ("ground_truth_failed", "recipe ledger.negative"),
                       ("ungrounded_fact", "recipe ledger.made_up_fact")}
    failed = next(r for r in result.rejects if r.reason == "ground_truth_failed")
    assert failed.item_id.startswith("gen-ledger.negative-train") and "above 0" in failed.detail
    assert {g.scenario.blueprint["recipe"] for g in result.made} == {"ledger.add"}
    # Only one kind binds and stands: fewer than asked, and the run says so.
    assert result.shortfalls() == [f"ledger/train: made {len(result.made)} of 12 asked"]


async def test_a_recipe_calling_a_tool_its_environment_lacks_names_file_recipe_and_field(
        tmp_path: Path) -> None:
    bad = RECIPES.replace('call("balance", who="Zed")', 'call("refund", who="Zed")')
    catalog = ledger_catalog(tmp_path, sampler=True, recipes=bad)
    async with executor_for(catalog, ToolsConfig()) as executor:
        with pytest.raises(InputError, match=r"ledger_recipes.py.*recipes\[3\].calls.*'refund'"):
            await generate_scenarios(catalog, Episode(catalog, executor), GenerationPlan(4, 0, 0))


async def test_without_a_sampler_recipes_bind_in_the_default_world(tmp_path: Path) -> None:
    catalog = ledger_catalog(tmp_path, sampler=False, recipes=RECIPES)
    assert catalog.environments["ledger"].world_sampler() is None
    async with executor_for(catalog, ToolsConfig()) as executor:
        result = await generate_scenarios(catalog, Episode(catalog, executor),
                                          GenerationPlan(4, 2, 0, max_worlds=10))
    assert result.made and all(g.scenario.initial_state == {} for g in result.made)
    assert {g.scenario.blueprint["world_seed"] for g in result.made} == {None}
    assert {g.split for g in result.made} == {"train", "heldout"}


async def test_an_environment_without_sampler_or_recipes_works_as_before(tmp_path: Path) -> None:
    catalog = ledger_catalog(tmp_path, sampler=False, recipes=None)
    spec = catalog.environments["ledger"]
    assert spec.recipes == () and spec.world_sampler() is None
    seed_file = tmp_path / "scenarios.yaml"
    seed_file.write_text(textwrap.dedent("""
        scenarios:
        - {id: add-ann, environment: ledger, lang: en, kind: single_call, request: "Add 3 to Ann.",
           ground_truth: [[{name: add, arguments: {who: Ann, amount: 3}}]], facts: ["3"]}
        - {id: ann, environment: ledger, lang: en, kind: single_call, request: "What is Ann's balance?",
           ground_truth: [[{name: balance, arguments: {who: Ann}}]], facts: ["5"]}
    """), "utf-8")
    async with executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor)
        for generate in (False, True):
            cfg = BuildScenariosConfig(seed_file=str(seed_file), generate={"enabled": generate})
            built = await build_scenario_set(cfg, catalog, [], episode=episode, gateway=None,
                                             seed=0)  # type: ignore[arg-type]
            assert {r["source"] for r in built.rows} == {"seed"}
            assert not any(r.reason.startswith("generated") for r in built.rejects)
        before = await execute_all(load_scenarios(seed_file, catalog), episode,
                                   BuildScenariosConfig(), seed=0)
        plain = await build_scenario_set(BuildScenariosConfig(seed_file=str(seed_file)), catalog,
                                         [], episode=episode, gateway=None,  # type: ignore[arg-type]
                                         seed=0)
    assert plain.rows == before.rows and all(r["split"] != "natural" for r in plain.rows)
    assert all(r["blueprint"] is None for r in plain.rows)
