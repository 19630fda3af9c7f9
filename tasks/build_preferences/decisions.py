"""Preference pairs for the decision to call a tool or not, from an ``sft_dataset``'s train rows.

The decision is the first assistant turn: the prompt is the conversation before it, with the
tools the row offers.

- A decline (an ``irrelevant`` or ``no_tool`` row, a relevance flip among them): chosen = the
  decline, rejected = a call. For a flip, its source's first call (the tool the flip took out of
  the offer, build_dataset's ``derivations.py``); for a decline the synthesis made, the first
  call of an attempt of its scenario (any call is wrong there), when one exists. A
  ``missing_info`` row that asks first gives none (``asks``): an attempt that called first may
  have been right to (a lookup before the question), so its call is no rejected side.
- With ``mirror`` (``preferences.mirror_flips``, off), the flip's mirror: on its source's
  prompt (the needed tools offered), chosen = the source's first call, rejected = the flip's
  decline, so a request is seen both ways, as the flips do for SFT. Without it every decision
  pair about declining says "decline", and DPO strong enough can make the model decline
  everything (the outcome's dev split: calling kinds 0 of 19 after 32 steps at 5e-5); but at
  the chosen 2e-5 the mirrors took the declines away (6.2 against 62.5 without them).
- A calling row as verified (``derivation`` none): chosen = its first call, rejected = a call of
  a distractor (a tool it is offered and does not call, seeded), with the right call's argument
  values where a parameter has the same name, else the parameter's first enum value, its
  default, or an empty value of its type. The pair keeps the row's own offer (the needed tools
  first in most rows); offering the tools in the row's shuffled copy's order instead was tried
  on the dev split (DPO at 2e-5) and not kept: calls 31.6 but declines 25.0 against 21.1 and
  62.5, and with the needed tools last it still called nothing (0.0, as with the row's order).

A decision pair is right and wrong by construction, not ranked by the reward: its rewards are 1
and 0 (``components``: ``{"decision": 1.0}`` and ``0.0``), its margin 1. Each row that gives no
pair is counted by why.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.agent.formats import tool_entries
from agentune.tasks.build_preferences.pairs import Candidate, pair_key, pair_row, split_of
from agentune.tasks.environments.scenarios import DECLINING_KINDS
from agentune.tasks.verifier.rollout import ASK_USER, from_messages

SOURCE = "decisions"
_EMPTY: dict[str, Any] = {"string": "", "integer": 0, "number": 0, "boolean": False,
                          "array": [], "object": {}}


@dataclass
class DecisionPairs:
    rows: list[dict[str, Any]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    """Pairs by what they teach (``flip``, ``mirror``, ``decline``, ``distractor``) and rows
    without one by why (``no_call_to_reject``, ``no_distractor``, ``source_missing``, ``asks``,
    ``duplicate``)."""


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool schema (OpenAI's or flat) as ``{name, description, parameters}``."""
    return tool_entries([tool])[0]


def _first_answer(messages: Sequence[Mapping[str, Any]]) -> int | None:
    return next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)


