"""The Meta-Agent: candidate agent prompt templates written by the teacher from query sets, and
the structural filter that drops the unusable ones before judging.

For every query set the stage plans ``candidates_per_set`` requests (:func:`plan_candidates`),
each with its own brief so that the candidates differ: output protocol (rotated over the allowed
ones), language, tone, number of rules and what they stress. The request (:func:`meta_request`,
prompt ``templates/meta_agent.j2``) asks for the six sections as JSON with a ``json_schema``
response format; :func:`read_meta_answer` turns the answer into a :class:`CandidateDraft`, and
:class:`StructuralFilter` keeps it or says why not (missing section, unknown output format,
missing or unknown placeholder, near-duplicate of a kept template).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jinja2

from agentune.tasks.agent.formats import FORMATS, agent_format
from agentune.tasks.agent.json_reading import read_json_object
from agentune.tasks.agent.prompt_templates import (
    SECTIONS,
    AgentPromptInputs,
    AgentTemplate,
    PastTask,
    TemplateError,
    Turn,
    compose_template,
    load_template,
    macro_request,
    section_placeholder_problems,
    section_sources,
)
from agentune.tasks.common.near_dedup import NearDupIndex
from agentune.tasks.common.rejects import KEEP, Verdict, drop
from agentune.tasks.llm.types import ChatRequest, ChatResult

PROMPT = "meta_agent.j2"

LANGUAGE_NAMES = {"zh": "Simplified Chinese (简体中文)", "en": "English"}
TONES = (
    "formal and precise",
    "warm and friendly",
    "terse, no-nonsense",
    "meticulous and cautious",
    "energetic and upbeat",
    "calm and authoritative",
)
EMPHASES = (
    "efficiency: as few tool calls as possible",
    "accuracy: check facts before relying on them",
    "privacy and safety of the user's data",
    "self-reflection: criticise and correct earlier steps",
    "cost: every tool call has a price",
    "a clear final answer a non-expert understands",
    "using the current time correctly for dates and deadlines",
)
MIN_RULES, MAX_RULES = 3, 9
MAX_TOOLS_SHOWN = 12


@dataclass(frozen=True)
class CandidateBrief:
    """What one Meta-Agent request asks for, and the query set it starts from."""

    candidate_id: str
    set_id: str
    index: int
    lang: str
    protocol: str
    tone: str
    n_rules: int
    emphasis: str
    scenario: str
    examples: tuple[str, ...]
    tools: tuple[tuple[str, str], ...]
    """(name, description) of the tools the set's queries are offered."""

    def style(self) -> dict[str, Any]:
        return {"lang": self.lang, "protocol": self.protocol, "tone": self.tone,
                "n_rules": self.n_rules, "emphasis": self.emphasis}


@dataclass(frozen=True)
class QuerySetView:
    """One query set as the Meta-Agent sees it."""

    set_id: str
    lang: str
    scenario: str
    examples: tuple[str, ...]
    tools: tuple[tuple[str, str], ...]


def candidate_id(set_id: str, index: int) -> str:
    return f"tpl-{set_id}-{index:02d}"


def plan_candidates(sets: Sequence[QuerySetView], *, per_set: int, protocols: Sequence[str],
                    languages: Sequence[str], seed: int = 0) -> list[CandidateBrief]:
    """One brief per candidate, in set order. Protocols rotate over all candidates (so each is
    used about equally); a set's first candidate is in the set's language when it is allowed,
    later ones rotate through ``languages``; tone, rule count and emphasis are drawn per
    candidate from a generator seeded by the run seed and the set id."""
    if not protocols or not languages:
        raise ValueError("protocols and languages must not be empty")
    for protocol in protocols:
        agent_format(protocol)
    briefs = []
    turn = seed % len(protocols)
    for view in sets:
        first = list(languages).index(view.lang) if view.lang in languages else 0
        rng = random.Random(f"{seed}:{view.set_id}")
        for index in range(per_set):
            briefs.append(
                CandidateBrief(
                    candidate_id=candidate_id(view.set_id, index),
                    set_id=view.set_id,
                    index=index,
                    lang=languages[(first + index) % len(languages)],
                    protocol=protocols[turn % len(protocols)],
                    tone=rng.choice(TONES),
                    n_rules=rng.randint(MIN_RULES, MAX_RULES),
                    emphasis=" and ".join(rng.sample(EMPHASES, 2)),
                    scenario=view.scenario,
                    examples=view.examples,
                    tools=view.tools[:MAX_TOOLS_SHOWN],
                )
            )
            turn += 1
    return briefs


