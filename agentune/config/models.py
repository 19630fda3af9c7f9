"""The ``models:`` registry: each model a run uses, named once, and the places that refer to it.

A run names a model in several places: the LLM roles (``llm.teacher`` / ``judge`` / ``student``),
the model train fine-tunes (``train.base_model``) and whose tokenizer audits the data
(``dataset.student_model``), the student rolled out for preference pairs
(``preferences.student``) and the models evaluate compares (``evaluate.models``). Each of those
places takes a registry name in its ``model`` field; the entry's settings (where the weights come
from, how they are asked, the chat template and tool format) are then filled in there, so a model
used as teacher and evaluated as baseline is described once::

    models:
      coder: {source: qwen2.5-coder-0.5b, tool_format: chat_template}
    llm:
      teacher: {model: coder, batch_size: 8}
    evaluate:
      models: [{label: teacher, model: coder}]

The student is named once: ``train.base_model`` and ``dataset.student_model``, where a config
leaves them out, are ``llm.student``'s model (its weights, for a student asked through an endpoint).
A place that names an entry and also sets one of the entry's settings to another value is an error
naming both: the model is described in one place. The old way (a role's provider, model and
endpoint written inline) still works and names no entry.

Resolution runs on the raw settings before validation (``resolve``), and records what it filled in
(``Reference``), so ``RunConfig.merged`` and the pipeline deployment can give the settings back
as declared (``declare``): an override of ``models.coder.source`` or of ``llm.student`` reaches
every place that named it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from agentune.config.strict import Strict

RESERVED = frozenset({"embedded", "model"})
"""Words that are model sources themselves (the bundled model, the store's trained models)."""


class ModelEntry(Strict):
    """One model of the run: where its weights come from and how it is asked."""

    source: str = Field(
        min_length=1, description="local: `embedded`, a bundled model's name (e.g. "
        "`qwen2.5-coder-0.5b`), a transformers folder, or a store version of a trained model "
        "(`model@latest`, `model@VERSION`); openai: the model name the endpoint serves.")
    provider: Literal["local", "openai"] = Field(
        "local", description="local: in-process (transformers or the vLLM engine); openai: "
        "any OpenAI-compatible endpoint (OpenAI, a vLLM server ...).")
    base_url: str | None = Field(None, description="openai: the endpoint's base URL.")
    api_key_env: str | None = Field(
        None, description="openai: name of the environment variable holding the key (null: "
        "OPENAI_API_KEY). The key itself is never written anywhere.")
    weights: str | None = Field(
        None, description="openai: the local folder (or bundled name) of the weights the "
        "endpoint serves: what train fine-tunes and build_dataset audits with when this model is "
        "the student, and evaluate's tokenizer for the memory cut.")
    chat_template: str | None = Field(
        None, description="A Jinja chat template file to render prompts with instead of the "
        "model's own (the LLM roles and the student rollouts; null: the model's own).")
    tool_format: Literal["grammar", "chat_template"] | None = Field(
        None, description="How tools are offered to a local LLM role (null: the role's default, "
        "grammar); see llm.<role>.tool_format.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        None, description="local: weights dtype (null: auto).")
    device: str | None = Field(None, description="local: torch device (null: auto).")

    def local_weights(self) -> str | None:
        """What a local process loads for this model: its source, or an endpoint's weights."""
        return self.source if self.provider == "local" else self.weights


# Where a model is named: the place's dotted path and, per entry setting, the place's field.
_ROLE = {"provider": "provider", "source": "model", "base_url": "base_url",
         "api_key_env": "api_key_env", "chat_template": "chat_template",
         "tool_format": "tool_format", "dtype": "dtype", "device": "device"}
_ROLLOUTS = {k: v for k, v in _ROLE.items() if k != "tool_format"}
_EVALUATED = {"provider": "provider", "source": "model", "base_url": "base_url",
              "api_key_env": "api_key_env", "weights": "tokenizer", "dtype": "dtype",
              "device": "device"}
PLACES: dict[str, dict[str, str]] = {
    "llm.teacher": _ROLE, "llm.judge": _ROLE, "llm.student": _ROLE,
    "preferences.student": _ROLLOUTS, "evaluate.models[]": _EVALUATED}
STUDENT_WEIGHTS = ("train.base_model", "dataset.student_model")
"""The fields that default to the student's weights."""


@dataclass(frozen=True)
class Reference:
    """A place resolution filled in: ``path`` (keys and list indices) of a mapping, the entry it
    named (``name``; None: a default taken from the student) and the keys it wrote there, with
    their values."""

    path: tuple[str | int, ...]
    name: str | None
    filled: tuple[tuple[str, Any], ...]

    def holds(self, place: dict[str, Any]) -> bool:
        """Whether ``place`` still holds what resolution wrote (a config copied with another
        value there, ``model_copy(update=...)``, no longer names the entry)."""
        return all(place.get(key) == value for key, value in self.filled)


def resolve(data: dict[str, Any]) -> tuple[dict[str, Any], list[Reference]]:
    """``data`` (a run config's raw settings) with every registry name replaced by its entry's
    settings and the student's weights filled in where they were left out; ``data`` itself is
    not changed. Raises ValueError naming the place and the entry on a conflict."""
    registry = data.get("models") or {}
    if not isinstance(registry, dict):
        return data, []  # not a mapping: validation names the field
    entries = {}
    for name, raw in registry.items():
        if not isinstance(name, str) or name in RESERVED:
            raise ValueError(f"models: {name!r} cannot name a model: {sorted(RESERVED)} are "
                             "model sources themselves")
        entries[name] = raw if isinstance(raw, ModelEntry) else ModelEntry.model_validate(raw)
    out = copy.deepcopy(data)
    references: list[Reference] = []
    student_entry = None
    for path, fields in _places(out):
        place = _at(out, path)
        name = place.get("model")
        if isinstance(name, str) and name in entries:
            filled = _fill(place, entries[name], fields, _dotted(path), name)
            references.append(Reference(path, name, filled))
            if path == ("llm", "student"):
                student_entry = entries[name]
    student = _student_weights(out, student_entry)
    if student is not None:
        for dotted in STUDENT_WEIGHTS:
            section, key = dotted.split(".")
            settings = out.setdefault(section, {})
            if isinstance(settings, dict) and key not in settings:
                settings[key] = student
                references.append(Reference((section,), None, ((key, student),)))
    return out, references


def declare(dumped: dict[str, Any], set_only: dict[str, Any],
            references: list[Reference]) -> dict[str, Any]:
    """``dumped`` (a resolved config's settings) as it was declared: each place that named an
    entry names it again, with only the settings it set itself (from ``set_only``, the same
    config dumped without defaults) and the entry's provider, and the student's weights that
    were taken as a default are left out again."""
    out = copy.deepcopy(dumped)
    for ref in references:
        resolved = _find(out, ref.path)
        if resolved is None or not ref.holds(resolved):
            continue
        filled = {key for key, _ in ref.filled}
        if ref.name is None:
            for key in filled:
                resolved.pop(key)
            continue
        place = {k: v for k, v in (_find(set_only, ref.path) or {}).items() if k not in filled}
        place["model"] = ref.name
        if "provider" in filled:  # kept: a form shows a role's fields by its provider
            place["provider"] = resolved["provider"]
        *parents, last = ref.path
        _at(out, tuple(parents))[last] = place
    return out


def _fill(place: dict[str, Any], entry: ModelEntry, fields: dict[str, str], where: str,
          name: str) -> tuple[tuple[str, Any], ...]:
    filled = []
    for setting, key in fields.items():
        value = getattr(entry, setting)
        if value is None:
            continue
        if setting == "source":
            place["model"] = value
            filled.append(("model", value))
            continue
        if key in place and place[key] != value:
            raise ValueError(
                f"{where}.{key} is {place[key]!r} but {where} names models.{name}, whose "
                f"{setting} is {value!r}: describe the model once, in models.{name}")
        place[key] = value  # the entry's (a place that repeats it says nothing of its own)
        filled.append((key, value))
    return tuple(filled)


def _student_weights(data: dict[str, Any], entry: ModelEntry | None) -> str | None:
    """The student's local weights (``entry``: the registry entry ``llm.student`` names), or
    None where they cannot be known (a student asked through an endpoint by its served name
    alone: the fields keep their own defaults)."""
    if entry is not None:
        return entry.local_weights()
    llm = data.get("llm")
    role = llm.get("student") if isinstance(llm, dict) else None
    role = role if isinstance(role, dict) else {}
    if role.get("provider", "local") == "local":
        model = role.get("model", "embedded")
        return model if isinstance(model, str) else None
    return None


def _places(data: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], dict[str, str]]]:
    for dotted, fields in PLACES.items():
        section, key = dotted.split(".")
        settings = data.get(section)
        if not isinstance(settings, dict):
            continue
        if key.endswith("[]"):
            items = settings.get(key[:-2])
            if isinstance(items, list):
                for i, item in enumerate(items):
                    if isinstance(item, dict):
                        yield (section, key[:-2], i), fields
        elif isinstance(settings.get(key), dict):
            yield (section, key), fields


def _at(data: Any, path: tuple[str | int, ...]) -> dict[str, Any]:
    for part in path:
        data = data[part]
    return data


def _find(data: Any, path: tuple[str | int, ...]) -> dict[str, Any] | None:
    """The mapping at ``path``, or None where the settings no longer have it."""
    try:
        found = _at(data, path)
    except (KeyError, IndexError, TypeError):
        return None
    return found if isinstance(found, dict) else None


def _dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
