"""Scenarios: checked against the environments with errors naming file, row and field; every
demo scenario's ground truth runs; a ground truth that fails or changes nothing is rejected."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import Scenario, assign_split, load_scenarios

DEMO = PROJECT_ROOT / "data" / "demo"


@pytest.fixture(scope="module")
def catalog() -> EnvironmentCatalog:
    return load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)


def _write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": rows}, allow_unicode=True), encoding="utf-8")
    return path


BASE = {"id": "s1", "environment": "shop", "lang": "en", "kind": "single_call",
        "request": "Status of O-1001?",
        "ground_truth": [[{"name": "get_order", "arguments": {"order_id": "O-1001"}}]],
        "facts": ["shipped"]}


@pytest.mark.parametrize("change, field, problem", [
    ({"environment": "bank"}, "environment", "unknown environment 'bank'"),
    ({"ground_truth": [[{"name": "get_invoice", "arguments": {}}]]}, "ground_truth[0][0].name",
     "unknown tool 'get_invoice'"),
    ({"ground_truth": [[{"name": "get_order", "arguments": {"order": "O-1"}}]]},
     "ground_truth[0][0].arguments", "order_id"),
    ({"kind": "parallel_calls"}, "ground_truth", "two or more calls"),
    ({"kind": "no_tool"}, "ground_truth", "calls no tool"),
    ({"kind": "missing_info"}, "hidden", "what the user answers"),
    ({"hidden": "x"}, "hidden", "only missing_info"),
    ({"initial_state": {"shop": "all orders"}}, "initial_state.shop", "JSON object"),
    ({"initial_state": {"travel": {}}}, "initial_state.travel", "not a stateful environment"),
    ({"lang": "fr"}, "lang", "'zh' or 'en'"),
])
def test_bad_scenarios_name_file_row_and_field(tmp_path: Path, catalog, change, field,
                                                problem) -> None:
    path = _write(tmp_path, [BASE, {**BASE, "id": "s2", **change}])
    with pytest.raises(InputError) as err:
        load_scenarios(path, catalog)
    assert (err.value.file, err.value.row, err.value.field) == (str(path), "scenario 1", field)
    assert problem in str(err.value)


def test_a_state_that_is_not_json_is_an_error(tmp_path: Path, catalog) -> None:
    # YAML reads an unquoted date as a date object, which JSON has no type for.
    path = tmp_path / "scenarios.yaml"
    text = yaml.safe_dump({"scenarios": [{**BASE, "initial_state": {"shop": {"since": "X"}}}]})
    path.write_text(text.replace("since: X", "since: 2025-06-06"), encoding="utf-8")
    with pytest.raises(InputError, match="not JSON") as err:
        load_scenarios(path, catalog)
    assert err.value.row == "scenario 0" and "initial_state" in (err.value.field or "")


def test_duplicate_ids_are_an_error(tmp_path: Path, catalog) -> None:
    with pytest.raises(InputError, match="duplicate id 's1'"):
        load_scenarios(_write(tmp_path, [BASE, BASE]), catalog)


def test_the_demo_seed_file_covers_every_kind_in_both_languages(catalog) -> None:
    scenarios = load_scenarios(DEMO / "scenarios.yaml", catalog)
    assert len(scenarios) >= 60
    assert set(Counter(s.kind for s in scenarios)) == {
        "single_call", "parallel_calls", "multi_step", "no_tool", "irrelevant", "missing_info"}
    by_lang = Counter(s.lang for s in scenarios)
    assert by_lang["zh"] >= 25 and by_lang["en"] >= 25
    reserved = [s for s in scenarios if assign_split(s, catalog, heldout_fraction=0.2, seed=0)
                == "reserved"]
    assert reserved and {s.environment for s in reserved} == {"helpdesk"}


def _run(catalog: EnvironmentCatalog, scenario: Scenario) -> Any:
    async def go() -> Any:
        async with executor_for(catalog, ToolsConfig()) as executor:
            return await execute_ground_truth(scenario, Episode(catalog, executor))
    return asyncio.run(go())


def test_every_demo_ground_truth_runs_and_writes_what_it_should(catalog) -> None:
    for scenario in load_scenarios(DEMO / "scenarios.yaml", catalog):
        run = _run(catalog, scenario)
        assert run.problem is None, (scenario.id, run.problem)
        assert len(run.results) == len(scenario.ground_truth)


def test_a_failing_ground_truth_is_rejected_with_its_reason(catalog) -> None:
    failing = Scenario.model_validate({**BASE, "id": "bad", "kind": "single_call", "ground_truth": [
        [{"name": "cancel_order", "arguments": {"order_id": "O-1001"}}]]})
    run = _run(catalog, failing)
    assert run.problem is not None and run.problem[0] == "ground_truth_failed"
    assert "shipped and cannot be cancelled" in run.problem[1]


def test_a_writing_ground_truth_that_changes_nothing_is_rejected(catalog) -> None:
    # The address is set to what it already is: a write with no effect.
    same = Scenario.model_validate({**BASE, "id": "noop", "ground_truth": [[{
        "name": "update_shipping_address", "arguments": {
            "customer_id": "C002", "address": "12 Harbour Road, Shenzhen"}}]]})
    run = _run(catalog, same)
    assert run.problem is not None and run.problem[0] == "no_state_change"


def test_generated_ids_do_not_count_as_a_difference(catalog) -> None:
    order = {"name": "create_order", "arguments": {"customer_id": "C002", "sku": "SKU-KB01",
                                                   "quantity": 1}}
    one = Scenario.model_validate({**BASE, "id": "o1", "ground_truth": [[order]]})
    started_later = Scenario.model_validate({**BASE, "id": "o2", "ground_truth": [[order]],
                                             "initial_state": {"shop": {"next_order": 5000}}})
    from agentune.tasks.environments.state import states_equal
    a, b = _run(catalog, one), _run(catalog, started_later)
    assert a.results[0][0]["order_id"] != b.results[0][0]["order_id"]
    generated = catalog.environments["shop"].generated
    assert states_equal(a.expected_state["shop"], b.expected_state["shop"], generated)
