"""The tool catalog's environments: which environment answers each tool, and with what state.

The tool catalog file (YAML or JSON) holds, beside its ``tools`` (OpenAI function schemas), a list
under ``environments``; each entry one of three sources::

    environments:
      - class: environments/calendar.py:Calendar      # Python: file (relative to this file)
      - class: my_company.tools:CrmWorld               #   or an importable module
        name: crm                                      # default: the class's ``name``
        reserved: true                                 # evaluation only, never training data
        recipes: environments/crm_recipes.py:RECIPES   # optional task recipes (blueprints.py)
      - name: mail                                     # simulated: the teacher plays the tools
        description: {en: "E-mail and contacts", zh: "邮件与联系人"}
        simulated:
          tools: [send_email, contacts_lookup]         # from the tool catalog
          state: {contacts: [...]}                     # the world's default state
          output_schemas: {contacts_lookup: {...}}     # optional, per tool
          examples: {contacts_lookup: [{arguments: {...}, response: {...}}]}
      - name: web                                      # stateless built-in / HTTP implementations
        implementations: {web_search: document_search, run_python: sandbox_fusion}
      - class: environments/utilities.py:Utilities
        shared: true                                   # offered beside every environment's tools

A catalog tool that no environment binds is answered by the built-in implementation the tools
settings name for it (``environments.tools.implementations``; environment ``builtin``), else simulated without
declared state (environment ``unbound``; the run summary lists these). Errors name the file, the
entry and the field.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from agentune.config.environments import EnvironmentsConfig
from agentune.config.tools import Implementation
from agentune.tasks.common.input_files import InputError, decode_utf8
from agentune.tasks.environments.python_source import (
    PythonEnvironmentClass,
    inspect_class,
    load_class,
    load_object,
    source_file,
)
from agentune.tasks.environments.simulated import SimulatedSpec
from agentune.tasks.store.artifact_store import file_fingerprint
from agentune.tasks.tools.catalog import TOOL_NAME_RE, ToolSpec, load_tool_catalog

SourceKind = Literal["python", "simulated", "implementations"]
UNBOUND = "unbound"
"""The simulated environment of the catalog tools nothing binds."""
BUILTIN = "builtin"
"""The stateless environment of the catalog tools bound only by ``environments.tools.implementations``."""


@dataclass(frozen=True)
class EnvironmentSpec:
    """One environment: its tools and how they are answered."""

    name: str
    kind: SourceKind
    tools: tuple[ToolSpec, ...]
    description: Mapping[str, str] = field(default_factory=dict)
    reserved: bool = False
    """Kept for evaluation: no training data is made in it (transfer to unseen tools)."""
    shared: bool = False
    """Its tools are offered beside every other environment's (calculator, dates ...)."""
    generated: tuple[str, ...] = ()
    writes: frozenset[str] = frozenset()
    python: PythonEnvironmentClass | None = None
    simulated: SimulatedSpec | None = None
    implementations: Mapping[str, Implementation] = field(default_factory=dict)
    recipes: tuple[Any, ...] = ()
    """Its task recipes (:class:`~agentune.tasks.environments.blueprints.Recipe`), if any."""
    recipes_file: str | None = None
    """The file the recipes were loaded from (for the version ids of what they make)."""

    def world_sampler(self) -> Any:
        """The class's ``sample_state(rng)`` (a whole new world), or None: default state."""
        sampler = getattr(self.python.cls, "sample_state", None) if self.python else None
        return sampler if callable(sampler) else None

    @property
    def stateful(self) -> bool:
        return self.kind != "implementations"

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


@dataclass(frozen=True)
class EnvironmentCatalog:
    """Every environment, and which one owns each tool."""

    environments: Mapping[str, EnvironmentSpec]
    source: str = "<environments>"

    def owner(self, tool: str) -> EnvironmentSpec:
        for spec in self.environments.values():
            if tool in spec.tool_names():
                return spec
        raise KeyError(f"no environment has a tool {tool!r}")

    def tools(self) -> list[ToolSpec]:
        return [t for spec in self.environments.values() for t in spec.tools]

    def offered(self, name: str) -> list[EnvironmentSpec]:
        """The environments a session in ``name`` opens: it, and the shared ones."""
        if name not in self.environments:
            raise KeyError(f"unknown environment {name!r}; known: {sorted(self.environments)}")
        main = self.environments[name]
        return [main] + [s for s in self.environments.values() if s.shared and s is not main]

    def offered_tools(self, name: str) -> list[ToolSpec]:
        return [t for spec in self.offered(name) for t in spec.tools]

    def unbound_tools(self) -> list[str]:
        spec = self.environments.get(UNBOUND)
        return spec.tool_names() if spec else []

    def training_tools(self) -> list[ToolSpec]:
        """Every tool except those of reserved environments (no training data uses those)."""
        return [t for spec in self.environments.values() if not spec.reserved for t in spec.tools]

    def training(self) -> list[str]:
        """Environments training data may come from: not reserved, not the implicit ones."""
        return [n for n, s in self.environments.items()
                if not s.reserved and n not in (UNBOUND, BUILTIN)]


