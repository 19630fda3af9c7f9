"""Scenarios generated from the environments' recipes over sampled worlds, split by construction.

For each environment with recipes and each split, worlds are drawn one after another (the
environment's ``sample_state`` with a world seed of that split; its default state without a
sampler) and each world gives, per scenario kind and language, one scenario of a recipe of that
kind whose slots bind there, phrased in a family of that split, until the split's quota is met:

- ``train``: train world seeds, the recipes' train phrasing families;
- ``heldout``: world seeds never used in train (another seed stream) and the phrasing families
  held out of train (``heldout_families`` per recipe and language, a seeded draw), so a held-out
  scenario is new in both its world and its sentence structure; one whose request train already
  has is rejected;
- ``dev`` (only when asked for): what ``heldout`` is to train, for choosing a recipe without
  looking at ``heldout``: worlds of its own seed stream and phrasing families that neither train
  nor held-out uses (``dev_families``, the next ones of the same seeded draw, taken from train's
  share: a recipe keeps at least one family for train and has no dev family when it has none to
  spare); one whose request train already has is rejected;
- ``reserved``: a reserved environment's scenarios, any family.

Every draft is checked as a written scenario is (schema, kind), its ground truth runs in a fresh
session (:func:`execute_ground_truth`), and its facts, read from the results, must be found in
them (or in the request or hidden answer): anything else is a reject naming the recipe and the
reason. No two scenarios share a request and initial state, and none repeats the request of a
written scenario (those are evaluated as the ``natural`` split).
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.blueprints import (
    LANGS,
    Draft,
    Recipe,
    Unbound,
    recipe_problem,
    render,
)
from agentune.tasks.environments.catalog import EnvironmentCatalog, EnvironmentSpec
from agentune.tasks.environments.replay import Episode, execute_ground_truth
from agentune.tasks.environments.scenarios import (
    GroundTruthRun,
    Scenario,
    check_scenario,
)
from agentune.tasks.verifier.answers import fact_found, normalise


@dataclass(frozen=True)
class GenerationPlan:
    """How many scenarios each split asks for, over every environment with recipes."""

    train: int
    heldout: int
    reserved: int
    heldout_families: int = 1
    """Phrasing families held out of train per recipe and language."""
    dev: int = 0
    """Dev scenarios asked (0: no dev split, and train keeps every family held-out does not)."""
    dev_families: int = 1
    """Phrasing families per recipe and language that only dev uses (when ``dev`` is asked)."""
    max_worlds: int = 500
    """Most worlds drawn per environment and split before giving up on the quota."""
    seed: int = 0
    written: frozenset[str] = frozenset()
    """The written scenarios' requests (normalised): a generated one may not repeat one, so the
    ``natural`` split stays unseen."""


@dataclass(frozen=True)
class Generated:
    scenario: Scenario
    split: str
    run: GroundTruthRun
    draft: Draft


@dataclass(frozen=True)
class GenerationReject:
    item_id: str
    reason: str
    detail: str


@dataclass
class GenerationResult:
    made: list[Generated] = field(default_factory=list)
    rejects: list[GenerationReject] = field(default_factory=list)
    asked: dict[str, int] = field(default_factory=dict)
    """``environment/split`` -> quota."""

    def shortfalls(self) -> list[str]:
        """One line per environment and split that made fewer scenarios than asked."""
        made: dict[str, int] = {}
        for g in self.made:
            key = f"{g.scenario.environment}/{g.split}"
            made[key] = made.get(key, 0) + 1
        return [f"{key}: made {made.get(key, 0)} of {n} asked" for key, n in self.asked.items()
                if made.get(key, 0) < n]


def split_families(recipe: Recipe, lang: str, split: str, *, seed: int, count: int,
                   dev_count: int = 0) -> list[str]:
    """The recipe's phrasing families in ``lang`` that ``split`` phrases in. One seeded ranking:
    held-out takes the first ``count``, dev the next ``dev_count``, train the rest; each of the
    first two takes fewer where train would be left none. Reserved uses them all."""
    families = recipe.families(lang)
    ranked = sorted(families, key=lambda f: hashlib.sha256(
        f"{seed}:family:{recipe.id}:{lang}:{f}".encode()).hexdigest())
    held = ranked[:min(count, len(families) - 1)]
    dev = ranked[len(held):len(held) + min(dev_count, len(families) - len(held) - 1)]
    by_split = {"heldout": held, "dev": dev,
                "train": [f for f in ranked if f not in held and f not in dev]}
    return sorted(by_split.get(split, families))


def world_seed(seed: int, environment: str, split: str, index: int) -> int:
    """The seed of a split's ``index``-th world: each split draws from its own stream."""
    digest = hashlib.sha256(f"{seed}:world:{environment}:{split}:{index}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def default_world(spec: EnvironmentSpec) -> dict[str, Any]:
    """The environment's state as a fresh session starts it (what recipes bind from when the
    environment has no sampler)."""
    if spec.python is not None:
        env = spec.python.new()
        env.reset()
        return env.state()
    if spec.simulated is not None:
        return copy.deepcopy(dict(spec.simulated.state))
    return {}


def quotas(total: int, environments: Sequence[str]) -> dict[str, int]:
    """``total`` spread evenly over the environments (the first ones take the remainder)."""
    if not environments:
        return {}
    share, extra = divmod(total, len(environments))
    return {name: share + (i < extra) for i, name in enumerate(environments)}


class ScenarioMaker:
    """One run's state: what was made and rejected, the (request, state) keys seen, the train
    requests (a held-out scenario may not repeat one)."""

    def __init__(self, catalog: EnvironmentCatalog, episode: Episode, plan: GenerationPlan,
                 result: GenerationResult) -> None:
        self.catalog, self.episode, self.plan, self.result = catalog, episode, plan, result
        self.keys: set[str] = set()
        self.train_requests: set[str] = set()

    def reject(self, item_id: str, reason: str, recipe: Recipe, detail: str) -> None:
        self.result.rejects.append(GenerationReject(item_id, reason,
                                                    f"recipe {recipe.id}: {detail}"[:500]))

    def families(self, recipe: Recipe, lang: str, split: str) -> list[str]:
        return split_families(recipe, lang, split, seed=self.plan.seed,
                              count=self.plan.heldout_families,
                              dev_count=self.plan.dev_families if self.plan.dev else 0)

    def world(self, spec: EnvironmentSpec, split: str, index: int
              ) -> tuple[int | None, dict[str, Any]]:
        """The split's ``index``-th world and its seed (None: no sampler, the default world)."""
        sampler = spec.world_sampler()
        seed = world_seed(self.plan.seed, spec.name, split, index)
        if sampler is None:
            return None, default_world(spec)
        return seed, sampler(random.Random(seed))

    async def environment(self, spec: EnvironmentSpec, split: str, quota: int) -> None:
        """World after world until ``quota`` scenarios are made (or ``max_worlds`` drawn): in
        each, one scenario per kind and language, the kinds' order rotating with the world."""
        by_kind: dict[str, list[Recipe]] = {}
        for recipe in spec.recipes:
            by_kind.setdefault(recipe.kind, []).append(recipe)
        kinds = sorted(by_kind)
        made = 0
        for index in range(self.plan.max_worlds if kinds else 0):
            if made >= quota:
                return
            seed, world = self.world(spec, split, index)
            rng = random.Random(f"{world_seed(self.plan.seed, spec.name, split, index)}:draw")
            for kind in kinds[index % len(kinds):] + kinds[:index % len(kinds)]:
                for lang in LANGS:
                    if made < quota and await self.one(spec, split, index, seed, world,
                                                       by_kind[kind], lang, rng):
                        made += 1

    async def attempt(self, spec: EnvironmentSpec, recipe: Recipe, *, split: str, index: int,
                      lang: str, family: str | None = None) -> Generated | None:
        """The recipe in the split's ``index``-th world, in ``lang`` and ``family`` (a seeded
        one of the split's when None); None when it made nothing (the reject says why)."""
        seed, world = self.world(spec, split, index)
        rng = random.Random(f"{world_seed(self.plan.seed, spec.name, split, index)}:draw:"
                            f"{recipe.id}:{lang}")
        families = [family] if family else self.families(recipe, lang, split)
        return await self.make(spec, split, index, seed, world, recipe, lang, families, rng)

    async def make(self, spec: EnvironmentSpec, split: str, index: int, seed: int | None,
                   world: dict[str, Any], recipe: Recipe, lang: str, families: list[str],
                   rng: random.Random) -> Generated | None:
        item = f"gen-{recipe.id}-{split}{index:04d}-{lang}"
        try:
            slots = dict(recipe.bind(copy.deepcopy(world), rng))
            draft = render(recipe, slots, lang, rng.choice(families), rng)
        except Unbound as exc:
            self.reject(item, "unbound_slots", recipe, str(exc) or "nothing to bind")
            return None
        except (KeyError, IndexError, ValueError) as exc:
            self.reject(item, "bad_template", recipe, f"{type(exc).__name__}: {exc}")
            return None
        return await self.finish(spec, split, item, seed, index, world, draft)

    async def one(self, spec: EnvironmentSpec, split: str, index: int, seed: int | None,
                  world: dict[str, Any], recipes: list[Recipe], lang: str,
                  rng: random.Random) -> bool:
        """A scenario of one of ``recipes`` (tried in a seeded order) in this world, or none."""
        candidates = [r for r in recipes if lang in r.phrasings]
        rng.shuffle(candidates)
        for recipe in candidates:
            families = self.families(recipe, lang, split)
            if not families:
                continue
            made = await self.make(spec, split, index, seed, world, recipe, lang, families, rng)
            if made is not None:
                self.result.made.append(made)
                return True
        return False

    async def finish(self, spec: EnvironmentSpec, split: str, item: str, seed: int | None,
                     index: int, world: dict[str, Any], draft: Draft) -> Generated | None:
        recipe = draft.recipe
        try:
            scenario = Scenario(
                id=item, environment=spec.name, lang=draft.lang,  # type: ignore[arg-type]
                kind=recipe.kind, request=draft.request,
                initial_state={spec.name: world} if seed is not None else {},
                ground_truth=draft.ground_truth, hidden=draft.hidden,
                family=f"{recipe.id}:{draft.family}", source="generated",
                blueprint={"recipe": recipe.id, "phrasing": draft.family, "world_seed": seed,
                           "world": index, "slots": draft.slot_record()})
            check_scenario(scenario, self.catalog, file="recipes", where=item)
        except (ValueError, InputError) as exc:
            self.reject(item, "invalid_scenario", recipe, str(exc).splitlines()[0])
            return None
        request = normalise(scenario.request)
        key = hashlib.sha256(json.dumps([request, scenario.initial_state], sort_keys=True,
                                        ensure_ascii=False).encode()).hexdigest()
        if key in self.keys:
            self.reject(item, "duplicate", recipe, "another scenario has this request and "
                        "initial state")
            return None
        if request in self.plan.written:
            self.reject(item, "request_is_written", recipe, f"a written scenario asks "
                        f"{scenario.request!r}")
            return None
        if split in ("heldout", "dev") and request in self.train_requests:
            self.reject(item, "request_in_train", recipe, f"train has {scenario.request!r}")
            return None
        run = await execute_ground_truth(scenario, self.episode)
        if run.problem is not None:
            self.reject(item, run.problem[0], recipe, run.problem[1])
            return None
        try:
            facts = draft.facts(run.results)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            self.reject(item, "unreadable_fact", recipe, f"{type(exc).__name__}: {exc}")
            return None
        known = json.dumps(run.results, ensure_ascii=False) + scenario.request + (
            scenario.hidden or "")
        ungrounded = [f for f in facts if not fact_found(f, known)]
        if ungrounded:
            self.reject(item, "ungrounded_fact", recipe, f"no result states {ungrounded}")
            return None
        self.keys.add(key)
        if split == "train":
            self.train_requests.add(request)
        return Generated(scenario.model_copy(update={"facts": facts}), split, run, draft)


def check_recipe_list(catalog: EnvironmentCatalog) -> None:
    """Every environment's recipes can make scenarios (:func:`recipe_problem`), have unique ids
    and call tools the environment offers; else an error naming the recipes file, the recipe
    and the field."""
    seen: dict[str, str] = {}
    for spec in catalog.environments.values():
        offered = {t.name for t in catalog.offered_tools(spec.name)}
        for i, recipe in enumerate(spec.recipes):
            problem = recipe_problem(recipe)
            if problem is None and recipe.id in seen:
                problem = ("id", f"{recipe.id!r} is also a recipe of {seen[recipe.id]!r}")
            unknown = [c.name for step in getattr(recipe, "calls", ()) for c in step
                       if c.name not in offered]
            if problem is None and unknown:
                problem = ("calls", f"{unknown[0]!r} is not a tool of environment {spec.name!r}")
            if problem is not None:
                name = f"recipes[{i}]" + (f".{problem[0]}" if problem[0] else "")
                raise InputError(spec.recipes_file or catalog.source, f"environment {spec.name}",
                                 name, problem[1])
            seen[recipe.id] = spec.name


async def generate_scenarios(catalog: EnvironmentCatalog, episode: Episode,
                             plan: GenerationPlan) -> GenerationResult:
    """Scenarios of every environment with recipes: train first (held-out and dev requests are
    checked against it), then held-out, dev, and the reserved environments'."""
    check_recipe_list(catalog)
    with_recipes = [name for name, spec in catalog.environments.items() if spec.recipes]
    training = [n for n in with_recipes if not catalog.environments[n].reserved]
    reserved = [n for n in with_recipes if catalog.environments[n].reserved]
    result = GenerationResult()
    generator = ScenarioMaker(catalog, episode, plan, result)
    dev = [("dev", training, plan.dev)] if plan.dev else []  # none asked: none reported
    for split, names, total in (("train", training, plan.train),
                                ("heldout", training, plan.heldout), *dev,
                                ("reserved", reserved, plan.reserved)):
        for name, quota in quotas(total, names).items():
            result.asked[f"{name}/{split}"] = quota
            await generator.environment(catalog.environments[name], split, quota)
    return result


RECIPE_FAULTS = frozenset({"bad_template", "invalid_scenario", "ground_truth_failed",
                           "no_state_change", "unreadable_fact", "ungrounded_fact"})
"""Reject reasons that mean a recipe is wrong (not that a world lacked what it needs)."""


async def check_recipes(catalog: EnvironmentCatalog, episode: Episode, *, per_environment: int,
                        seed: int = 0) -> tuple[list[str], bool]:
    """A sample of every environment's generated scenarios run (``agentune env check``): report
    lines, and whether no recipe fault was found."""
    with_recipes = [n for n, s in catalog.environments.items() if s.recipes]
    if not with_recipes or per_environment <= 0:
        return [], True
    training = sum(not catalog.environments[n].reserved for n in with_recipes)
    plan = GenerationPlan(train=per_environment * training, heldout=0,
                          reserved=per_environment * (len(with_recipes) - training), seed=seed)
    result = await generate_scenarios(catalog, episode, plan)
    faults = [r for r in result.rejects if r.reason in RECIPE_FAULTS]
    recipes = {g.scenario.blueprint["recipe"] for g in result.made if g.scenario.blueprint}
    total = sum(len(catalog.environments[n].recipes) for n in with_recipes)
    lines = [f"generated: {len(result.made)} scenarios from {len(recipes)} of {total} recipes "
             f"(asked {sum(result.asked.values())}), {len(faults)} failed"]
    lines += [f"  FAILED {r.item_id}: {r.reason}: {r.detail}" for r in faults]
    lines += [f"  short {line}" for line in result.shortfalls()]
    return lines, not faults
