"""Rows derived from the train split's rows that teach when to call a tool and when not to.

Each derivation takes one row (a verified trajectory, or a general row) and gives new ones, seeded
by the run's seed, the derivation and the source's id (the same seed gives the same rows, in any
order of the sources). A derived row keeps its source's query, query set and scenario id (so the
leak checks see where it came from) and names its source in ``derived_from``:

- ``shuffled``: a calling row's offered tools in another seeded order, the messages unchanged
  (calls byte for byte), so the first tool offered is no cue for the first tool called;
- ``flip`` (a relevance flip): a calling row's needed tools (those it calls) replaced in the offer
  by the tools offered most often beside its own (its environments), the list kept at its length
  and shuffled; the conversation cut before the first assistant turn, which becomes a decline in
  the request's language (one of :data:`DECLINES`). It acts out an ``irrelevant`` scenario;
- ``general_tools``: a general row offered tools of one seeded row's offer, its answer unchanged:
  chat with tools offered, none needed (a ``no_tool`` row). It takes its source's place in the mix;
- ``masked``: tool and parameter names replaced by random ones, the same in the offer, the calls
  (names and argument keys), the results (a tool message's ``name``) and any text that names a
  tool, so the model must read the descriptions.

The tools a flip or a general row is offered come from the train rows' own offers
(:class:`ToolPool`, drawn so that a row calling nothing is offered what a calling row is):
build_dataset reads the trajectories, not the tool catalog, and these are the catalog's tools
as the trajectories offered them. ``ask_user`` (an action, not a catalog
tool) is never a needed tool, never masked and never offered as a replacement.

:func:`derive` makes them all; relevance flips fill the share of tool-offering rows that call
nothing up to ``no_call_share`` (:func:`flips_needed`). Each derived row goes through ``keep``
(the verifier and the audit, in the stage), which records why one is dropped.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentune.config.build_dataset import AugmentConfig
from agentune.tasks.agent.formats import tool_entries
from agentune.tasks.build_dataset.samples import AGENT, GENERAL, Sample, canonical_arguments
from agentune.tasks.verifier.rollout import ASK_USER, from_messages

DERIVATIONS = ("shuffled", "flip", "general_tools", "masked")
DECLINES: dict[str, tuple[str, ...]] = {
    "en": (
        "Sorry, none of the tools I have here can do that, so I can't help with this request.",
        "I can't complete this request: the tools available to me don't cover it.",
        "None of the tools offered to me fits this request, so I'm unable to do it here.",
    ),
    "zh": (
        "抱歉，我现有的工具都无法处理这个请求。",
        "很抱歉，提供给我的工具不支持这项请求，我无法为您办理。",
        "现有的工具中没有能完成这个请求的，我暂时帮不上忙。",
    ),
}
"""The decline a relevance flip answers with, chosen per row (seeded) in the request's
language (``zh``, else ``en``)."""


def tool_name(tool: Mapping[str, Any]) -> str:
    """The name of a tool schema, OpenAI's ``{"type": "function", "function": {...}}`` or flat."""
    return tool_entries([tool])[0]["name"]


