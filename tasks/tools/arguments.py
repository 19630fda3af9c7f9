"""Tool-call arguments checked against the tool's JSON schema, before anything runs.

Formats (``date``, ``date-time``, ``email`` ...) are checked too, so ``"2025-3-1"`` for a
``format: date`` field is an error the agent sees, not a crash inside the tool. Each problem names
the field (a dotted path such as ``passengers[0].name``, or the property that is missing or not
allowed) so the agent can repair exactly that.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from jsonschema.validators import validator_for

from agentune.tasks.tools.catalog import ToolSpec


@dataclass(frozen=True)
class ArgumentProblem:
    field: str  # dotted path of the offending field; "" for the arguments object itself
    message: str

    def __str__(self) -> str:
        return f"field {self.field!r}: {self.message}" if self.field else self.message


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=FormatChecker())


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _problems_of(error: ValidationError) -> list[ArgumentProblem]:
    where = _path(error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, Mapping):
        missing = [name for name in error.validator_value if name not in instance]
        return [
            ArgumentProblem(_path([*error.absolute_path, name]), "is required but missing")
            for name in missing
        ]
    if error.validator == "additionalProperties" and isinstance(instance, Mapping):
        allowed = set(error.schema.get("properties", {}))
        extra = [name for name in instance if name not in allowed]
        if extra:
            known = ", ".join(sorted(allowed)) or "none"
            return [
                ArgumentProblem(
                    _path([*error.absolute_path, name]),
                    f"is not a parameter of this tool (parameters: {known})",
                )
                for name in extra
            ]
    return [ArgumentProblem(where, error.message)]


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> list[ArgumentProblem]:
    """Every problem with ``arguments`` under ``schema`` (empty when they are valid)."""
    if not isinstance(arguments, Mapping):
        return [
            ArgumentProblem("", f"arguments must be a JSON object, got {_json_type(arguments)}")
        ]
    validator = _validator(json.dumps(schema, sort_keys=True))
    problems: list[ArgumentProblem] = []
    for error in sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path)):
        problems.extend(_problems_of(error))
    # jsonschema reports each missing required property as its own error, and each one names
    # them all: keep every problem once, in order.
    return list(dict.fromkeys(problems))


def with_defaults(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with the schema's top-level defaults filled in for absent properties, so a
    call that spells out a default and one that leaves it out are the same call."""
    filled = dict(arguments)
    for name, prop in schema.get("properties", {}).items():
        if name not in filled and isinstance(prop, Mapping) and "default" in prop:
            filled[name] = copy.deepcopy(prop["default"])
    return filled


def canonical_json(value: Any) -> str:
    """A stable text form (sorted keys, no spaces) for hashing and cache keys."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def call_digest(salt: str | int, tool: str, arguments: Mapping[str, Any]) -> bytes:
    """A stable hash of one call: the same tool and arguments give the same bytes in any process."""
    blob = f"{salt}\x00{tool}\x00{canonical_json(arguments)}"
    return hashlib.sha256(blob.encode("utf-8")).digest()


def _json_type(value: Any) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "boolean"
        case int() | float():
            return "number"
        case str():
            return "string"
        case list() | tuple():
            return "array"
    return type(value).__name__


# --------------------------------------------------------------------------- constrained answers


def bounded_schema(schema: Any, max_chars: int) -> Any:
    """``schema`` with a ``maxLength`` on every free string, so constrained decoding ends.

    A string with a ``format`` (date, email ...) is bounded by its format already, and xgrammar
    does not combine a format with a length bound (it warns and drops one of them)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: bounded_schema(prop, max_chars)
                             for name, prop in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = bounded_schema(out[key], max_chars)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [bounded_schema(item, max_chars) for item in out[key]]
    kind = out.get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    if is_string and not any(k in out for k in ("enum", "const", "maxLength", "format")):
        out["maxLength"] = max_chars
    return out


def argument_schema(tool: ToolSpec, max_chars: int) -> dict[str, Any]:
    """A tool's argument schema for a constrained answer. A schema with references cannot be
    nested in the step schema as is; its arguments are then any object (validated afterwards)."""
    text = json.dumps(tool.parameters)
    if "$ref" in text or "$defs" in tool.parameters or "definitions" in tool.parameters:
        return {"type": "object"}
    return bounded_schema(copy.deepcopy(tool.parameters), max_chars)
