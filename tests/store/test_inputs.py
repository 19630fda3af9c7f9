"""A stage's version id comes from what it declares it reads (``READS``), each field entered as
its marker says (agentune/config/inputs.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentune.config import RunConfig, load_config
from agentune.config.evaluate import BFCL_READS, CLOSED_LOOP_READS, PREDICTION_READS
from agentune.config.evaluate import READS as EVALUATE_READS
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_dataset.stage import dataset_params
from agentune.tasks.build_preferences.stage import PreferenceInputs, preference_params
from agentune.tasks.build_scenarios.stage import scenario_params
from agentune.tasks.build_templates.stage import template_params
from agentune.tasks.collect_queries.stage import collection_params
from agentune.tasks.environments.catalog import configured_environments
from agentune.tasks.evaluate.benchmarks.bfcl.run import bfcl_params
from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import rollout_params, trained_form
from agentune.tasks.llm.model_folders import ModelFolder
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef, file_fingerprint
from agentune.tasks.store.inputs import version_params
from agentune.tasks.synthesize.stage import synthesis_params
from agentune.tasks.verifier.rewards import RewardModel

DEMO = PROJECT_ROOT / "data" / "demo"


def test_a_setting_the_stage_reads_enters_by_value_and_one_it_does_not_read_does_not() -> None:
    base = RunConfig.model_validate({})
    read = base.merged(templates={"epsilon": 0.5})
    unread = base.merged(dataset={"agent_to_general": 2.0})
    assert template_params(read) != template_params(base)
    assert template_params(read)["templates"]["epsilon"] == 0.5
    assert template_params(unread) == template_params(base)
    assert template_params(base.merged(seed=3)) != template_params(base)


def test_files_enter_by_content_not_by_path(tmp_path: Path) -> None:
    first, moved = tmp_path / "a.jsonl", tmp_path / "elsewhere" / "b.jsonl"
    moved.parent.mkdir()
    for path in (first, moved):
        shutil.copy(DEMO / "general.jsonl", path)
    at = {str(p): RunConfig.model_validate({"dataset": {"general_data": [str(p)]}})
          for p in (first, moved)}
    params = {p: version_params(c, ("dataset.general_data",)) for p, c in at.items()}
    assert params[str(first)] == params[str(moved)]  # the same rows, elsewhere: the same id
    moved.write_text(moved.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert version_params(at[str(moved)], ("dataset.general_data",)) != params[str(first)]


def test_references_limits_and_endpoints_stay_out() -> None:
    base = RunConfig.model_validate({})
    elsewhere = base.merged(
        synthesis={"concurrency": 3, "work_dir": "/tmp/x", "queries": "queries@abc",
                   "templates": "templates@def"},
        llm={"teacher": {"base_url": "http://127.0.0.1:9/v1", "max_concurrency": 2},
             "cache_dir": "/tmp/cache", "budget": {"max_tokens": 10}},
        environments={"tools": {"max_concurrency": 1}})
    reads = ("synthesis", "environments.tools", "llm.teacher")
    assert version_params(elsewhere, reads) == version_params(base, reads)
    other_model = base.merged(llm={"teacher": {"model": "qwen2.5-coder-0.5b"}})
    assert version_params(other_model, reads)["llm"]["teacher"]["model"] == "qwen2.5-coder-0.5b"


def test_a_resolved_field_must_be_resolved_and_nothing_else() -> None:
    config = RunConfig.model_validate({})
    with pytest.raises(ValueError, match="environments.catalog is read and marked RESOLVED"):
        version_params(config, ("environments",))
    with pytest.raises(ValueError, match=r"resolved \['dataset.student_model'\]"):
        version_params(config, ("environments.tools",), {"dataset.student_model": {}})
    params = version_params(config, ("environments",), {"environments.catalog": {"x": "1"}})
    assert params["environments"]["catalog"] == {"x": "1"}


def test_a_tool_signature_edited_in_an_environment_class_moves_every_version_downstream(
        tmp_path: Path) -> None:
    """The tools' schemas come from the environment classes' type hints and docstrings: editing
    one moves the `tools` version and every version built on it, the stages that run tools by
    their own parameters, the others (templates, the dataset) through their parents. The
    parents are wired as the flows wire them."""
    shutil.copytree(DEMO, tmp_path / "demo")
    config = load_config("configs/demo.yaml").merged(
        environments={"catalog": str(tmp_path / "demo" / "tools.yaml")},
        preferences={"student": {"enabled": True}})
    student = ModelFolder("embedded", tmp_path, {"embedded": "x"}, None)
    reward = RewardModel.from_config(config.reward)
    store = ArtifactStore(tmp_path / "store")

    def versions() -> tuple[dict[str, VersionRef], dict[str, object]]:
        catalog = configured_environments(config.environments)
        refs: dict[str, VersionRef] = {}

        def version(name: str, params: dict, *parents: str) -> None:
            refs[name] = VersionRef(name, store.version_id(
                name, parents=[refs[p] for p in parents], params=params))

        collected = collection_params(config)
        version("tools", collected)
        version("queries", collected)
        version("scenarios", scenario_params(config, catalog), "queries")
        version("templates", template_params(config), "queries", "tools")
        version("trajectories", synthesis_params(config, catalog),
                "queries", "tools", "templates", "scenarios")
        version("sft_dataset", dataset_params(config), "trajectories")
        inputs = PreferenceInputs(None, refs["scenarios"], student, dataset=refs["sft_dataset"])
        version("preferences", preference_params(config, inputs, reward, catalog),
                "scenarios", "sft_dataset")
        return refs, {"templates": template_params(config), "dataset": dataset_params(config)}

    before, unread_before = versions()
    travel = tmp_path / "demo" / "environments" / "travel.py"
    source = travel.read_text(encoding="utf-8")
    old = "def book_flight(self, flight_id: str, passenger: str) -> dict:"
    assert old in source
    travel.write_text(source.replace(
        old, "def book_flight(self, flight_id: str, passenger: str, seats: int = 1) -> dict:"),
        encoding="utf-8")
    after, unread_after = versions()
    assert [name for name in before if before[name] == after[name]] == []
    assert unread_after == unread_before  # they read no environment: moved by their parents


def test_a_benchmark_keys_its_outputs_on_what_it_reads() -> None:
    """The closed loop's rollouts move with the simulated user's reply length it runs with
    (``synthesis.user_max_chars``) and its chat template's contents; BFCL's do not move with
    where its venv is or how long `bfcl evaluate` may take."""
    config = RunConfig.model_validate({})
    catalog = configured_environments(config.environments)
    cases = SimpleNamespace(records=[], groups=[])
    identity = {"embedded": "x"}

    def loop(c: RunConfig) -> dict:
        return rollout_params(c, identity, "messages", cases, catalog)  # type: ignore[arg-type]

    assert loop(config.merged(synthesis={"user_max_chars": 80})) != loop(config)
    template = str(PROJECT_ROOT / "templates" / "chatml_training.j2")
    with_template = config.merged(evaluate={"closed_loop": {"chat_template": template}})
    assert loop(with_template)["evaluate"]["closed_loop"]["chat_template"] == \
        file_fingerprint(template)
    suite = SimpleNamespace(ids=["simple_python_0"])

    def bfcl(c: RunConfig) -> dict:
        return bfcl_params(c, identity, suite)  # type: ignore[arg-type]

    moved = config.merged(evaluate={"bfcl": {"python": "/elsewhere/python", "timeout_s": 5}})
    assert bfcl(moved) == bfcl(config)
    assert bfcl(config.merged(evaluate={"bfcl": {"mode": "fc"}})) != bfcl(config)


def test_every_benchmark_reads_within_what_evaluate_declares() -> None:
    """A benchmark's reads are shown in evaluate's form (its READS covers them)."""
    declared = set(EVALUATE_READS)
    for reads in (CLOSED_LOOP_READS, BFCL_READS, PREDICTION_READS):
        for path in reads:
            parts = path.split(".")
            assert any(".".join(parts[:n]) in declared for n in range(1, len(parts) + 1)), path


def test_the_closed_loop_reads_a_models_training_form_in_either_layout(tmp_path: Path) -> None:
    """A model's params hold what train read (``train.sample_form``); a model published before
    that held it at the top, and a store keeps such models."""
    store = ArtifactStore(tmp_path / "store")
    now = store.publish("model", None, params={"train": {"sample_form": "steps"}},
                        description="now").ref
    older = store.publish("model", None, params={"sample_form": "messages"},
                          description="older").ref
    assert trained_form(store, now) == "steps" and trained_form(store, older) == "messages"
