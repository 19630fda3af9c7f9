"""`agentune env check` and `agentune env verify`, run as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentune.cli import main
from agentune.paths import PROJECT_ROOT

DEMO = PROJECT_ROOT / "data" / "demo"
CONFIG = PROJECT_ROOT / "configs" / "demo.yaml"


def test_env_check_passes_every_bundled_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "check", "--config", str(CONFIG)]) == 0
    out = capsys.readouterr().out
    assert "travel: python, 8 tools" in out and "helpdesk: python, 7 tools (4 write), reserved" in out
    assert '[shop] create_order: {"type": "object"' in out
    scenarios = len(yaml.safe_load((DEMO / "scenarios.yaml").read_text("utf-8"))["scenarios"])
    assert f"scenarios: {scenarios}, ground truth ran for {scenarios}, {scenarios} passed, " \
           "0 failed" in out
    # A sample of the scenarios the environments' recipes generate runs too (24 each).
    assert "generated: 96 scenarios from " in out and "(asked 96), 0 failed" in out


def test_env_check_reports_a_recipe_whose_ground_truth_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = (DEMO / "tools.yaml").read_text("utf-8").replace(
        "environments/", str(DEMO / "environments") + "/")
    recipes = (DEMO / "environments" / "shop_recipes.py").read_text("utf-8").replace(
        'call("cancel_order", order_id="{order}")]],\n        phrasings={\n            "zh": {"order": "帮我',
        'call("cancel_order", order_id="O-0")]],\n        phrasings={\n            "zh": {"order": "帮我')
    (tmp_path / "shop_recipes.py").write_text(recipes, "utf-8")
    catalog = catalog.replace(str(DEMO / "environments") + "/shop_recipes.py",
                              str(tmp_path / "shop_recipes.py"))
    (tmp_path / "tools.yaml").write_text(catalog, "utf-8")
    assert main(["env", "check", str(tmp_path / "tools.yaml"), "--scenarios",
                 str(DEMO / "scenarios.yaml"), "--generated", "60"]) == 1
    out = capsys.readouterr().out
    assert "FAILED gen-shop.cancel_asked-train" in out and "ground_truth_failed" in out \
        and "recipe shop.cancel_asked" in out and "no order O-0" in out


def test_env_check_reports_a_failing_ground_truth(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "scenarios.yaml"
    bad.write_text(yaml.safe_dump({"scenarios": [{
        "id": "cancel-shipped", "environment": "shop", "lang": "en", "kind": "single_call",
        "request": "Cancel O-1001.", "facts": ["1299"],
        "ground_truth": [[{"name": "cancel_order", "arguments": {"order_id": "O-1001"}}]]}]}))
    assert main(["env", "check", str(DEMO / "tools.yaml"), "--scenarios", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAILED cancel-shipped: ground_truth_failed" in out and "cannot be cancelled" in out


def test_env_verify_scores_a_trajectory_file(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    call = {"id": "c1", "type": "function", "function": {
        "name": "get_order", "arguments": json.dumps({"order_id": "O-1001"})}}
    right = [{"role": "user", "content": "查一下订单 O-1001 的物流单号。"},
             {"role": "assistant", "content": "", "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "c1", "content": "{}"},
             {"role": "assistant", "content": "物流单号 SF123456789"}]
    rows = [{"id": "t-right", "scenario_id": "shop-tracking", "messages": right},
            {"id": "t-guess", "scenario_id": "shop-tracking",
             "messages": [right[0], {"role": "assistant", "content": "物流单号 SF123456789"}]}]
    path = tmp_path / "trajectories.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), "utf-8")
    assert main(["env", "verify", str(DEMO / "scenarios.yaml"), str(path), "--catalog",
                 str(DEMO / "tools.yaml")]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("t-right [shop-tracking] reward=+1.000 PASS")
    assert lines[1].startswith("t-guess [shop-tracking]") and "FAIL" in lines[1] \
        and "timing" in lines[1]
    assert "pass rate: 1/2 = 0.500" in captured.err
    assert main(["env", "verify", str(DEMO / "scenarios.yaml"), str(path), "--catalog",
                 str(DEMO / "tools.yaml"), "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["passed"] and first["components"]["state"] == 1.0 and first["version"]


def test_env_verify_names_a_row_without_a_known_scenario(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"scenario_id": "nope", "messages": []}) + "\n", "utf-8")
    assert main(["env", "verify", str(DEMO / "scenarios.yaml"), str(path), "--catalog",
                 str(DEMO / "tools.yaml")]) == 2