def called_names(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tools a conversation calls, in order, as the verifier reads it (a question to the
    user, ``ask_user``, is no call)."""
    return [call.name for call in from_messages(messages).calls()]


def calls_tools(sample: Sample) -> bool:
    return bool(called_names(sample.messages))


def first_offered_is_first_called(sample: Sample, called: Sequence[str] | None = None) -> bool:
    """Whether the first tool the row offers (but ``ask_user``) is the first it calls;
    ``called``: :func:`called_names` of its messages, where the caller has them already."""
    offered = [tool_name(t) for t in sample.tools if tool_name(t) != ASK_USER]
    called = called_names(sample.messages) if called is None else called
    return bool(offered and called) and offered[0] == called[0]


def _rng(seed: int, derivation: str, sample_id: str) -> random.Random:
    return random.Random(f"{seed}:{derivation}:{sample_id}")


def _seeded_order(samples: Iterable[Sample], seed: int, derivation: str) -> list[Sample]:
    """``samples`` in a seeded order that does not depend on the order they come in."""
    return sorted(samples, key=lambda s: hashlib.sha256(
        f"{seed}:{derivation}:{s.id}".encode()).hexdigest())


def _derived(source: Sample, derivation: str, suffix: str, **changes: Any) -> Sample:
    """A row made from ``source``. Its template ``steps`` are left empty: they would render the
    source's offer (derivations are made for training in the messages form)."""
    return replace(source, id=f"{source.id}~{suffix}", derivation=derivation,
                   derived_from=source.id, steps=[], n_tokens=0, n_trained=0, extra={},
                   **changes)


@dataclass(frozen=True)
class ToolPool:
    """The tools the train rows offer (one schema a name, the first seen) and every row's offer,
    by name: what a flip's substitutes and a general row's tools are drawn from.

    A row that calls nothing must be offered what calling rows are offered. Drawn from the whole
    pool, the flips' and general rows' offers spanned three or four of the catalog's
    environments where no calling row's spanned more than two (the outcome's data: 41 of 101
    flips, 21 of 29 general rows): a cue for "decline" a model can learn instead of reading the
    request. So a flip's substitutes are the tools offered most often beside its own (its
    environments), and a general row gets tools of one row's offer."""

    tools: dict[str, dict[str, Any]]
    offers: tuple[tuple[str, ...], ...]

    def __bool__(self) -> bool:
        return bool(self.tools)

    def nearest(self, names: set[str], count: int, rng: random.Random) -> list[str]:
        """``count`` tools (fewer when the pool has fewer) not in ``names``: those offered most
        often together with ``names`` (each offer counting the tools of ``names`` it holds),
        seeded among equals, then the rest of the pool."""
        weight: Counter[str] = Counter()
        for offer in self.offers:
            shared = len(names.intersection(offer))
            for name in offer:
                weight[name] += shared
        ranked = sorted((n for n in self.tools if n not in names),
                        key=lambda n: (-weight[n], rng.random()))
        return ranked[:count]


def tool_pool(samples: Iterable[Sample]) -> ToolPool:
    """The pool of the rows ``samples`` (``ask_user`` left out: an action, not a tool)."""
    tools: dict[str, dict[str, Any]] = {}
    offers: list[tuple[str, ...]] = []
    for sample in sorted(samples, key=lambda s: s.id):
        names = []
        for tool in sample.tools:
            name = tool_name(tool)
            if name and name != ASK_USER:
                tools.setdefault(name, tool)
                names.append(name)
        if names:
            offers.append(tuple(sorted(set(names))))
    return ToolPool({name: tools[name] for name in sorted(tools)}, tuple(offers))


# --------------------------------------------------------------------------- the derivations


def shuffled_offers(source: Sample, orders: int, seed: int) -> list[Sample]:
    """Up to ``orders`` copies of ``source``, each offering its tools in an order of its own
    (none repeats the source's); fewer when the offer has fewer other orders."""
    n = len(source.tools)
    wanted = min(orders, math.factorial(n) - 1) if n > 1 else 0
    rng = _rng(seed, "shuffled", source.id)
    seen = {tuple(range(n))}
    out: list[Sample] = []
    while len(out) < wanted:
        order = list(range(n))
        rng.shuffle(order)
        if tuple(order) in seen:
            continue
        seen.add(tuple(order))
        out.append(_derived(source, "shuffled", f"shuffled{len(out) + 1}",
                            tools=[copy.deepcopy(source.tools[i]) for i in order],
                            messages=copy.deepcopy(source.messages)))
    return out


def relevance_flip(source: Sample, pool: ToolPool, seed: int) -> Sample | None:
    """``source`` with its needed tools replaced in the offer and a decline for an answer, or
    None when the pool holds too few other tools to keep the offer's length. The substitutes are
    the tools offered most often beside the source's own (:meth:`ToolPool.nearest`)."""
    needed = set(called_names(source.messages))
    offered = {tool_name(t) for t in source.tools}
    replaced = sum(1 for t in source.tools if tool_name(t) in needed)
    rng = _rng(seed, "flip", source.id)
    chosen = pool.nearest(offered | needed, replaced, rng)
    if not needed or len(chosen) < replaced:
        return None
    substitutes = iter(chosen)
    tools = [copy.deepcopy(pool.tools[next(substitutes)] if tool_name(t) in needed else t)
             for t in source.tools]
    rng.shuffle(tools)
    first_answer = next(i for i, m in enumerate(source.messages) if m.get("role") == "assistant")
    decline = rng.choice(DECLINES["zh" if source.lang == "zh" else "en"])
    messages = copy.deepcopy(source.messages[:first_answer])
    messages.append({"role": "assistant", "content": decline})
    return _derived(source, "flip", "flip", tools=tools, messages=messages, kind="irrelevant")


def with_general_tools(source: Sample, pool: ToolPool, count: int, seed: int) -> Sample:
    """General row ``source`` offered up to ``count`` tools of one seeded row's offer (as a
    calling row is offered them), its answer unchanged."""
    rng = _rng(seed, "general_tools", source.id)
    offer = rng.choice(pool.offers)
    tools = [copy.deepcopy(pool.tools[n]) for n in rng.sample(offer, min(count, len(offer)))]
    return _derived(source, "general_tools", "general_tools", tools=tools, kind="no_tool",
                    messages=copy.deepcopy(source.messages))


def _random_name(rng: random.Random, prefix: str, taken: set[str]) -> str:
    while True:
        name = f"{prefix}{rng.getrandbits(24):06x}"
        if name not in taken:
            taken.add(name)
            return name


def _renamed_arguments(arguments: Any, keys: Mapping[str, str]) -> Any:
    """Call arguments (an object, or OpenAI's JSON string of one) with their keys renamed, in
    the form they came in; anything else as it is."""
    parsed = canonical_arguments(arguments)
    if not isinstance(parsed, Mapping):
        return arguments
    renamed = {keys.get(k, k): v for k, v in parsed.items()}
    return json.dumps(renamed, ensure_ascii=False) if isinstance(arguments, str) else renamed


def _masked_tool(tool: Mapping[str, Any], name: str, keys: Mapping[str, str]) -> dict[str, Any]:
    tool = copy.deepcopy(dict(tool))
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    fn["name"] = name
    parameters = fn.get("parameters")
    if isinstance(parameters, dict):
        if isinstance(parameters.get("properties"), dict):
            parameters["properties"] = {keys.get(k, k): v
                                        for k, v in parameters["properties"].items()}
        if isinstance(parameters.get("required"), list):
            parameters["required"] = [keys.get(k, k) for k in parameters["required"]]
    return tool


def masked_names(source: Sample, seed: int) -> Sample:
    """``source`` with every tool (but ``ask_user``) and its parameters renamed at random,
    consistently in the offer, the calls, the results and the text that names a tool."""
    rng = _rng(seed, "masked", source.id)
    taken: set[str] = set()
    names: dict[str, str] = {}
    keys: dict[str, dict[str, str]] = {}
    for entry in tool_entries(source.tools):
        name = entry["name"]
        if name == ASK_USER:
            continue
        names[name] = _random_name(rng, "fn_", taken)
        properties = entry["parameters"].get("properties")
        keys[name] = {k: _random_name(rng, "arg_", taken) for k in sorted(properties or {})}
    mention = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
                         + r")\b") if names else None
    messages = copy.deepcopy(source.messages)
    for message in messages:
        if mention and isinstance(message.get("content"), str):
            message["content"] = mention.sub(lambda m: names[m.group(1)], message["content"])
        if message.get("role") == "tool" and message.get("name") in names:
            message["name"] = names[message["name"]]
        for call in message.get("tool_calls") or []:
            fn = call["function"]
            name = fn.get("name")
            if name in names:
                fn["arguments"] = _renamed_arguments(fn.get("arguments"), keys[name])
                fn["name"] = names[name]
    tools = [_masked_tool(t, names[tool_name(t)], keys[tool_name(t)])
             if tool_name(t) in names else copy.deepcopy(t) for t in source.tools]
    return _derived(source, "masked", "masked", tools=tools, messages=messages)