def _first_call(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first assistant turn when it calls a tool (not only ``ask_user``)."""
    at = _first_answer(messages)
    if at is None or not from_messages(messages[:at + 1]).calls():
        return None
    return messages[at]


def distractor_call(tool: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant turn calling ``tool`` with the right call's values where they fit."""
    fn = _function(tool)
    parameters = fn.get("parameters") or {}
    properties = parameters.get("properties") or {}
    calls = from_messages([right]).calls()  # arguments read as the verifier reads them
    values = calls[0].arguments if calls else {}
    arguments: dict[str, Any] = {}
    for name in list(parameters.get("required") or []) + [p for p in properties if p in values]:
        spec = properties.get(name) or {}
        if name in values:
            arguments[name] = values[name]
        elif spec.get("enum"):
            arguments[name] = spec["enum"][0]
        elif "default" in spec:
            arguments[name] = spec["default"]
        else:
            arguments[name] = _EMPTY.get(str(spec.get("type")), "")
    return {"role": "assistant", "content": right.get("content") or "",
            "tool_calls": [{"id": "call_0", "type": "function",
                            "function": {"name": fn.get("name"), "arguments": arguments}}]}


def _candidate(row: Mapping[str, Any], row_id: str, prompt: list[dict[str, Any]],
               answer: Mapping[str, Any], chosen: bool) -> Candidate:
    return Candidate(id=row_id, source=SOURCE, scenario_id=str(row.get("query_id") or row["id"]),
                     kind=str(row.get("kind") or ""), lang=str(row.get("lang") or ""),
                     messages=[*prompt, dict(answer)],
                     tools=[dict(t) for t in row.get("tools") or []],
                     reward=1.0 if chosen else 0.0,
                     components={"decision": 1.0 if chosen else 0.0})


def _pair(row: Mapping[str, Any], answer: Mapping[str, Any], rejected_id: str,
          wrong: Mapping[str, Any], val_ratio: float, seed: int) -> dict[str, Any]:
    at = _first_answer(row["messages"])
    assert at is not None
    prompt = [dict(m) for m in row["messages"][:at]]
    chosen = _candidate(row, str(row["id"]), prompt, answer, chosen=True)
    rejected = _candidate(row, rejected_id, prompt, wrong, chosen=False)
    return pair_row(chosen, rejected, at, 1.0, SOURCE, chosen.scenario_id,
                    split_of(chosen.scenario_id, val_ratio, seed))


def _distractor(row: Mapping[str, Any], seed: int) -> Mapping[str, Any] | None:
    called = {c.name for c in from_messages(row["messages"]).calls()}
    spare = [t for t in row.get("tools") or []
             if _function(t).get("name") not in called | {ASK_USER}]
    if not spare:
        return None
    digest = hashlib.sha256(f"{seed}:distractor:{row['id']}".encode()).hexdigest()
    return random.Random(digest).choice(spare)


def decision_pairs(rows: Iterable[Mapping[str, Any]], attempts: Sequence[Candidate], *,
                   val_ratio: float, seed: int, known: Iterable[str] = (),
                   mirror: bool = False) -> DecisionPairs:
    """The decision pairs of the train split's agent rows ``rows``; ``attempts`` give the calls a
    decline of synthesis is preferred to; ``known`` holds :func:`pair_key` of pairs already made
    (from the attempts), which are not made twice."""
    out = DecisionPairs()
    seen = set(known)
    train = [r for r in rows if r.get("split") == "train" and r.get("source") == "agent"
             and r.get("tools")]
    by_id = {str(r["id"]): r for r in train}
    wrong_calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for attempt in sorted(attempts, key=lambda c: c.id):
        call = _first_call(attempt.messages) if attempt.kind in DECLINING_KINDS else None
        if call is not None:
            wrong_calls.setdefault(attempt.scenario_id, (attempt.id, call))
    for row in sorted(train, key=lambda r: str(r["id"])):
        at = _first_answer(row["messages"])
        derivation = row.get("derivation") or "none"
        if at is None or derivation not in ("none", "flip"):
            continue
        answer = row["messages"][at]
        right = _first_call(row["messages"])
        made: list[tuple[str, dict[str, Any]]] = []
        if right is None:
            if derivation != "flip" and row.get("kind") not in DECLINING_KINDS:
                out.counts["asks"] += 1
                continue
            if derivation == "flip":
                source = by_id.get(str(row.get("derived_from")))
                wrong = _first_call(source["messages"]) if source else None
                found = (str(row["derived_from"]), wrong) if wrong else None
                what, missing = "flip", "source_missing"
            else:
                found = wrong_calls.get(str(row.get("query_id")))
                what, missing = "decline", "no_call_to_reject"
            if found is None:
                out.counts[missing] += 1
                continue
            made.append((what, _pair(row, answer, found[0], found[1], val_ratio, seed)))
            if derivation == "flip" and mirror:
                assert source is not None and wrong is not None
                made.append(("mirror", _pair(source, wrong, str(row["id"]), answer,
                                             val_ratio, seed)))
        else:
            tool = _distractor(row, seed)
            if tool is None:
                out.counts["no_distractor"] += 1
                continue
            made.append(("distractor", _pair(
                row, right, f"{row['id']}~distractor:{_function(tool).get('name')}",
                distractor_call(tool, right), val_ratio, seed)))
        for what, pair in made:
            key = pair_key(pair)
            if key in seen:
                out.counts["duplicate"] += 1
                continue
            seen.add(key)
            out.counts[what] += 1
            out.rows.append(pair)
    return out
