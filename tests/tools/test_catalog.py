"""Tool catalog loading and validation: OpenAI function tools, JSON Schema parameters."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.tools.catalog import load_tool_catalog, validate_tool_catalog

DEMO = PROJECT_ROOT / "data" / "demo" / "tools.yaml"

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name."},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}


def tool(**changes: Any) -> dict[str, Any]:
    """WEATHER with ``function`` keys replaced (``None`` deletes the key)."""
    entry = copy.deepcopy(WEATHER)
    for key, value in changes.items():
        if value is None:
            entry["function"].pop(key, None)
        else:
            entry["function"][key] = value
    return entry


def test_demo_catalog_is_valid_and_covers_the_scenarios() -> None:
    # Its own tools and those its Python environments define.
    tools = load_environments(DEMO).tools()
    names = {t.name for t in tools}
    assert len(load_tool_catalog(DEMO)) >= 14 and len(names) == len(tools) >= 40
    for needed in [
        "web_search",
        "encyclopedia_lookup",
        "get_weather",
        "search_flights",
        "book_hotel",
        "calendar_list_events",
        "calendar_create_event",
        "calculator",
        "run_python",
        "date_calculate",
        "currency_convert",
        "translate",
        "send_email",
        "stock_quote",
    ]:
        assert needed in names
    for t in tools:
        jsonschema.Draft202012Validator.check_schema(t.parameters)
        assert t.parameters["type"] == "object"
        for prop in t.parameters.get("properties", {}).values():
            assert prop.get("description"), t.name


def test_demo_hints_use_catalog_tools_and_some_tools_are_distractors() -> None:
    names = {t.name for t in load_environments(DEMO).training_tools()}
    hinted = set()
    for line in (PROJECT_ROOT / "data" / "demo" / "queries.jsonl").read_text("utf-8").splitlines():
        hinted.update(json.loads(line).get("tools") or [])
    assert hinted <= names
    assert names - hinted  # tools no demo query needs


def test_json_jsonl_yaml_and_wrapped_forms_agree(tmp_path: Path) -> None:
    entries = [WEATHER, tool(name="calculator", description="Math.")]
    (tmp_path / "a.json").write_text(json.dumps(entries), "utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(e) for e in entries), "utf-8")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(entries), "utf-8")
    (tmp_path / "d.yml").write_text(yaml.safe_dump({"tools": entries}), "utf-8")
    loaded = [load_tool_catalog(tmp_path / n) for n in ("a.json", "b.jsonl", "c.yaml", "d.yml")]
    assert all(x == loaded[0] for x in loaded)
    assert loaded[0][0].to_openai() == WEATHER


def test_missing_parameters_means_no_arguments() -> None:
    [spec] = validate_tool_catalog([("tool 0", tool(parameters=None))])
    assert spec.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("entry", "field", "problem"),
    [
        ("not a mapping", None, "a tool must be an object"),
        ({**WEATHER, "type": "retrieval"}, "type", "must be 'function'"),
        ({"type": "function"}, "function", "missing or not an object"),
        (tool(name="get weather!"), "function.name", "must be 1-64 letters"),
        (tool(name=None), "function.name", "must be 1-64 letters"),
        (tool(description=None), "function.description", "missing or empty"),
        (tool(description="   "), "function.description", "missing or empty"),
        (tool(parameters="city: str"), "function.parameters", "must be a JSON Schema object"),
        (
            tool(parameters={"type": "object", "properties": {"days": {"type": "integr"}}}),
            "function.parameters.properties.days.type",
            "not a valid JSON Schema",
        ),
        (
            tool(parameters={"type": "object", "required": "city"}),
            "function.parameters.required",
            "not a valid JSON Schema",
        ),
        (
            tool(parameters={"type": "array", "items": {"type": "string"}}),
            "function.parameters.type",
            "must be 'object'",
        ),
        (
            tool(parameters={"type": "object", "properties": {}, "required": ["city"]}),
            "function.parameters.required",
            "'city' is required but not among the properties",
        ),
    ],
)
def test_invalid_tools_name_file_entry_and_field(
    tmp_path: Path, entry: Any, field: str | None, problem: str
) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(
        json.dumps([WEATHER | {"function": {**WEATHER["function"], "name": "ok"}}, entry])
    )
    with pytest.raises(InputError) as info:
        load_tool_catalog(path)
    err = info.value
    assert (err.file, err.row, err.field) == (str(path), "tool 1", field)
    assert problem in str(err)


def test_duplicate_names_are_an_error_naming_both_entries(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump([WEATHER, tool(name="calc"), WEATHER]), "utf-8")
    with pytest.raises(InputError) as info:
        load_tool_catalog(path)
    assert info.value.row == "tool 2" and info.value.field == "function.name"
    assert "duplicate tool name 'get_weather' (first at tool 0)" in str(info.value)


def test_file_level_catalog_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_tool_catalog(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- type: function\n  function: [unclosed\n", "utf-8")
    with pytest.raises(InputError, match=r"bad\.yaml: line \d+: not valid YAML"):
        load_tool_catalog(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('[{"type": "function",]', "utf-8")
    with pytest.raises(InputError, match=r"bad\.json: line 1: not valid JSON"):
        load_tool_catalog(bad_json)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n", "utf-8")
    with pytest.raises(InputError, match="must be a list of tools"):
        load_tool_catalog(scalar)
    empty = tmp_path / "empty.json"
    empty.write_text("[]", "utf-8")
    with pytest.raises(InputError, match="no tools"):
        load_tool_catalog(empty)
    other = tmp_path / "tools.toml"
    other.write_text("", "utf-8")
    with pytest.raises(InputError, match="unsupported format"):
        load_tool_catalog(other)
