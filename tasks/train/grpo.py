"""GRPO with tools: a ``scenarios`` version's train-split scenarios as prompts, rolled out in the
agentune environments and rewarded by the reward registry (the trainer: ``grpo_trainer``; the
environments and reward functions TRL calls: ``grpo_env``).

A prompt is the scenario's request with the scenario's id and environment, which the job's
environments are reset with. Only environments that run alone qualify: the training processes
do not call the teacher that simulates the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.config.train import TrainConfig
from agentune.tasks.environments.catalog import (
    EnvironmentCatalog,
    configured_environments,
    fingerprint,
)
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.llm.model_folders import ModelFolder
from agentune.tasks.rollouts.closed_loop import spread
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.examples import TokenCount
from agentune.tasks.train.grpo_trainer import build_grpo_trainer
from agentune.tasks.train.inputs import DATA_ARTIFACT, TrainData, TrainInputError
from agentune.tasks.train.job import GRPOJob, TrainJob
from agentune.tasks.train.method import Prepared, TrainMethod
from agentune.tasks.train.mixing import apply_task_weights
from agentune.tasks.verifier.rewards import RewardModel

SCENARIOS_FILE = "scenarios.json"


def scenario_data(config: RunConfig, store: ArtifactStore, catalog: EnvironmentCatalog
                  ) -> TrainData:
    """The training scenarios as prompts; environments the job can run alone."""
    from datasets import Dataset

    grpo = config.train.grpo
    dataset = store.resolve(grpo.scenarios or DATA_ARTIFACT["grpo"])
    if dataset.name != DATA_ARTIFACT["grpo"]:
        raise TrainInputError(f"train.grpo.scenarios {grpo.scenarios!r}: expected a scenarios "
                              f"version, got {dataset}")
    rows = list(Dataset(store.read_arrow(dataset)))
    records = [r for r in read_scenario_rows(rows, str(dataset)) if r.split == "train"]
    chosen = spread(records, grpo.max_scenarios, config.seed)
    if not chosen:
        raise TrainInputError(f"{dataset}: no train-split scenario to roll out")
    simulated = sorted({spec.name for r in chosen for spec in
                        catalog.offered(r.scenario.environment) if spec.kind == "simulated"})
    if simulated:
        raise TrainInputError(
            f"train.method grpo: the environments {simulated} are simulated by the teacher, "
            "which the training processes do not call; limit the scenarios to environments "
            "that run alone (train.grpo.scenarios)")
    ids = {r.scenario.id for r in chosen}
    kept = [row for row in rows if row["id"] in ids]
    prompts = [{"prompt": [{"role": "user", "content": r.scenario.request}],
                "scenario_id": r.scenario.id, "environment": r.scenario.environment}
               for r in chosen]
    if config.train.task_weights:
        prompts, weighting = apply_task_weights(
            [{**p, "kind": r.scenario.kind} for p, r in zip(prompts, chosen, strict=True)],
            config.train.task_weights, key="kind", seed=config.seed, where=str(dataset))
        prompts = [{k: v for k, v in p.items() if k != "kind"} for p in prompts]
        report = weighting.report() if weighting else None
    else:
        report = None
    return TrainData(dataset, list(prompts), [], weighting=report,
                     scenario_rows=kept)


def rollout_tokens(tokenizer: Any, data: TrainData, template: str, settings: TrainConfig
                   ) -> TokenCount:
    """Tokens one pass over the prompts feeds the model, at most: each prompt's G rollouts at
    their longest (the tools block is counted once per prompt)."""
    grpo = settings.grpo
    prompt_tokens = [len(tokenizer.apply_chat_template(
        row["prompt"], chat_template=template, tokenize=True, add_generation_prompt=True,
        return_dict=True)["input_ids"]) for row in data.train]
    per_rollout = [n + grpo.max_total_response_length for n in prompt_tokens]
    return TokenCount(examples=len(data.train), sampled=len(data.train),
                      tokens=grpo.num_generations * sum(per_rollout))


class GRPO(TrainMethod):
    name = "grpo"
    text = ("group relative policy optimisation with tools (TRL GRPOTrainer, the environments "
            "as environment_factory)")
    signal = "reward"  # the mean reward of the rollouts

    def prepare(self, config: RunConfig, store: ArtifactStore, start: ModelFolder,
                tokenizer: Any, template: str) -> Prepared:
        settings = config.train
        if settings.sample_form != "messages":
            raise ValueError("train.method grpo rolls out native tool calls: train.sample_form "
                             "must be messages")
        catalog = configured_environments(config.environments)
        data = scenario_data(config, store, catalog)
        reward = RewardModel.from_config(config.reward).lineage()
        notes = ({"replay": {"note": "not applied: grpo trains on scenario prompts, not rows"}}
                 if settings.replay is not None else {})
        params = {
            "train.grpo": {
                **settings.grpo.model_dump(
                    mode="json", exclude={"scenarios", "learning_rate", "max_steps"}),
                "prompts": sorted(row["scenario_id"] for row in data.train)},
            "environments.catalog": fingerprint(catalog),
            "reward": reward,
        }
        return Prepared(data, rollout_tokens(tokenizer, data, template, settings),
                        reward=reward, notes=notes, params=params)

    def schedule(self, settings: TrainConfig) -> dict[str, Any]:
        grpo = settings.grpo
        return {"learning_rate": grpo.learning_rate or settings.learning_rate,
                "epochs": settings.epochs, "max_steps": grpo.max_steps}

    def check_world(self, settings: TrainConfig, processes: int) -> None:
        batch = settings.per_device_batch_size * settings.gradient_accumulation_steps * processes
        if batch % settings.grpo.num_generations:
            raise ValueError(
                f"train.method grpo: the batch of {batch} rollouts (per_device_batch_size x "
                f"gradient_accumulation_steps x processes) must be a multiple of "
                f"train.grpo.num_generations = {settings.grpo.num_generations}")

    def job_fields(self, config: RunConfig, work_dir: Path) -> dict[str, Any]:
        environments = config.environments
        return {"grpo": GRPOJob(
            scenarios_file=str(work_dir / SCENARIOS_FILE), settings=config.train.grpo,
            environments=environments.model_copy(
                update={"catalog": str(Path(environments.catalog).resolve())}),
            verifier=config.verifier, reward=config.reward,
        )}

    def loss_on(self, job: TrainJob) -> str:
        return "the model's own rollout tokens (tool results masked)"

    def card(self, job: TrainJob) -> dict[str, Any]:
        assert job.grpo is not None
        return {f"grpo {k}": getattr(job.grpo.settings, k) for k in (
            "num_generations", "beta", "temperature", "max_tool_calls", "max_parallel_calls",
            "max_total_response_length", "max_tool_response_length",
            "tool_response_truncate_side", "use_vllm")}

    def build_trainer(self, job: TrainJob, progress: Any) -> Any:
        return build_grpo_trainer(job, progress)