ANSWER_ORDER = ("profile", "tools", "goal", "memory", "current_time", "format", "instruction")
"""The order the answer writes its parts in (constrained decoders generate keys in schema order):
the short parts holding placeholders before the long rule list, so a weak model that drifts while
listing rules has already placed its placeholders."""
MEMORY_PARTS = ("completed_tasks", "conversation_history", "knowledge")
"""The Memory section is written as three parts, one per kind of memory, each holding its own
placeholder; the current time comes as a line of its own, shown at the end of Memory."""


def part_max_chars(max_chars: int) -> int:
    """Longest memory part or time line: half a section, never too short for a label and its
    placeholder (``Conversation so far: {conversation_history}`` is 43 characters)."""
    return max(48, max_chars // 2)


def meta_answer_schema(protocols: Sequence[str], max_chars: int) -> dict[str, Any]:
    """JSON schema of a Meta-Agent answer: a name, the protocol, the sections (Memory in its three
    parts) and the current-time line, every text length-bounded so a grammar-constrained model
    cannot run away inside one."""

    def text(limit: int) -> dict[str, Any]:
        return {"type": "string", "minLength": 1, "maxLength": limit}

    part = part_max_chars(max_chars)
    limits = {"instruction": 2 * max_chars, "current_time": part}
    properties: dict[str, Any] = {"name": text(60), "protocol": {"type": "string",
                                                                 "enum": list(protocols)}}
    for key in ANSWER_ORDER:
        if key == "memory":
            properties[key] = {"type": "object",
                               "properties": {p: text(part) for p in MEMORY_PARTS},
                               "required": list(MEMORY_PARTS), "additionalProperties": False}
        else:
            properties[key] = text(limits.get(key, max_chars))
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def meta_max_tokens(lang: str, max_chars: int) -> int:
    """Room for the longest allowed answer: every text full, Chinese at up to 3 tokens a character
    in small-model tokenizers, English at about one."""
    chars = 60 + max_chars * 7
    return chars * (3 if lang == "zh" else 1) + 128


def meta_request(brief: CandidateBrief, *, protocols: Sequence[str], max_chars: int,
                 temperature: float | None, seed: int | None = None) -> ChatRequest:
    """The teacher request that writes one candidate template."""
    user = dict(
        examples=list(brief.examples),
        scenario=brief.scenario,
        tools=list(brief.tools),
        language_name=LANGUAGE_NAMES.get(brief.lang, brief.lang),
        tone=brief.tone,
        n_rules=brief.n_rules,
        emphasis=brief.emphasis,
        protocol=brief.protocol,
        protocol_summary=agent_format(brief.protocol).summary,
        max_chars=max_chars,
        part_chars=part_max_chars(max_chars),
    )
    return macro_request(
        PROMPT, user, schema_name="agent_prompt_template",
        schema=meta_answer_schema(protocols, max_chars),
        temperature=temperature,
        seed=seed,
        max_tokens=meta_max_tokens(brief.lang, max_chars),
    )


@dataclass
class CandidateDraft:
    """A Meta-Agent answer, read but not yet checked."""

    brief: CandidateBrief
    name: str
    protocol: str | None
    sections: dict[str, str] = field(default_factory=dict)
    """The written sections that were strings; a missing one is absent."""


class MetaAgentError(ValueError):
    """A Meta-Agent answer that cannot be read; ``reason`` is the reject reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def read_meta_answer(brief: CandidateBrief, result: ChatResult) -> CandidateDraft:
    """The draft in a teacher answer; raises :class:`MetaAgentError` (``truncated``,
    ``not_json``) when there is none."""
    if result.finish_reason == "length":
        raise MetaAgentError("truncated", f"answer cut off at max_tokens "
                                          f"({result.usage.completion_tokens} tokens)")
    reading = read_json_object(result.content)
    if reading.value is None:
        snippet = (result.content or "").strip()[:80]
        raise MetaAgentError("not_json", f"no JSON object in the answer: {snippet!r}")
    data = reading.value
    sections = {name: data[name] for name in SECTIONS if isinstance(data.get(name), str)}
    memory = data.get("memory")
    if isinstance(memory, dict):
        # Parts in their fixed order; a missing part shows up as a missing variable.
        sections["memory"] = "\n".join(str(memory[p]) for p in MEMORY_PARTS
                                       if isinstance(memory.get(p), str) and memory[p].strip())
    if "memory" in sections and isinstance(data.get("current_time"), str):
        sections["memory"] = f"{sections['memory']}\n{data['current_time']}".strip()
    protocol = data.get("protocol") if isinstance(data.get("protocol"), str) else None
    name = data.get("name") if isinstance(data.get("name"), str) else ""
    return CandidateDraft(brief, name.strip(), protocol, sections)


# --------------------------------------------------------------------------- structural filter

_JINJA_SYNTAX = re.compile(r"\{[{%#].*?[}%#]\}", re.DOTALL)
_PROBE_TOOLS = [{"name": "web_search", "description": "Search the web.",
                 "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]


def probe_inputs(lang: str) -> AgentPromptInputs:
    """Inputs with every variable filled, to prove a template renders."""
    goal = "明天上海会下雨吗？" if lang == "zh" else "Will it rain in Shanghai tomorrow?"
    return AgentPromptInputs.for_query(
        goal, _PROBE_TOOLS, current_time=datetime(2025, 6, 2, 9, 30), lang=lang,
        completed_tasks=[PastTask(thought="search", tool_name="web_search",
                                  tool_args={"query": goal}, observation="...")],
        conversation_history=[Turn(role="user", content="hi"),
                              Turn(role="assistant", content="hello")],
        knowledge=["Shanghai is in China."],
    )


WORDING_SECTIONS = ("profile", "instruction", "goal", "memory")
"""Where a template's own wording lives. Tools is mostly the tool list and Format mostly the
protocol's canonical specification, which every template of a protocol shares."""


def wording(text: str) -> str:
    """Text without variables or Jinja syntax, which every template shares and which would make
    unrelated templates look alike."""
    return re.sub(r"\{[A-Za-z_][A-Za-z0-9_]*\}", " ", _JINJA_SYNTAX.sub(" ", text))


def template_wording(template: AgentTemplate) -> str:
    sources = section_sources(template.text)
    return "\n".join(wording(sources.get(name, "")) for name in WORDING_SECTIONS)


@dataclass
class FilterOutcome:
    verdict: Verdict
    detail: str = ""
    template: AgentTemplate | None = None


class StructuralFilter:
    """Keep-or-reason for drafts, in order; a kept draft's wording joins the near-dup index.

    Reasons: ``missing_section``, ``format_unparseable`` (no protocol, or one no parser reads),
    ``missing_variable``, ``unknown_variable``, ``invalid_template`` (the composed template does
    not load or render), ``near_duplicate``.
    """

    def __init__(self, kept: Sequence[AgentTemplate] = (), *, near_dup_threshold: float = 0.7,
                 allowed_protocols: Sequence[str] = tuple(FORMATS)) -> None:
        # 5-grams: long enough that shared stock phrases do not make templates look alike.
        self.index = NearDupIndex(near_dup_threshold, ngram=5)
        self.allowed = set(allowed_protocols)
        for template in kept:
            self.index.add(template.id, template_wording(template))

    def check(self, draft: CandidateDraft) -> FilterOutcome:
        brief = draft.brief
        missing = [s for s in SECTIONS if not draft.sections.get(s, "").strip()]
        if missing:
            return FilterOutcome(drop("missing_section"), ", ".join(missing))
        if draft.protocol not in self.allowed:
            return FilterOutcome(drop("format_unparseable"),
                                 f"output format {draft.protocol!r} is not one of "
                                 f"{sorted(self.allowed)}")
        problems = section_placeholder_problems(draft.sections)
        if problems:
            reason = problems[0][0]
            return FilterOutcome(drop(reason), "; ".join(f"{r}: {d}" for r, d in problems))
        text = compose_template(draft.sections)
        try:
            template = load_template(text, id=brief.candidate_id, protocol=draft.protocol,
                                     lang=brief.lang if brief.lang in ("zh", "en") else None,  # type: ignore[arg-type]
                                     origin=f"candidate {brief.candidate_id}")
            for lang in ("zh", "en"):
                template.render(probe_inputs(lang))
        except (TemplateError, jinja2.TemplateError) as exc:
            return FilterOutcome(drop("invalid_template"), str(exc))
        verdict, match = self.index.check(template.id, wording("\n".join(
            draft.sections[s] for s in WORDING_SECTIONS)))
        if verdict is not KEEP:
            assert match is not None
            return FilterOutcome(verdict, f"similar to {match.key} "
                                          f"(5-gram Jaccard {match.similarity:.2f})")
        return FilterOutcome(KEEP, template=template)


def set_views(queries: Sequence[Mapping[str, Any]], tools: Mapping[str, Mapping[str, Any]],
              *, examples_per_set: int = 5) -> list[QuerySetView]:
    """Query rows grouped into their sets (in first-seen order) as the Meta-Agent sees them."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for row in queries:
        grouped.setdefault(str(row["set_id"]), []).append(row)
    views = []
    for set_id, rows in grouped.items():
        names: list[str] = []
        for row in rows:
            names += [n for n in row.get("tool_ids") or () if n not in names]
        views.append(QuerySetView(
            set_id=set_id,
            lang=str(rows[0]["lang"]),
            scenario=str(rows[0].get("scenario") or "general"),
            examples=tuple(str(r["text"]) for r in rows[:examples_per_set]),
            tools=tuple((n, str(tools[n]["description"])) for n in names if n in tools),
        ))
    return views
