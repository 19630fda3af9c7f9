"""Agent prompt templates: the six-section model, loading with validation, and rendering.

A template is Jinja2 text whose sections are blocks named ``profile``, ``instruction``, ``tools``,
``goal``, ``memory`` and ``format`` (a concluder has no ``tools`` and no ``format``: it writes the
final answer as plain text). Its variables are the fields of :class:`AgentPromptInputs` plus
``output_format`` (the canonical Format text of its protocol) and ``protocol``. Loading checks
that every section is there, that the Tools, Goal and Memory sections use their variables
(``tools``; ``goal``; ``completed_tasks``, ``conversation_history``, ``knowledge``), that the
current time is shown somewhere, and that nothing else is referenced; an error names the template,
the section or variable, and what to do.

The benchmark templates (``templates/agent_*.j2``) are files; Meta-Agent candidates are written
from their sections by :func:`compose_template` and live in the ``templates`` artifact, and both
load through :func:`load_template`. Rendering runs in Jinja's sandbox, so a template written by an
LLM can reach nothing but its inputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, Literal

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field

from agentune.paths import templates_dir
from agentune.tasks.agent.formats import CompletedTask, agent_format, tool_entries
from agentune.tasks.llm.types import ChatRequest

TemplateKind = Literal["planner", "concluder"]
TemplateSource = Literal["benchmark", "meta-agent"]
Lang = Literal["zh", "en"]

SECTIONS: tuple[str, ...] = ("profile", "instruction", "tools", "goal", "memory", "format")
"""A planner template's sections, in the order a composed template shows them."""
CONCLUDER_SECTIONS: tuple[str, ...] = ("profile", "instruction", "goal", "memory")

SECTION_VARIABLES: dict[str, tuple[str, ...]] = {
    "tools": ("tools",),
    "goal": ("goal",),
    "memory": ("completed_tasks", "conversation_history", "knowledge"),
}
"""Variables a section must use (when the template kind has that section)."""
REQUIRED_ANYWHERE: tuple[str, ...] = ("current_time",)

VARIABLES: dict[str, str] = {
    "goal": "the user's request",
    "tools": "the tools offered: a list of {name, description, parameters}",
    "completed_tasks": "earlier steps and their results (filter: task_history)",
    "conversation_history": "earlier turns of the conversation (filter: dialogue)",
    "knowledge": "facts given to the agent (filter: bullets)",
    "current_time": "the current date and time, formatted",
    "max_steps": "the most planning steps allowed",
    "lang": "zh or en: the language of the template's fixed text",
    "output_format": "the canonical Format text of the template's protocol",
    "protocol": "the template's output protocol name",
}
"""Every variable a template may use, with what it holds."""


class TemplateError(ValueError):
    """A template that cannot be used; the message names it and the missing or bad part."""


# --------------------------------------------------------------------------- inputs


