"""What each deployment's "Custom run" form shows: its parameters and their JSON schema.

The pipeline deployment keeps the whole run config. A stage deployment shows what the stage reads
of it, as the stage declares it beside its config section (``READS`` in
``agentune.config.<stage>``: whole sections, or the fields of a section it reads in part, and an
``llm.<role>`` for each LLM role it calls; tests/orchestration check each declaration against the
stage's code), and the shared settings: run name, seed, store and the gateway settings. A stage run
from its form gets the model defaults for everything else, which the stage never reads. The YAML
run config and the CLI are unchanged: both still pass the whole config.

The schema is the one Prefect derives from the flow signature (``config: RunConfig``), pruned to
those fields, with each field's limits (``ge``/``le``, lengths, item counts) and what an empty
optional field means appended to the description the form shows.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentune.config import (
    build_dataset,
    build_preferences,
    build_scenarios,
    build_templates,
    collect_queries,
    evaluate,
    synthesize,
    train,
    train_retriever,
)

# The settings every stage form shows besides its own.
SHARED: tuple[str, ...] = ("name", "seed", "store", "llm.cache", "llm.cache_dir", "llm.budget",
                           "llm.global_concurrency_limit")

# Flow name -> the run-config fields (dotted paths) its form shows, besides SHARED: what the
# stage reads, from its config module (named as the stage).
STAGE_FORMS: dict[str, tuple[str, ...]] = {
    stage.__name__.rsplit(".", 1)[1]: stage.READS
    for stage in (collect_queries, build_scenarios, build_templates, synthesize, build_dataset,
                  train, build_preferences, train_retriever, evaluate)
}


def form_paths(flow_name: str) -> tuple[str, ...] | None:
    """The dotted fields a deployment of ``flow_name`` shows; None: the whole config."""
    paths = STAGE_FORMS.get(flow_name)
    return None if paths is None else (*SHARED, *paths)


def _tree(paths: Iterable[str]) -> dict[str, Any]:
    """Dotted paths as a nested dict; a leaf (a whole field) is ``True``."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        *parents, last = path.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if child is True:
                break
            node = child
        else:
            node[last] = True
    return tree


def prune_values(values: Mapping[str, Any], paths: Sequence[str] | None) -> dict[str, Any]:
    """The part of a run config (as JSON) that ``paths`` name, nesting kept."""
    if paths is None:
        return copy.deepcopy(dict(values))

    def keep(node: Mapping[str, Any], tree: Mapping[str, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(node[k]) if sub is True else keep(node[k], sub)
                for k, sub in tree.items() if k in node}

    return keep(values, _tree(paths))


def _ref_name(node: Mapping[str, Any]) -> str | None:
    ref = node.get("$ref") or next((s["$ref"] for s in node.get("allOf", ()) if "$ref" in s), None)
    return ref.rsplit("/", 1)[1] if ref else None


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, Mapping):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"].rsplit("/", 1)[1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def prune_schema(schema: Mapping[str, Any], paths: Sequence[str] | None,
                 title: str | None = None, description: str | None = None) -> dict[str, Any]:
    """A Prefect parameter schema (``{"properties": {"config": {"$ref": ...}}, "definitions"}``)
    cut down to the fields ``paths`` name; a partly kept section becomes an inline object."""
    schema = copy.deepcopy(dict(schema))
    defs = schema.get("definitions") or schema.get("$defs") or {}
    if paths is not None:
        root_name = _ref_name(schema["properties"]["config"])
        if root_name is None:
            raise ValueError("the flow's `config` parameter has no model schema to prune")

        def cut(model: Mapping[str, Any], tree: Mapping[str, Any]) -> dict[str, Any]:
            props = {}
            for key, sub in tree.items():
                prop = model["properties"][key]
                if sub is not True:
                    inner = defs[_ref_name(prop)]
                    described = prop.get("description") or inner.get("description", "")
                    prop = {**{k: v for k, v in prop.items() if k not in ("$ref", "allOf")},
                            **{k: v for k, v in cut(inner, sub).items() if k != "title"},
                            "description": f"{described} (only the fields this stage reads)"}
                props[key] = prop
            # Fields the form leaves out stay allowed (checked by pydantic when the run starts),
            # so a whole run config still runs a stage deployment from the API.
            out = {k: v for k, v in model.items()
                   if k not in ("properties", "required", "additionalProperties")}
            out["properties"] = props
            required = [r for r in model.get("required", ()) if r in props]
            if required:
                out["required"] = required
            return out

        defs[root_name] = cut(defs[root_name], _tree(paths))
        if title:
            defs[root_name]["title"] = title
        if description:
            defs[root_name]["description"] = description
        used: set[str] = set()
        todo = list(_refs(schema["properties"]))
        while todo:
            name = todo.pop()
            if name not in used:
                used.add(name)
                todo.extend(_refs(defs[name]))
        for name in list(defs):
            if name not in used:
                del defs[name]
    _split_by_provider(schema, defs)
    for node in _objects(schema):
        for prop in node.get("properties", {}).values():
            _annotate(prop)
    return schema


