"""The root of a run config: one YAML file, validated by pydantic, doubling as the flows' parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, PrivateAttr, ValidationError, model_validator

from agentune.config.build_dataset import BuildDatasetConfig
from agentune.config.build_preferences import BuildPreferencesConfig
from agentune.config.build_scenarios import BuildScenariosConfig
from agentune.config.build_templates import BuildTemplatesConfig
from agentune.config.collect_queries import CollectQueriesConfig
from agentune.config.environments import EnvironmentsConfig
from agentune.config.evaluate import EvaluateConfig
from agentune.config.inputs import RESOLVED, UNTRACKED
from agentune.config.llm import LLMConfig
from agentune.config.models import ModelEntry, Reference, declare, resolve
from agentune.config.moved import move_old_keys
from agentune.config.runner import RunnerConfig
from agentune.config.store import StoreConfig
from agentune.config.strict import Strict
from agentune.config.synthesize import SynthesisConfig
from agentune.config.train import TrainConfig
from agentune.config.train_retriever import TrainRetrieverConfig
from agentune.config.verifier import RewardConfig, VerifierConfig


class RunConfig(Strict):
    """A whole agentune run: inputs, roles and endpoints, sizes, ratios, thresholds, store."""

    name: str = Field("run", min_length=1, description="A label for this run, shown in summaries.")
    seed: int = Field(0, description="Seed for every sampling decision of the run.")
    models: dict[str, ModelEntry] = Field(
        default_factory=dict, description="The run's models, each named once: the LLM roles, "
        "preferences.student and evaluate.models name an entry in their `model` field, and the "
        "entry's settings are filled in there (agentune.config.models). train.base_model and "
        "dataset.student_model, where left out, are llm.student's weights.")
    store: StoreConfig = Field(default_factory=StoreConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    environments: EnvironmentsConfig = Field(
        default_factory=EnvironmentsConfig, description="The tool environments: the catalog and "
        "how its tools are executed (every stage that runs or reads tools)."
    )
    queries: CollectQueriesConfig = Field(
        default_factory=CollectQueriesConfig, description="The collect_queries stage."
    )
    scenarios: BuildScenariosConfig = Field(
        default_factory=BuildScenariosConfig, description="The build_scenarios stage."
    )
    templates: BuildTemplatesConfig = Field(
        default_factory=BuildTemplatesConfig, description="The build_templates stage."
    )
    synthesis: SynthesisConfig = Field(
        default_factory=SynthesisConfig, description="The synthesize stage."
    )
    dataset: BuildDatasetConfig = Field(
        default_factory=BuildDatasetConfig, description="The build_dataset stage."
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="The train stage.")
    preferences: BuildPreferencesConfig = Field(
        default_factory=BuildPreferencesConfig, description="The build_preferences stage."
    )
    train_retriever: TrainRetrieverConfig = Field(
        default_factory=TrainRetrieverConfig, description="The train_retriever stage."
    )
    evaluate: EvaluateConfig = Field(
        default_factory=EvaluateConfig, description="The evaluate stage."
    )
    runner: Annotated[RunnerConfig, UNTRACKED] = Field(
        default_factory=RunnerConfig, description="Where CPU-bound stage work runs."
    )
    verifier: VerifierConfig = Field(
        default_factory=VerifierConfig, description="The one verifier: components, reward "
        "weights, pass rule (synthesis acceptance, preferences, RL reward, evaluation)."
    )
    reward: Annotated[RewardConfig, RESOLVED] = Field(
        default_factory=RewardConfig, description="The reward registry's selection: what ranks "
        "preference pairs and rewards GRPO (one named function or a weighted list)."
    )

    _references: list[Reference] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _resolve_models(cls, data: Any, handler: Any) -> RunConfig:
        """Registry names replaced by their entries' settings before the sections validate."""
        if not isinstance(data, dict):
            return handler(data)
        resolved, references = resolve(data)
        config = handler(resolved)
        config._references = references
        return config

    def declared(self) -> dict[str, Any]:
        """The settings as declared: registry names where a place named one (with the settings
        it set itself), and no student weights where they were left to default
        (``models.declare``)."""
        return declare(self.model_dump(mode="json"),
                       self.model_dump(mode="json", exclude_unset=True), self._references)

    def merged(self, **overrides: Any) -> RunConfig:
        """This config with ``overrides`` merged in, mapping by mapping as ``extends`` merges a
        file over its parent (``seed=1``, ``train={"method": "dpo"}``), validated again. Merged
        over the settings as declared, so an override of a registry entry or of ``llm.student``
        reaches the places that name it."""
        return RunConfig.model_validate(_merged(self.declared(), overrides))


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the field."""


def load_config(path: str | Path) -> RunConfig:
    """Read and validate a run config YAML file. A file may start from another one:
    ``extends: other.yaml`` (relative to the file) takes that file's settings and overrides them
    with its own, mappings merged key by key, anything else replaced. Keys that moved
    (``agentune.config.moved``) are read at their new place, with a deprecation warning."""
    path = Path(path)
    raw = _read_settings(path, ())
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{path}: {problems}") from None


def _read_settings(path: Path, seen: tuple[Path, ...]) -> dict:
    """A config file's mapping with the files it ``extends`` merged under it."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        where = f" (extended by {seen[-1]})" if seen else ""
        raise ConfigError(f"{path}: config file not found{where}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(raw).__name__}")
    try:
        move_old_keys(raw, str(path))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{path}: extends: a config file path, got {parent!r}")
    base = (path.parent / parent).resolve()
    if base in (*seen, path.resolve()):
        raise ConfigError(f"{path}: extends: {parent} extends this file again (a cycle)")
    return _merged(_read_settings(base, (*seen, path.resolve())), raw)


def _merged(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out
