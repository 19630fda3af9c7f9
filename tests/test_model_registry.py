"""The `models:` registry: a model described once, named by the roles, the student rollouts and
evaluate; the student's weights as train's and build_dataset's default; merges and the pipeline
form keep the names."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentune.config import ConfigError, RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.orchestration import console

SERVED = {"provider": "openai", "source": "Qwen/Qwen2.5-72B-Instruct",
          "base_url": "http://127.0.0.1:8000/v1", "api_key_env": "VLLM_API_KEY",
          "weights": "models/qwen-72b"}


def registry_config(**sections) -> dict:
    return {"models": {"big": SERVED, "small": {"source": "embedded", "dtype": "float32",
                                                "chat_template": "templates/chatml_training.j2"}},
            **sections}


def test_a_name_fills_in_every_place_that_names_it() -> None:
    config = RunConfig.model_validate(registry_config(
        llm={"teacher": {"model": "big", "max_concurrency": 64}, "judge": {"model": "big"},
             "student": {"model": "small", "batch_size": 4}},
        preferences={"student": {"model": "small", "samples": 2}},
        evaluate={"models": [{"label": "base", "model": "small"},
                             {"label": "teacher", "model": "big"}]}))
    teacher = config.llm.teacher
    assert (teacher.provider, teacher.model, teacher.base_url, teacher.api_key_env) == (
        "openai", "Qwen/Qwen2.5-72B-Instruct", "http://127.0.0.1:8000/v1", "VLLM_API_KEY")
    assert teacher.max_concurrency == 64 and config.llm.judge.model == teacher.model
    student = config.llm.student
    assert (student.provider, student.model, student.dtype, student.batch_size) == (
        "local", "embedded", "float32", 4)
    assert student.chat_template == "templates/chatml_training.j2"
    rollouts = config.preferences.student
    assert (rollouts.model, rollouts.dtype, rollouts.samples) == ("embedded", "float32", 2)
    assert rollouts.chat_template == "templates/chatml_training.j2"
    base, served = config.evaluate.models
    assert (base.model, base.dtype) == ("embedded", "float32")
    # An endpoint's weights are evaluate's tokenizer for the memory cut.
    assert (served.provider, served.model, served.tokenizer) == (
        "openai", "Qwen/Qwen2.5-72B-Instruct", "models/qwen-72b")
    # The student is named once: train fine-tunes it and build_dataset audits with it.
    assert config.train.base_model == config.dataset.student_model == "embedded"


def test_an_endpoint_student_s_weights_are_what_train_loads() -> None:
    config = RunConfig.model_validate(registry_config(llm={"student": {"model": "big"}}))
    assert config.llm.student.provider == "openai"
    assert config.train.base_model == config.dataset.student_model == "models/qwen-72b"
    # Given, they are kept; a student served by name alone leaves the fields' own defaults.
    given = RunConfig.model_validate(registry_config(
        llm={"student": {"model": "big"}}, train={"base_model": "models/other"}))
    assert (given.train.base_model, given.dataset.student_model) == (
        "models/other", "models/qwen-72b")
    unnamed = RunConfig.model_validate({"llm": {"student": {
        "provider": "openai", "model": "served-name", "base_url": "http://127.0.0.1:1/v1"}}})
    assert unnamed.train.base_model == "embedded"
    inline = RunConfig.model_validate({"llm": {"student": {"model": "models/mine"}}})
    assert inline.train.base_model == inline.dataset.student_model == "models/mine"


def test_a_place_that_names_a_model_and_redescribes_it_is_refused() -> None:
    with pytest.raises(ValueError, match=r"llm\.teacher\.base_url is 'http://elsewhere/v1' but "
                                         r"llm\.teacher names models\.big, whose base_url is "
                                         r"'http://127\.0\.0\.1:8000/v1'"):
        RunConfig.model_validate(registry_config(
            llm={"teacher": {"model": "big", "base_url": "http://elsewhere/v1"}}))
    with pytest.raises(ValueError, match=r"evaluate\.models\[1\]\.dtype is 'bfloat16' but"):
        RunConfig.model_validate(registry_config(evaluate={"models": [
            {"label": "a", "model": "embedded"},
            {"label": "b", "model": "small", "dtype": "bfloat16"}]}))
    # The same value, or a setting the entry leaves open, is the place's own.
    config = RunConfig.model_validate(registry_config(
        llm={"teacher": {"model": "big", "provider": "openai", "timeout_s": 30}}))
    assert config.llm.teacher.timeout_s == 30
    with pytest.raises(ValueError, match=r"'embedded' cannot name a model"):
        RunConfig.model_validate({"models": {"embedded": {"source": "models/x"}}})


def test_a_bad_entry_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("models: {big: {source: x, provider: ollama}}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"run\.yaml: .*provider"):
        load_config(path)
    path.write_text("models: {big: {sorce: x}}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"run\.yaml: .*sorce"):
        load_config(path)


def test_a_merge_reaches_every_place_that_names_the_entry() -> None:
    config = RunConfig.model_validate(registry_config(
        llm={"teacher": {"model": "big"}, "student": {"model": "small"}},
        evaluate={"models": [{"label": "base", "model": "small"}]}))
    moved = config.merged(models={"big": {"base_url": "http://127.0.0.1:9000/v1"},
                                  "small": {"source": "models/mine", "dtype": None}})
    assert moved.llm.teacher.base_url == "http://127.0.0.1:9000/v1"
    assert moved.llm.student.model == moved.evaluate.models[0].model == "models/mine"
    assert moved.llm.student.dtype == "auto"  # the entry leaves it open: the role's default
    assert moved.train.base_model == moved.dataset.student_model == "models/mine"
    # Another student: train and build_dataset follow it unless they name their own model.
    other = config.merged(llm={"student": {"model": "models/other"}})
    assert other.train.base_model == other.dataset.student_model == "models/other"
    assert config.merged() == config


def test_the_shipped_configs_name_each_model_once() -> None:
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    assert set(demo.models) == {"smollm2"}
    roles = demo.llm.teacher, demo.llm.judge, demo.llm.student
    assert {(r.provider, r.model) for r in roles} == {("local", "embedded")}
    assert demo.train.base_model == demo.dataset.student_model == demo.evaluate.models[0].model
    gpu = load_config(PROJECT_ROOT / "configs" / "gpu-qwen2.5-7b.yaml")
    assert gpu.llm.judge == gpu.llm.teacher.model_copy(update={"default_max_tokens": 512})
    assert gpu.llm.teacher.base_url == "http://127.0.0.1:8000/v1"
    assert gpu.train.base_model == gpu.dataset.student_model == "models/Qwen2.5-7B-Instruct"
    assert (gpu.llm.student.dtype, gpu.llm.student.device) == ("bfloat16", "cuda")
    for path in (PROJECT_ROOT / "configs").glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        assert "student_model:" not in text and "base_model:" not in text, path.name


def test_the_pipeline_form_keeps_the_names(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(registry_config(
        store={"root": str(tmp_path / "store")},
        llm={"teacher": {"model": "big", "max_concurrency": 64}, "student": {"model": "small"}},
        environments={"catalog": str(PROJECT_ROOT / "data" / "demo" / "tools.yaml")})),
        encoding="utf-8")
    loaded = load_config(path)
    spec = console.deployment_spec(PROJECT_ROOT / "prefect.yaml", path, "agentune")
    pipeline = next(d for d in spec["deployments"] if d["name"] == "pipeline")
    declared = pipeline["parameters"]["config"]
    assert declared["llm"]["teacher"] == {"model": "big", "provider": "openai",
                                          "max_concurrency": 64}
    assert "base_model" not in declared["train"]
    assert RunConfig.model_validate(declared) == loaded
    # Editing the entry in the form reaches the role and train's default.
    declared["models"]["small"]["source"] = "models/mine"
    edited = RunConfig.model_validate(declared)
    assert edited.llm.student.model == edited.train.base_model == "models/mine"
    # A stage's form holds its fields resolved.
    synthesize = next(d for d in spec["deployments"] if d["name"] == "synthesize")
    assert synthesize["parameters"]["config"]["llm"]["teacher"]["base_url"] == SERVED["base_url"]


def test_a_copy_with_another_model_is_not_named_back() -> None:
    config = RunConfig.model_validate(registry_config(llm={"student": {"model": "small"}}))
    copied = config.model_copy(update={"llm": config.llm.model_copy(update={
        "student": config.llm.student.model_copy(update={"model": "models/else"})})})
    assert copied.merged().llm.student.model == "models/else"
    assert config.merged().llm.student.model == "embedded"