def _split_by_provider(schema: dict[str, Any], defs: dict[str, Any]) -> None:
    """A model whose fields name their ``providers`` (an LLM role) becomes one form per provider
    wherever a field holds it: the form's provider choice then shows that provider's fields only.
    The choice sits in the field itself, not behind a ``$ref``: the Prefect UI offers a choice
    only there (it shows a referenced one as a JSON editor)."""
    split = {name: _provider_branches(model) for name, model in defs.items()}
    split = {name: branches for name, branches in split.items() if branches}
    for node in list(_objects(schema)):
        for key, prop in node.get("properties", {}).items():
            name = _ref_name(prop)
            if name in split:
                own = {k: v for k, v in prop.items() if k not in ("$ref", "allOf")}
                node["properties"][key] = {"description": defs[name].get("description", ""),
                                           **own, "anyOf": copy.deepcopy(split[name])}
    for name in split:
        del defs[name]


def _provider_branches(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One object schema per provider, the default provider first; [] for a model without
    provider-specific fields. A branch allows the other provider's fields (a whole role, as the
    YAML config gives it, still validates; pydantic checks them when the run starts)."""
    props = model.get("properties", {})
    if not any("providers" in p for p in props.values()) or "provider" not in props:
        return []
    choice = props["provider"]
    names = sorted(choice["enum"], key=lambda name: name != choice.get("default"))
    rest = {k: v for k, v in model.items()
            if k not in ("properties", "title", "description", "additionalProperties")}
    branches = []
    for name in names:
        kept = {key: {k: v for k, v in prop.items() if k != "providers"}
                for key, prop in props.items() if name in prop.get("providers", names)}
        kept["provider"] = {**kept["provider"], "enum": [name], "default": name}
        branches.append({**rest, "title": name, "properties": kept})
    return branches


def _objects(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


_LIMITS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"),
           ("exclusiveMaximum", "< {}"), ("minLength", "at least {} characters"),
           ("maxLength", "at most {} characters"), ("minItems", "at least {} items"),
           ("maxItems", "at most {} items"))


def _annotate(prop: dict[str, Any]) -> None:
    """Limits and the meaning of "empty" into the description (the form shows no other)."""
    branches = [prop, *prop.get("anyOf", ())]
    limits = [text.format(b[key]).replace(" 1 characters", " 1 character")
              .replace(" 1 items", " 1 item") for b in branches for key, text in _LIMITS if key in b]
    nullable = any(b.get("type") == "null" for b in prop.get("anyOf", ()))
    notes = []
    if limits:
        notes.append("Limits: " + ", ".join(dict.fromkeys(limits)) + ".")
    said = re.search(r"\bnull\b|\bempty\b|\bunset\b|\bdefault\b", prop.get("description") or "",
                     re.IGNORECASE)
    if nullable and not said:  # the field's own text says what empty means where it can
        default = prop.get("default", None)
        notes.append("Empty (None): not set." if default is None
                     else f"Default {default!r}; empty (None): not set.")
    if notes:
        text = (prop.get("description") or "").strip()
        prop["description"] = f"{text} {' '.join(notes)}".strip()


def field_count(schema: Mapping[str, Any]) -> int:
    """The inputs a form for ``schema`` has: its leaf fields, nested objects expanded."""
    defs = schema.get("definitions") or schema.get("$defs") or {}

    def count(node: Mapping[str, Any]) -> int:
        name = _ref_name(node)
        if name is not None:
            return count(defs[name])
        branches = [b for b in node.get("anyOf", ()) if b.get("type") != "null"]
        if branches:  # a choice (an LLM role's providers) shows one branch's fields at a time
            return max(count(branch) for branch in branches)
        if "properties" in node:
            return sum(count(p) for p in node["properties"].values())
        return 1

    return count(schema)
