"""Task recipes: scenarios made from a sampled world instead of written one by one.

A recipe is one task an environment supports, written once: how its slots are bound from a world
(a route that exists and its cheapest flight, a customer's paid order, a free room), the calls
that solve it (argument values are ``str.format`` templates over the slots), its kind, the
request in each language in several *phrasing families* (genuinely different sentence structures:
an order, a question, a story, a form...), for ``missing_info`` what the user answers when
asked, and the facts a final answer must state, read from what the calls returned. A sampled
world (an environment's ``sample_state(rng)`` classmethod; the default state without one) and a
seeded ``random.Random`` give one :class:`Draft`; build_scenarios runs its ground truth and reads
its facts (see :mod:`agentune.tasks.build_scenarios.generation`).

Slot values are plain values, :class:`Text` (a value written differently per language: a city is
"北京" in a Chinese request and "Beijing" in an English one) and :class:`Day` (a date: ``{day}``
in a call is ``2025-06-06``, ``{day:zh}`` in a request ``6月6日``, ``{day:en}`` ``June 6``).
A call argument that is exactly one slot (``"{passengers}"``) takes the slot's value as it is (a
number, a list). Facts may read the results: ``"{results[1][0][booking_id]}"`` is the
``booking_id`` of the first call of the second step. See README "Scenarios at scale".
"""

from __future__ import annotations

import datetime as dt
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from agentune.tasks.environments.scenarios import Call, ScenarioKind

LANGS = ("zh", "en")
_WEEKDAYS = {"zh": "一二三四五六日", "en": ("Monday", "Tuesday", "Wednesday", "Thursday",
                                            "Friday", "Saturday", "Sunday")}
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_ONE_FIELD = re.compile(r"^\{(\w+)\}$")


class Unbound(Exception):  # noqa: N818 - read as "the recipe is unbound in this world"
    """Raised by a recipe's ``bind`` when the world has nothing to bind its slots to (no route
    with a free seat, no paid order); the message says what is missing."""


class Text(str):
    """A slot value in the scenario's language that knows its other forms: ``{city}`` is the
    language's form, ``{city:en}`` / ``{city:zh}`` a given one."""

    forms: Mapping[str, str]

    def __new__(cls, zh: str, en: str | None = None, *, lang: str = "zh") -> Text:
        forms = {"zh": zh, "en": en if en is not None else zh}
        text = super().__new__(cls, forms[lang])
        text.forms = forms
        return text

    def said_in(self, lang: str) -> Text:
        return Text(self.forms["zh"], self.forms["en"], lang=lang)

    def __format__(self, spec: str) -> str:
        return self.forms[spec] if spec in self.forms else format(str(self), spec)


@dataclass(frozen=True)
class Day:
    """A date slot: ISO in calls, ``{day:zh}`` 6月6日, ``{day:en}`` June 6, ``{day:zhw}``
    6月6日（周五）, ``{day:enw}`` Friday, June 6."""

    iso: str

    @property
    def date(self) -> dt.date:
        return dt.date.fromisoformat(self.iso)

    def __str__(self) -> str:
        return self.iso

    def __format__(self, spec: str) -> str:
        d = self.date
        forms = {"": self.iso, "iso": self.iso, "zh": f"{d.month}月{d.day}日",
                 "en": f"{_MONTHS[d.month - 1]} {d.day}",
                 "zhw": f"{d.month}月{d.day}日（周{_WEEKDAYS['zh'][d.weekday()]}）",
                 "enw": f"{_WEEKDAYS['en'][d.weekday()]}, {_MONTHS[d.month - 1]} {d.day}"}
        if spec not in forms:
            raise ValueError(f"a Day formats as {sorted(forms)}, not {spec!r}")
        return forms[spec]


@dataclass(frozen=True)
class CallTemplate:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


def call(tool: str, /, **arguments: Any) -> CallTemplate:
    """A ground-truth call whose string arguments are templates over the slots."""
    return CallTemplate(tool, arguments)


Binder = Callable[[dict[str, Any], random.Random], Mapping[str, Any]]
"""(the environment's world state, a seeded Random) -> slots; raises :class:`Unbound`."""


def no_slots(world: dict[str, Any], rng: random.Random) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True)
class Recipe:
    """One task of an environment (see the module docstring).

    ``phrasings`` maps a language to its phrasing families, each a template or a list of
    templates (wordings of one structure). ``hidden`` maps a language to what the user answers
    when asked (``missing_info`` only).
    """

    id: str
    kind: ScenarioKind
    phrasings: Mapping[str, Mapping[str, str | Sequence[str]]]
    calls: Sequence[Sequence[CallTemplate]] = ()
    bind: Binder = no_slots
    facts: Sequence[str] = ()
    hidden: Mapping[str, str] = field(default_factory=dict)

    def languages(self) -> list[str]:
        return [lang for lang in LANGS if lang in self.phrasings]

    def families(self, lang: str) -> list[str]:
        return sorted(self.phrasings[lang])


