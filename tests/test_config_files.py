"""The run config files: every shipped one loads, and `extends` merges a file over another."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from agentune.config import load_config
from agentune.config.run import ConfigError
from agentune.paths import PROJECT_ROOT


@pytest.mark.parametrize("path", sorted((PROJECT_ROOT / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_config_loads(path: Path) -> None:
    load_config(path)


def test_the_outcome_config_is_the_demo_with_its_own_changes() -> None:
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    outcome = load_config(PROJECT_ROOT / "configs" / "outcome.yaml")
    assert outcome.name == "outcome" and outcome.synthesis.max_scenarios == 192
    assert outcome.scenarios.generate.enabled and not demo.scenarios.generate.enabled
    assert outcome.train.method == "dpo" and outcome.evaluate.bfcl.max_per_category == 100
    assert outcome.llm.teacher.model == "qwen2.5-coder-0.5b" != demo.llm.teacher.model
    assert (outcome.synthesis.form, demo.synthesis.form) == ("messages", "steps")
    # Merged key by key: what outcome.yaml leaves out of a section is the demo's.
    assert outcome.llm.judge == demo.llm.judge and outcome.queries == demo.queries
    assert outcome.synthesis.structured_output == demo.synthesis.structured_output == "all"


def test_extends_merges_mappings_and_replaces_the_rest(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "name: base\nsynthesis: {attempts: 2, max_steps: 3}\n"
        "evaluate: {bfcl: {categories: [simple_python, multiple]}}\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    child = tmp_path / "sub" / "child.yaml"
    child.write_text("extends: ../base.yaml\nsynthesis: {attempts: 5}\n"
                     "evaluate: {bfcl: {categories: [irrelevance]}}\n", encoding="utf-8")
    config = load_config(child)
    assert config.name == "base"
    assert (config.synthesis.attempts, config.synthesis.max_steps) == (5, 3)
    assert config.evaluate.bfcl.categories == ["irrelevance"]


def test_a_bad_extends_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "a.yaml"
    missing.write_text("extends: nowhere.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"nowhere.yaml: config file not found \(extended by "):
        load_config(missing)
    loop = tmp_path / "b.yaml"
    loop.write_text("extends: c.yaml\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text("extends: b.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c.yaml: extends: b.yaml extends this file again"):
        load_config(loop)
    wrong = tmp_path / "d.yaml"
    wrong.write_text("extends: a.yaml\nsynthesis: {attempts: 0}\n", encoding="utf-8")
    (tmp_path / "a.yaml").write_text("name: a\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"d.yaml: synthesis.attempts: "):
        load_config(wrong)


def test_merged_overrides_mapping_by_mapping_and_validates() -> None:
    config = load_config(PROJECT_ROOT / "configs" / "outcome.yaml")
    merged = config.merged(seed=3, preferences={"student": {"model": "model@v1"}},
                           evaluate={"models": [{"label": "base", "model": "embedded"}]})
    assert merged.seed == 3 and merged.preferences.student.model == "model@v1"
    # Siblings of a merged key are kept; the original is not changed.
    assert merged.preferences.student.samples == config.preferences.student.samples
    assert merged.preferences.min_margin == config.preferences.min_margin
    assert merged.evaluate.bfcl == config.evaluate.bfcl and config.seed == 0
    with pytest.raises(ValueError, match="max_length"):
        config.merged(train={"max_length": 0})


def test_shipped_configs_use_no_moved_key() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for path in sorted((PROJECT_ROOT / "configs").glob("*.yaml")):
            load_config(path)


def test_old_keys_load_at_their_new_places_with_a_warning(tmp_path: Path, caplog) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("queries: {tool_catalog: my/tools.yaml, set_size: 4}\n"
                   "synthesis: {attempts: 2, tools: {max_tool_response_length: 300}}\n"
                   "evaluate: {unseen_templates: 1}\n", encoding="utf-8")
    with pytest.warns(DeprecationWarning) as warned:
        config = load_config(old)
    moved = {"queries.tool_catalog": "environments.catalog",
             "synthesis.tools": "environments.tools",
             "evaluate.unseen_templates": "templates.unseen_templates"}
    said = sorted(str(w.message) for w in warned)
    assert said == sorted(f"{old}: {a} is deprecated: it moved to {b} (loaded from there for now)"
                          for a, b in moved.items())
    assert [r.getMessage() for r in caplog.records if r.name == "agentune.config.moved"] == [
        str(w.message) for w in warned]
    assert config.environments.catalog == "my/tools.yaml"
    assert config.environments.tools.max_tool_response_length == 300
    assert config.templates.unseen_templates == 1
    new = tmp_path / "new.yaml"
    new.write_text("environments: {catalog: my/tools.yaml,\n"
                   "               tools: {max_tool_response_length: 300}}\n"
                   "queries: {set_size: 4}\nsynthesis: {attempts: 2}\n"
                   "templates: {unseen_templates: 1}\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert load_config(new) == config


def test_an_old_and_its_new_key_in_one_file_are_refused(tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text("synthesis: {tools: {timeout_s: 5}}\nenvironments: {tools: {timeout_s: 9}}\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"both\.yaml: both synthesis\.tools and "
                                          r"environments\.tools are given"):
        load_config(both)


def test_an_extended_file_s_old_keys_move_before_the_merge(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "evaluate: {unseen_templates: 3}\nqueries: {tool_catalog: base/tools.yaml}\n",
        encoding="utf-8")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\ntemplates: {unseen_templates: 1}\n", encoding="utf-8")
    with pytest.warns(DeprecationWarning) as warned:
        config = load_config(child)
    # The warnings name the file that has the old keys.
    assert sorted(str(w.message).split(" is ")[0] for w in warned) == [
        f"{tmp_path / 'base.yaml'}: evaluate.unseen_templates",
        f"{tmp_path / 'base.yaml'}: queries.tool_catalog"]
    # The child's new key overrides the parent's old one, as any key of a parent.
    assert config.templates.unseen_templates == 1
    assert config.environments.catalog == "base/tools.yaml"