class ToolSchema(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class PastTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    thought: str
    tool_name: str
    tool_args: dict[str, Any] = Field(default_factory=dict)
    observation: str = ""


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str


class AgentPromptInputs(BaseModel):
    """What a template is rendered with: the typed variables of every agent template."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, description="The user's request.")
    tools: list[ToolSchema] = Field(default_factory=list)
    completed_tasks: list[PastTask] = Field(default_factory=list)
    conversation_history: list[Turn] = Field(default_factory=list)
    knowledge: list[str] = Field(default_factory=list)
    current_time: datetime
    lang: Lang = Field("en", description="Language of the request (used by bilingual templates).")
    max_steps: int = Field(5, ge=1, le=100)

    @classmethod
    def for_query(cls, goal: str, tools: Sequence[Mapping[str, Any]], *, current_time: datetime,
                  lang: str = "en", **more: Any) -> AgentPromptInputs:
        """Inputs for a fresh query: accepts tool rows, KAgentBench funcs or OpenAI tools."""
        return cls(goal=goal, tools=[ToolSchema(**t) for t in tool_entries(tools)],
                   current_time=current_time, lang="zh" if lang == "zh" else "en", **more)


_WEEKDAYS = {"zh": "一二三四五六日", "en": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                           "Saturday", "Sunday")}


@lru_cache(maxsize=64)
def format_time(when: datetime, lang: str) -> str:
    if lang == "zh":
        return f"{when:%Y-%m-%d %H:%M} 星期{_WEEKDAYS['zh'][when.weekday()]}"
    return f"{when:%Y-%m-%d %H:%M} ({_WEEKDAYS['en'][when.weekday()]})"


# --------------------------------------------------------------------------- jinja environment


def _tool_lines(tools: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(f"- {t['name']}: {t['description']}" for t in tools)


def _tool_json_lines(tools: Sequence[Mapping[str, Any]], start: int = 1) -> str:
    return "\n".join(f"{i}:{_compact_json(t)}" for i, t in enumerate(tools, start))


def _tool_names(tools: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(str(t["name"]) for t in tools)


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@jinja2.pass_context
def _task_history(context: jinja2.runtime.Context, tasks: Sequence[Mapping[str, Any]]) -> str:
    fmt = agent_format(context["protocol"])
    done = [CompletedTask(t["thought"], t["tool_name"], t.get("tool_args") or {},
                          t.get("observation", "")) for t in tasks]
    return fmt.render_history(done, context["lang"])


def _dialogue(turns: Sequence[Mapping[str, Any]]) -> str:
    names = {"user": "User", "assistant": "Assistant"}
    return "\n".join(f"{names[t['role']]}: {t['content']}" for t in turns)


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


@lru_cache(maxsize=1)
def environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(
        tool_lines=_tool_lines,
        tool_json_lines=_tool_json_lines,
        tool_names=_tool_names,
        tojson_compact=_compact_json,
        task_history=_task_history,
        dialogue=_dialogue,
        bullets=_bullets,
    )
    return env


@cache
def _prompt_macros(name: str) -> Any:
    return environment().get_template(name).module


def macro_request(template: str, user_args: Mapping[str, Any], *, schema_name: str,
                  schema: Mapping[str, Any], strict: bool = True, **request: Any) -> ChatRequest:
    """A structured-output request from a prompt template file with ``system()`` and
    ``user(...)`` macros: the two messages rendered in the one shared environment (sandboxed, so
    a value is only ever text, never template code), the answer constrained by ``schema``;
    ``request`` holds the other ChatRequest fields (temperature, seed, max_tokens ...)."""
    macros = _prompt_macros(template)
    return ChatRequest(
        messages=[{"role": "system", "content": str(macros.system()).strip()},
                  {"role": "user", "content": str(macros.user(**user_args)).strip()}],
        response_format={"type": "json_schema", "json_schema": {
            "name": schema_name, "schema": dict(schema), "strict": strict}},
        **request,
    )


# --------------------------------------------------------------------------- the template


@dataclass(frozen=True)
class AgentTemplate:
    """A validated agent prompt template."""

    id: str
    protocol: str
    kind: TemplateKind
    source: TemplateSource
    text: str
    """The Jinja2 source."""
    lang: Lang | None = None
    """Language of its fixed text; None: bilingual, follows the inputs' ``lang``."""
    origin: str = ""
    """Where it came from (a file, an artifact row), for error messages."""
    _compiled: jinja2.Template = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    @property
    def sections(self) -> tuple[str, ...]:
        return SECTIONS if self.kind == "planner" else CONCLUDER_SECTIONS

    def _context(self, inputs: AgentPromptInputs) -> dict[str, Any]:
        lang = self.lang or inputs.lang
        context = inputs.model_dump(mode="python")
        context.update(
            current_time=format_time(inputs.current_time, lang),
            lang=lang,
            protocol=self.protocol,
        )
        if self.kind == "planner" and self._wants_format:
            context["output_format"] = canonical_format(self.protocol, context)
        return context

    @property
    def _wants_format(self) -> bool:
        """Whether the source uses ``output_format`` (a composed template does; a benchmark
        template writes its Format itself, so rendering the canonical one would be wasted on
        every step)."""
        return "output_format" in self.variables

    @property
    def variables(self) -> frozenset[str]:
        return _variables(self.text)

    def render(self, inputs: AgentPromptInputs) -> str:
        """The whole prompt, with runs of blank lines squeezed to one."""
        text = self._compiled.render(self._context(inputs))
        return _squeeze(text)

    def render_sections(self, inputs: AgentPromptInputs) -> dict[str, str]:
        """Each section rendered on its own."""
        ctx = self._compiled.new_context(self._context(inputs))
        return {name: self._block(ctx, name) for name in self.sections}

    def render_section(self, inputs: AgentPromptInputs, name: str) -> str:
        """One section rendered on its own (as :meth:`render_sections` renders it)."""
        return self._block(self._compiled.new_context(self._context(inputs)), name)

    def _block(self, ctx: jinja2.runtime.Context, name: str) -> str:
        return _squeeze("".join(self._compiled.blocks[name](ctx)))


@lru_cache(maxsize=1024)
def _variables(text: str) -> frozenset[str]:
    """The variables a template source reads."""
    return frozenset(meta.find_undeclared_variables(environment().parse(text)))


def _squeeze(text: str) -> str:
    return re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", text).strip()


def canonical_format(protocol: str, context: Mapping[str, Any]) -> str:
    """The Format section of ``protocol``'s benchmark template, rendered with ``context``: what a
    candidate's ``{output_format}`` shows, so every candidate states its format the proven way."""
    template = benchmark_template(agent_format(protocol).name)
    compiled = template._compiled
    ctx = compiled.new_context({**context, "protocol": template.protocol})
    return _squeeze("".join(compiled.blocks["format"](ctx)))


def _block_variables(block: nodes.Block) -> set[str]:
    return {n.name for n in block.find_all(nodes.Name) if n.ctx == "load"}


def template_problems(text: str, kind: TemplateKind) -> list[tuple[str, str]]:
    """What is wrong with a template source, as ``(reason, detail)`` pairs (empty: usable).

    Reasons: ``syntax``, ``missing_section``, ``empty_section``, ``missing_variable``,
    ``unknown_variable``.
    """
    env = environment()
    try:
        ast = env.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        return [("syntax", f"line {exc.lineno}: {exc.message}")]
    required = SECTIONS if kind == "planner" else CONCLUDER_SECTIONS
    blocks = {b.name: b for b in ast.find_all(nodes.Block)}
    problems: list[tuple[str, str]] = []
    for name in required:
        block = blocks.get(name)
        if block is None:
            problems.append(("missing_section", name))
            continue
        if not _has_content(block):
            problems.append(("empty_section", name))
        used = _block_variables(block)
        problems += [("missing_variable", f"{var} (in section {name})")
                     for var in SECTION_VARIABLES.get(name, ()) if var not in used]
    used_anywhere = meta.find_undeclared_variables(ast)
    problems += [("missing_variable", var) for var in REQUIRED_ANYWHERE if var not in used_anywhere]
    problems += [("unknown_variable", var) for var in sorted(used_anywhere - set(VARIABLES))]
    return problems


def _has_content(block: nodes.Block) -> bool:
    for node in block.find_all((nodes.TemplateData, nodes.Name)):
        if isinstance(node, nodes.Name) or node.data.strip():
            return True
    return False


def load_template(text: str, *, id: str, protocol: str, kind: TemplateKind = "planner",
                  source: TemplateSource = "meta-agent", lang: Lang | None = None,
                  origin: str = "") -> AgentTemplate:
    """Validate and compile a template source; raises :class:`TemplateError` naming the problem."""
    where = origin or f"template {id!r}"
    try:
        agent_format(protocol)
    except KeyError as exc:
        raise TemplateError(f"{where}: {exc.args[0]}") from None
    problems = template_problems(text, kind)
    if problems:
        listed = "; ".join(f"{reason}: {detail}" for reason, detail in problems)
        sections = ", ".join(SECTIONS if kind == "planner" else CONCLUDER_SECTIONS)
        raise TemplateError(
            f"{where}: {listed} (a {kind} needs the sections {sections} as "
            f"{{% block NAME %}} ... {{% endblock %}}; variables allowed: {', '.join(VARIABLES)})"
        )
    compiled = environment().from_string(text)
    return AgentTemplate(id=id, protocol=protocol, kind=kind, source=source, text=text, lang=lang,
                         origin=where, _compiled=compiled)


def section_sources(text: str) -> dict[str, str]:
    """Each block's Jinja source, by section name (for the ``sections`` column)."""
    found = re.finditer(r"{%-?\s*block\s+(\w+)\s*-?%}(.*?){%-?\s*endblock(?:\s+\w+)?\s*-?%}",
                        text, re.DOTALL)
    return {m.group(1): m.group(2).strip() for m in found}


# --------------------------------------------------------------------------- benchmark templates


@dataclass(frozen=True)
class BenchmarkSpec:
    file: str
    protocol: str
    kind: TemplateKind = "planner"
    lang: Lang | None = "en"


BENCHMARKS: dict[str, BenchmarkSpec] = {
    "react": BenchmarkSpec("agent_react.j2", "react", lang=None),
    "autogpt": BenchmarkSpec("agent_autogpt.j2", "autogpt", lang=None),
    "toolllama": BenchmarkSpec("agent_toolllama.j2", "toolllama", lang=None),
    "modelscope": BenchmarkSpec("agent_modelscope.j2", "modelscope", lang=None),
    "kuaiagent": BenchmarkSpec("agent_kuaiagent_planner.j2", "kuaiagent", lang=None),
    "kuaiagent_concluder": BenchmarkSpec("agent_kuaiagent_concluder.j2", "kuaiagent",
                                         kind="concluder", lang=None),
}
"""The proven templates, by name: one planner per protocol, plus KuaiAgent's concluder."""


def benchmark_id(name: str) -> str:
    return f"bench-{name.replace('_', '-')}"


@cache
def benchmark_template(name: str) -> AgentTemplate:
    """A benchmark template by name (``react``, ``autogpt`` ... ``kuaiagent_concluder``)."""
    if name not in BENCHMARKS:
        raise TemplateError(f"no benchmark template {name!r} (known: {', '.join(BENCHMARKS)})")
    spec = BENCHMARKS[name]
    path = templates_dir() / spec.file
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateError(f"{path}: benchmark template file missing") from None
    return load_template(text, id=benchmark_id(name), protocol=spec.protocol, kind=spec.kind,
                         source="benchmark", lang=spec.lang, origin=str(path))


def concluder_for(protocol: str) -> AgentTemplate | None:
    """The template that writes the final answer for a two-stage protocol (KuaiAgent)."""
    if agent_format(protocol).two_stage:
        return benchmark_template(f"{agent_format(protocol).name}_concluder")
    return None


# --------------------------------------------------------------------------- composed templates

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""How a Meta-Agent writes a variable into a section: ``{goal}``."""

_PLACEHOLDER_EXPR: dict[str, str] = {
    "tools": "tools | tool_json_lines",
    "goal": "goal",
    "completed_tasks": "completed_tasks | task_history",
    "conversation_history": "conversation_history | dialogue",
    "knowledge": "knowledge | bullets",
    "current_time": "current_time",
    "max_steps": "max_steps",
    "output_format": "output_format",
}
"""What each placeholder becomes in the composed Jinja source."""
PLACEHOLDERS: tuple[str, ...] = tuple(_PLACEHOLDER_EXPR)

SECTION_PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    **SECTION_VARIABLES,
    "format": ("output_format",),
}
"""The placeholders each written section must hold (the Format section shows the canonical
format of the chosen protocol through ``{output_format}``)."""


def _escape_jinja(text: str) -> str:
    """Literal text made inert: an opening brace that would start a Jinja tag is printed."""
    return re.sub(r"\{(?=[{%#])", "{{ '{' }}", text)


def section_placeholder_problems(sections: Mapping[str, str]) -> list[tuple[str, str]]:
    """Missing or unknown ``{placeholders}`` in Meta-Agent sections, as ``(reason, detail)``."""
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name in SECTIONS:
        text = sections.get(name) or ""
        used = set(PLACEHOLDER.findall(text))
        seen |= used
        problems += [("missing_variable", f"{var} (in section {name})")
                     for var in SECTION_PLACEHOLDERS.get(name, ()) if var not in used]
        problems += [("unknown_variable", f"{var} (in section {name})")
                     for var in sorted(used - set(PLACEHOLDERS))]
    problems += [("missing_variable", var) for var in REQUIRED_ANYWHERE if var not in seen]
    return problems


def compose_template(sections: Mapping[str, str]) -> str:
    """The Jinja2 source of a planner template from its six written sections.

    Known ``{placeholders}`` become variables; everything else is literal text, escaped so that a
    section cannot inject Jinja code. Check :func:`section_placeholder_problems` first.
    """
    parts = []
    for name in SECTIONS:
        text = (sections.get(name) or "").strip()
        pieces, last = [], 0
        for match in PLACEHOLDER.finditer(text):
            var = match.group(1)
            if var not in _PLACEHOLDER_EXPR:
                continue
            pieces.append(_escape_jinja(text[last : match.start()]))
            pieces.append("{{ " + _PLACEHOLDER_EXPR[var] + " }}")
            last = match.end()
        pieces.append(_escape_jinja(text[last:]))
        parts.append(f"{{% block {name} %}}\n{''.join(pieces)}\n{{% endblock %}}")
    return "\n\n".join(parts) + "\n"