# --------------------------------------------------------------------------- reading the file


def read_document(path: Path) -> Any:
    """A JSON or YAML file's content; errors name the file and the line."""
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    text = decode_utf8(path, path.read_bytes())
    try:
        return yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise InputError(path, where, None, f"not valid YAML or JSON: {exc}") from None


def _description(value: Any, path: Path, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        return {"en": value}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(path, where, "description", "must be text or {language: text}")
    return dict(value)


def _tools_of(names: Any, catalog: Mapping[str, ToolSpec], path: Path, where: str,
              field_name: str) -> tuple[ToolSpec, ...]:
    if not isinstance(names, list) or not names:
        raise InputError(path, where, field_name, "must be a non-empty list of tool names")
    tools = []
    for i, name in enumerate(names):
        if name not in catalog:
            raise InputError(path, where, f"{field_name}[{i}]",
                             f"tool {name!r} is not in the tool catalog")
        tools.append(catalog[name])
    return tuple(tools)


def _simulated(entry: Mapping[str, Any], catalog: Mapping[str, ToolSpec], path: Path,
               where: str) -> SimulatedSpec:
    allowed = {"tools", "state", "output_schemas", "examples"}
    if not isinstance(entry, Mapping):
        raise InputError(path, where, "simulated", "must be a mapping")
    unknown = set(entry) - allowed
    if unknown:
        raise InputError(path, where, f"simulated.{sorted(unknown)[0]}",
                         f"unknown key; use {sorted(allowed)}")
    tools = _tools_of(entry.get("tools"), catalog, path, where, "simulated.tools")
    names = {t.name for t in tools}
    state = entry.get("state") or {}
    if not isinstance(state, Mapping):
        raise InputError(path, where, "simulated.state", "must be a JSON object")
    for key in ("output_schemas", "examples"):
        for tool in entry.get(key) or {}:
            if tool not in names:
                raise InputError(path, where, f"simulated.{key}.{tool}",
                                 "not one of this environment's tools")
    return SimulatedSpec(tools, dict(state), dict(entry.get("output_schemas") or {}),
                         {k: list(v) for k, v in (entry.get("examples") or {}).items()})


def _entry(raw: Any, catalog: Mapping[str, ToolSpec], path: Path, where: str) -> EnvironmentSpec:
    if not isinstance(raw, Mapping):
        raise InputError(path, where, None, "an environment must be a mapping")
    sources = [k for k in ("class", "simulated", "implementations") if k in raw]
    if len(sources) != 1:
        raise InputError(path, where, None,
                         "give exactly one of class, simulated, implementations")
    known = {"name", "description", "reserved", "shared", "recipes", *sources}
    unknown = set(raw) - known
    if unknown:
        raise InputError(path, where, sorted(unknown)[0], f"unknown key; use {sorted(known)}")
    flags = {k: raw.get(k, False) for k in ("reserved", "shared")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise InputError(path, where, key, "must be true or false")
    description = _description(raw.get("description"), path, where)
    spec = _source(raw, catalog, path, where, description, flags)
    if "recipes" not in raw:
        return spec
    recipes, recipes_file = _recipes(raw["recipes"], path, where)
    return replace(spec, recipes=recipes, recipes_file=recipes_file)


def _recipes(ref: Any, path: Path, where: str) -> tuple[tuple[Any, ...], str]:
    """``file.py:NAME`` or ``module:NAME``: a list of recipes (each is checked where scenarios
    are generated from it: see ``build_scenarios.generation.check_recipe_list``)."""
    if not isinstance(ref, str):
        raise InputError(path, where, "recipes", "write path/file.py:NAME or module:NAME")
    found = load_object(ref, base_dir=path.parent, file=path, where=where, field="recipes")
    if not isinstance(found, list | tuple) or not found:
        raise InputError(path, where, "recipes", f"{ref!r}: must be a non-empty list of Recipe")
    return tuple(found), source_file(ref, base_dir=path.parent)


def _source(raw: Mapping[str, Any], catalog: Mapping[str, ToolSpec], path: Path, where: str,
            description: dict[str, str], flags: dict[str, Any]) -> EnvironmentSpec:
    if "class" in raw:
        cls = load_class(str(raw["class"]), base_dir=path.parent, file=path, where=where)
        loaded = inspect_class(cls, source=str(raw["class"]))
        name = raw.get("name") or cls.name
        return EnvironmentSpec(name=name, kind="python", tools=loaded.tools,
                               description=description or dict(cls.description),
                               generated=loaded.generated, writes=loaded.writes, python=loaded,
                               **flags)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(path, where, "name", "required for simulated and implementations")
    if "simulated" in raw:
        sim = _simulated(raw["simulated"], catalog, path, where)
        # A simulated tool may change the world: every one counts as writing.
        return EnvironmentSpec(name=name, kind="simulated", tools=sim.tools,
                               description=description, simulated=sim,
                               writes=frozenset(t.name for t in sim.tools), **flags)
    bound = raw["implementations"]
    if not isinstance(bound, Mapping):
        raise InputError(path, where, "implementations", "must map tool names to implementations")
    choices = set(get_args(Implementation))
    for tool, impl in bound.items():
        if impl not in choices:
            raise InputError(path, where, f"implementations.{tool}",
                             f"{impl!r} is not one of {sorted(choices)}")
    tools = _tools_of(list(bound), catalog, path, where, "implementations")
    return EnvironmentSpec(name=name, kind="implementations", tools=tools,
                           description=description, implementations=dict(bound), **flags)


def load_environments(path: str | Path, *,
                      implementations: Mapping[str, Implementation] | None = None,
                      simulate_unbound: bool = True) -> EnvironmentCatalog:
    """The environments of a tool catalog file, checked against its tools."""
    path = Path(path)
    data = read_document(path)
    entries = (data.get("environments") if isinstance(data, Mapping) else None) or []
    if not isinstance(entries, list):
        raise InputError(path, None, "environments", "must be a list of environments")
    # A catalog of environments alone needs no `tools` list.
    catalog = {t.name: t for t in load_tool_catalog(path)} if not entries or (
        isinstance(data, Mapping) and data.get("tools")) else {}
    specs: dict[str, EnvironmentSpec] = {}
    owner: dict[str, str] = {}
    for i, raw in enumerate(entries):
        where = f"environment {i}"
        spec = _entry(raw, catalog, path, where)
        if not TOOL_NAME_RE.match(spec.name) or spec.name in (UNBOUND, BUILTIN):
            raise InputError(path, where, "name", f"{spec.name!r}: use letters, digits, _ or -"
                             f" (and not {UNBOUND!r} or {BUILTIN!r})")
        if spec.name in specs:
            raise InputError(path, where, "name", f"duplicate environment {spec.name!r}")
        for tool in spec.tool_names():
            if tool in owner:
                raise InputError(path, where, "tools", f"tool {tool!r} is already in "
                                 f"environment {owner[tool]!r}")
            if spec.kind == "python" and tool in catalog:
                raise InputError(path, where, "class", f"tool {tool!r} is also in the catalog's "
                                 "tools: a Python environment defines its own tools")
            owner[tool] = spec.name
        specs[spec.name] = spec
    rest = [t for name, t in catalog.items() if name not in owner]
    configured = dict(implementations or {})
    builtin = tuple(t for t in rest if t.name in configured)
    if builtin:
        specs[BUILTIN] = EnvironmentSpec(
            name=BUILTIN, kind="implementations", tools=builtin,
            implementations={t.name: configured[t.name] for t in builtin},
            description={"en": "catalog tools bound by tools.implementations"})
    unbound = tuple(t for t in rest if t.name not in configured)
    if unbound and simulate_unbound:
        specs[UNBOUND] = EnvironmentSpec(
            name=UNBOUND, kind="simulated", tools=unbound, simulated=SimulatedSpec(unbound),
            writes=frozenset(t.name for t in unbound),
            description={"en": "catalog tools nothing binds, played by the teacher"})
    return EnvironmentCatalog(specs, str(path))


def configured_environments(settings: EnvironmentsConfig) -> EnvironmentCatalog:
    """The environments of a run config's ``environments`` section: its catalog, the tools
    ``environments.tools.implementations`` binds answered by those implementations."""
    return load_environments(settings.catalog, implementations=settings.tools.implementations)


def fingerprint(catalog: EnvironmentCatalog) -> dict[str, str]:
    """sha256 of the catalog file, of every Python environment's source and of every recipes
    file: what decides the tools' behaviour and the scenarios generated in them, for the version
    ids of the stages that read the catalog (``environments.catalog`` is resolved to this)."""
    files = {"catalog": file_fingerprint(catalog.source)}
    for spec in catalog.environments.values():
        if spec.python is not None:
            files[spec.name] = file_fingerprint(inspect.getsourcefile(spec.python.cls) or "")
        if spec.recipes_file:
            files[f"{spec.name}:recipes"] = file_fingerprint(spec.recipes_file)
    return files


def describe(catalog: EnvironmentCatalog) -> list[dict[str, Any]]:
    """One summary row per environment (for `agentune env check` and run summaries)."""
    return [{"environment": s.name, "source": s.kind, "tools": len(s.tools),
             "writes": len(s.writes), "reserved": s.reserved, "shared": s.shared}
            for s in catalog.environments.values()]
