"""The tool catalog: OpenAI function tools from JSON, JSONL or YAML, validated one by one.

Each entry is ``{"type": "function", "function": {"name", "description", "parameters"}}``;
``parameters`` must be a valid JSON Schema (the draft its ``$schema`` names, else 2020-12) of
type ``object``. A missing ``parameters`` means a tool without arguments. Errors name the file,
the entry (``tool N``, 0-based) and the field path, e.g. ``function.parameters.properties.days``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, SchemaError
from jsonschema.validators import validator_for

from agentune.tasks.common.input_files import InputError, decode_utf8

# The OpenAI API's rule for function names.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        """The tool as sent in a chat request's ``tools`` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def to_row(self) -> dict[str, Any]:
        """One row of the published ``tools`` table (``parameters`` kept as a JSON object)."""
        return {
            "id": self.name,
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }


def _read_entries(path: Path) -> list[tuple[str, Any]]:
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    suffix = path.suffix.lower()
    text = decode_utf8(path, path.read_bytes())
    if suffix == ".jsonl":
        entries = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(
                        path, f"line {lineno}", None, f"not valid JSON: {exc.msg}"
                    ) from None
        data: Any = entries
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                path, f"line {exc.lineno}", None, f"not valid JSON: {exc.msg}"
            ) from None
    elif suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark is not None else None
            raise InputError(path, where, None, f"not valid YAML: {exc}") from None
    else:
        raise InputError(
            path, None, None, f"unsupported format {suffix!r}: use .json, .jsonl, .yaml or .yml"
        )
    if isinstance(data, Mapping) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise InputError(
            path, None, None, "the catalog must be a list of tools (or {tools: [...]})"
        )
    return [(f"tool {i}", entry) for i, entry in enumerate(data)]


def _schema_path(parts: Iterable[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def validate_tool(
    entry: Any, *, source: str | Path = "<catalog>", where: str = "tool 0"
) -> ToolSpec:
    """One catalog entry checked and turned into a :class:`ToolSpec`."""

    def fail(field: str | None, problem: str) -> InputError:
        return InputError(source, where, field, problem)

    if not isinstance(entry, Mapping):
        raise fail(None, f"a tool must be an object, got {type(entry).__name__}")
    fn = entry.get("function")
    if entry.get("type") != "function":
        named = f" (tool {fn['name']!r})" if isinstance(fn, Mapping) and "name" in fn else ""
        raise fail("type", f"must be 'function', got {entry.get('type')!r}{named}")
    if not isinstance(fn, Mapping):
        raise fail("function", "missing or not an object")
    name = fn.get("name")
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise fail("function.name", f"must be 1-64 letters, digits, _ or -, got {name!r}")
    description = fn.get("description")
    if not isinstance(description, str) or not description.strip():
        raise fail("function.description", f"missing or empty (tool {name!r})")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, Mapping):
        raise fail(
            "function.parameters", f"must be a JSON Schema object, got {type(params).__name__}"
        )
    params = dict(params)
    try:
        cls = validator_for(params, default=Draft202012Validator)
        cls.check_schema(params)
    except SchemaError as exc:
        raise fail(
            "function.parameters" + _schema_path(exc.path),
            f"not a valid JSON Schema (tool {name!r}): {exc.message}",
        ) from None
    if params.get("type") != "object":
        raise fail("function.parameters.type", f"must be 'object', got {params.get('type')!r}")
    props = params.get("properties", {})
    for req in params.get("required", []):
        if req not in props:
            raise fail(
                "function.parameters.required",
                f"{req!r} is required but not among the properties of tool {name!r}",
            )
    return ToolSpec(name=name, description=" ".join(description.split()), parameters=params)


def validate_tool_catalog(
    entries: Sequence[tuple[str, Any]], *, source: str | Path = "<catalog>"
) -> list[ToolSpec]:
    """All entries validated; duplicate names are an error naming both entries."""
    tools: list[ToolSpec] = []
    first_seen: dict[str, str] = {}
    for where, entry in entries:
        tool = validate_tool(entry, source=source, where=where)
        if tool.name in first_seen:
            raise InputError(
                source,
                where,
                "function.name",
                f"duplicate tool name {tool.name!r} (first at {first_seen[tool.name]})",
            )
        first_seen[tool.name] = where
        tools.append(tool)
    if not tools:
        raise InputError(source, None, None, "the catalog has no tools")
    return tools


def load_tool_catalog(path: str | Path) -> list[ToolSpec]:
    """Read and validate a tool catalog file (JSON list, JSONL or YAML list)."""
    path = Path(path)
    return validate_tool_catalog(_read_entries(path), source=path)
