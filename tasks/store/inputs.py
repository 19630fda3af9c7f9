"""A stage's version-id parameters, derived from what it declares it reads of the run config.

``version_params(config, READS, resolved)`` is the part of the config that ``READS`` names (the
same part the stage's deployment form shows), nesting kept, with each field entered as its
marker in ``agentune.config.inputs`` says: by value, by its files' contents, through the parents
(store references), not at all (where and how fast), or as what the stage resolved it to. The
store hashes it with the parents and the code version into the version id
(``ArtifactStore.version_id``), so a setting a stage reads cannot be left out of its id.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from agentune.config import RunConfig
from agentune.config.inputs import ARTIFACT, FILE, RESOLVED, ROLE, UNTRACKED, VersionInput
from agentune.tasks.store.artifact_store import file_fingerprint

_LEFT_OUT = object()


def version_params(config: RunConfig, reads: Sequence[str],
                   resolved: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The version-id parameters of a stage that reads ``reads`` (dotted run-config paths),
    plus the seed every stage reads. ``resolved`` maps the dotted path of each field marked
    ``RESOLVED`` that the stage reads to what the stage resolved it to; a missing or a stray
    entry is an error, so the declaration and the stage cannot drift apart."""
    given = dict(resolved or {})
    used: set[str] = set()
    values = config.model_dump(mode="json")
    out: dict[str, Any] = {"seed": config.seed}
    for path in reads:
        field, value = _locate(config, values, path)
        entered = _enter(config, field, value, path, given, used)
        if entered is _LEFT_OUT:
            continue
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = entered
    stray = set(given) - used
    if stray:
        raise ValueError(f"resolved {sorted(stray)}: not a field marked RESOLVED among what the "
                         f"stage reads ({', '.join(reads)})")
    return out


def _locate(config: RunConfig, values: Mapping[str, Any], path: str) -> tuple[FieldInfo, Any]:
    """The field at dotted ``path`` and its JSON value."""
    model: type[BaseModel] | None = type(config)
    field: FieldInfo | None = None
    value: Any = values
    for part in path.split("."):
        if model is None or part not in model.model_fields:
            raise KeyError(f"{path}: not a run-config field")
        field = model.model_fields[part]
        value = value[part]
        model = _model_in(field.annotation)
    assert field is not None
    return field, value


def _enter(config: RunConfig, field: FieldInfo, value: Any, path: str,
           resolved: Mapping[str, Any], used: set[str]) -> Any:
    marker = _marker(field)
    if marker in (UNTRACKED, ARTIFACT):
        return _LEFT_OUT
    if marker is FILE:
        return _contents(value)
    if marker is ROLE:
        role = path.rsplit(".", 1)[-1]
        return config.llm.identities(role)[role]  # type: ignore[arg-type]
    if marker is RESOLVED:
        if path not in resolved:
            raise ValueError(f"{path} is read and marked RESOLVED, but the stage did not resolve "
                             "it (pass what it resolves to under that path)")
        used.add(path)
        return resolved[path]
    model = _model_in(field.annotation)
    if model is None or value is None:
        return value
    if isinstance(value, list):
        return [_enter_model(config, model, item, f"{path}.{i}", resolved, used)
                for i, item in enumerate(value)]
    return _enter_model(config, model, value, path, resolved, used)


def _enter_model(config: RunConfig, model: type[BaseModel], value: Mapping[str, Any], path: str,
                 resolved: Mapping[str, Any], used: set[str]) -> dict[str, Any]:
    out = {}
    for name, item in value.items():
        entered = _enter(config, model.model_fields[name], item, f"{path}.{name}", resolved, used)
        if entered is not _LEFT_OUT:
            out[name] = entered
    return out


def _marker(field: FieldInfo) -> VersionInput | None:
    return next((m for m in field.metadata if isinstance(m, VersionInput)), None)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The config model a field holds: itself, or inside ``X | None`` or ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is dict:
        return None  # a mapping of names to settings enters by value
    return next((m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None),
                None)


def _contents(value: Any) -> Any:
    """A FILE field's value as its contents' sha256 (a list item by item); a path that is not
    there as None (an optional folder); None as None."""
    if isinstance(value, list):
        return [_contents(v) for v in value]
    if value is None or not Path(value).exists():
        return None
    return file_fingerprint(value)