# --------------------------------------------------------------------------- the mix


def flips_needed(calling: int, no_call: int, share: float) -> int:
    """Flips that bring ``no_call / (calling + no_call)`` to at least ``share`` (a flip adds a
    row that calls nothing; its source stays)."""
    if share <= 0:
        return 0
    return max(0, math.ceil((share * (calling + no_call) - no_call) / (1 - share) - 1e-9))


def decision_shares(samples: Iterable[Sample]) -> dict[str, Any]:
    """What the rows teach about the decision: of the rows that offer tools, how many call none;
    of the calling rows, how many call the first tool offered first."""
    offering = [s for s in samples if s.tools]
    calling = [(s, called) for s in offering if (called := called_names(s.messages))]
    first = sum(1 for s, called in calling if first_offered_is_first_called(s, called))
    no_call = len(offering) - len(calling)
    return {
        "offering_tools": len(offering),
        "calling_none": no_call,
        "calling_none_share": round(no_call / len(offering), 4) if offering else None,
        "calling": len(calling),
        "first_called_first_offered": first,
        "first_called_first_offered_share": round(first / len(calling), 4) if calling else None,
    }


@dataclass
class Derivation:
    """What :func:`derive` made: the rows kept, the general rows they replace, the counts."""

    rows: list[Sample] = field(default_factory=list)
    replaced: set[str] = field(default_factory=set)
    """Ids of the general rows whose ``general_tools`` row takes their place."""
    made: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    flips_wanted: int = 0
    no_replacement: int = 0
    """Calling rows that could give no flip: too few other tools to keep the offer's length."""

    def stats(self) -> dict[str, Any]:
        return {
            "made": {d: self.made[d] for d in DERIVATIONS},
            "kept": {d: self.kept[d] for d in DERIVATIONS},
            "flips_wanted": self.flips_wanted,
            "flips_short": self.kept["flip"] < self.flips_wanted,
            "flips_without_replacement_tools": self.no_replacement,
        }