def recipe_problem(recipe: Any) -> tuple[str, str] | None:
    """(field, problem) of a recipe that cannot make scenarios, checked when it is loaded."""
    if not isinstance(recipe, Recipe):
        return "", f"not a Recipe: {type(recipe).__name__}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", recipe.id):
        return "id", f"{recipe.id!r}: use letters, digits, '.', '_' or '-' (64 at most)"
    if recipe.kind not in get_args(ScenarioKind):
        return "kind", f"{recipe.kind!r} is not one of {list(get_args(ScenarioKind))}"
    if not recipe.languages() or set(recipe.phrasings) - set(LANGS):
        return "phrasings", f"map languages {list(LANGS)} to phrasing families"
    for lang in recipe.languages():
        if len(recipe.phrasings[lang]) < 2:
            return f"phrasings.{lang}", "needs two or more phrasing families (held-out " \
                "scenarios are phrased in families train never saw)"
        for family, text in recipe.phrasings[lang].items():
            if not (isinstance(text, str) and text) and not (
                    isinstance(text, Sequence) and text and all(isinstance(t, str) for t in text)):
                return f"phrasings.{lang}.{family}", "a template or a list of templates"
    if (recipe.kind == "missing_info") != bool(recipe.hidden):
        return "hidden", "missing_info recipes (and only they) say what the user answers"
    if recipe.hidden and set(recipe.hidden) != set(recipe.languages()):
        return "hidden", f"one answer per phrased language {recipe.languages()}"
    calling = recipe.kind not in ("no_tool", "irrelevant")
    if calling != bool(recipe.calls):
        return "calls", f"a {recipe.kind} recipe " + ("needs calls" if calling else "calls no tool")
    return None


# --------------------------------------------------------------------------- rendering


def slots_in(slots: Mapping[str, Any], lang: str) -> dict[str, Any]:
    """The slots as a scenario in ``lang`` says them."""
    return {k: v.said_in(lang) if isinstance(v, Text) else v for k, v in slots.items()}


def _plain(value: Any) -> Any:
    """A slot value as a call argument: Text and Day as strings, lists and dicts inside out."""
    if isinstance(value, Text):
        return str(value)
    if isinstance(value, Day):
        return value.iso
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def fill(template: Any, slots: Mapping[str, Any]) -> Any:
    """A call argument with its slots filled: a lone ``{slot}`` keeps the slot's type."""
    if isinstance(template, str):
        alone = _ONE_FIELD.match(template)
        if alone:
            return _plain(slots[alone.group(1)])
        return string.Formatter().vformat(template, (), slots)
    if isinstance(template, list | tuple):
        return [fill(t, slots) for t in template]
    if isinstance(template, dict):
        return {k: fill(v, slots) for k, v in template.items()}
    return template


@dataclass(frozen=True)
class Draft:
    """A recipe rendered in one world, language and phrasing family, before its ground truth
    runs (the facts are read from the results then)."""

    recipe: Recipe
    lang: str
    family: str
    slots: dict[str, Any]
    request: str
    ground_truth: list[list[Call]]
    hidden: str | None

    def facts(self, results: Sequence[Any]) -> list[str]:
        """The recipe's facts read from the slots and the ground truth's ``results``; a
        template that reads past the results raises (KeyError, IndexError, TypeError)."""
        values = {**self.slots, "results": results}
        return [string.Formatter().vformat(f, (), values) for f in self.recipe.facts]

    def slot_record(self) -> dict[str, Any]:
        """The slots as JSON (what the blueprint column keeps)."""
        return {k: _plain(v) for k, v in self.slots.items()}


def render(recipe: Recipe, slots: Mapping[str, Any], lang: str, family: str,
           rng: random.Random) -> Draft:
    """The recipe's request, calls and hidden answer for these slots; a template naming a slot
    the binding lacks raises KeyError."""
    said = slots_in(slots, lang)
    choices = recipe.phrasings[lang][family]
    template = choices if isinstance(choices, str) else rng.choice(list(choices))
    request = string.Formatter().vformat(template, (), said).strip()
    steps = [[Call(name=c.name, arguments={k: fill(v, said) for k, v in c.arguments.items()})
              for c in step] for step in recipe.calls]
    hidden = string.Formatter().vformat(recipe.hidden[lang], (), said).strip() \
        if recipe.hidden else None
    return Draft(recipe, lang, family, said, request, steps, hidden)


PEOPLE = ("张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊", "赵敏", "黄婷", "周杰", "吴昊", "孙丽",
          "郑凯", "Noah Kim", "Liam Carter", "Alice Chen", "Bob Li", "Emma Wilson",
          "Lucas Martin", "Sofia Rossi", "Daniel Park")
"""Names a recipe may give the people its requests are for."""


def person(rng: random.Random, *, besides: Sequence[str] = ()) -> str:
    """A person's name, not one of ``besides``."""
    return rng.choice([p for p in PEOPLE if p not in besides])


def group_by(rows: Sequence[Mapping[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[Any]]:
    """Rows grouped by the values of ``keys``, groups and rows in their order in the world."""
    out: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return out


def choose(rng: random.Random, options: Sequence[Any], missing: str) -> Any:
    """A seeded choice; :class:`Unbound` with ``missing`` when there is none."""
    if not options:
        raise Unbound(missing)
    return options[rng.randrange(len(options))]