def derive(train: Sequence[Sample], cfg: AugmentConfig, seed: int,
           keep: Callable[[Sample], bool]) -> Derivation:
    """The derived rows of the train split's rows ``train`` (agent and general), each passed
    through ``keep`` (which records why one is dropped). Flips come last: they fill the share of
    tool-offering rows that call nothing, counted over everything else kept."""
    out = Derivation()
    agent = sorted((s for s in train if s.source == AGENT), key=lambda s: s.id)
    calling_sources = [s for s in agent if calls_tools(s)]
    pool = tool_pool(agent)

    def offer(sample: Sample | None, derivation: str) -> bool:
        if sample is None:
            return False
        out.made[derivation] += 1
        if not keep(sample):
            return False
        out.kept[derivation] += 1
        out.rows.append(sample)
        return True

    for source in calling_sources:
        for row in shuffled_offers(source, cfg.orders, seed):
            offer(row, "shuffled")
        if cfg.mask_names:
            offer(masked_names(source, seed), "masked")
    general = _seeded_order((s for s in train if s.source == GENERAL), seed, "general_tools")
    if pool:
        for source in general[:round(cfg.general_tools * len(general))]:
            if offer(with_general_tools(source, pool, cfg.general_tools_count, seed),
                     "general_tools"):
                out.replaced.add(source.id)
    rows = [s for s in train if s.id not in out.replaced] + out.rows
    shares = decision_shares(rows)
    out.flips_wanted = flips_needed(shares["calling"], shares["calling_none"], cfg.no_call_share)
    for source in _seeded_order(calling_sources, seed, "flip"):
        if out.kept["flip"] >= out.flips_wanted:
            break
        flip = relevance_flip(source, pool, seed)
        out.no_replacement += flip is None
        offer(flip, "flip")
    return out
