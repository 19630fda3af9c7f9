"""GRPO with tools in the training job: TRL's GRPOTrainer, the run's scenarios as prompts, the
agentune environments as ``environment_factory`` and the reward registry as reward functions.

Seed 003's multi-turn knobs map onto TRL's: ``max_tool_calls`` -> ``max_tool_calling_iterations``
(tool-calling turns), ``max_total_response_length`` -> ``max_completion_length`` (the rollout's
tokens, tool results included), ``num_generations`` is the group size and ``beta`` the KL
coefficient; ``max_parallel_calls`` and ``max_tool_response_length`` with its truncation side are
applied by the environments (see ``grpo_env``); ``tool_parser_format: hermes`` is TRL's Qwen
response template, which reads the ``<tool_call>`` JSON blocks agentune's training template
writes. TRL masks the tool-result tokens from the loss. Rollouts are generated in the training
processes (``use_vllm`` hands them to vLLM on GPUs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentune.tasks.environments.catalog import configured_environments
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.train.examples import read_examples
from agentune.tasks.train.grpo_env import (
    environment_classes,
    reward_functions,
)
from agentune.tasks.verifier.rewards import RewardModel


def hermes_response_template() -> Any:
    """TRL's parser for Hermes ``<tool_call>`` blocks in a ChatML turn (its Qwen template)."""
    from trl.chat_template_utils import qwen3_template

    return qwen3_template


def _agent_trainer_class() -> type:
    from trl import GRPOTrainer

    class AgentGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        """Marks each generation as a new turn of every rollout's environment, so the calls of
        one turn can be counted (``max_parallel_calls``)."""

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            for environment in self.environments or ():
                end_turn = getattr(environment, "_end_turn", None)
                if end_turn is not None:
                    end_turn()
            return super()._generate_single_turn(*args, **kwargs)

    return AgentGRPOTrainer


def build_grpo_trainer(job: Any, progress: Any) -> Any:
    from datasets import Dataset
    from trl import GRPOConfig

    from agentune.tasks.train.job import common_args, job_tokenizer, peft_config

    assert job.grpo is not None
    grpo, environments = job.grpo.settings, job.grpo.environments
    catalog = configured_environments(environments)
    scenarios_file = job.grpo.scenarios_file
    rows = json.loads(Path(scenarios_file).read_text(encoding="utf-8"))
    records = {r.scenario.id: r for r in read_scenario_rows(rows, scenarios_file)}
    tokenizer = job_tokenizer(job)
    tokenizer.response_template = hermes_response_template()
    episode = Episode(catalog, executor_for(catalog, environments.tools), stage="train")
    factories = environment_classes(catalog, records, episode, grpo, tokenizer)
    reward = RewardModel.from_config(job.grpo.reward)
    eos = [tokenizer.eos_token_id] + ([tokenizer.pad_token_id]
                                      if tokenizer.pad_token_id is not None else [])
    funcs, weights = reward_functions(reward, job.grpo.verifier, eos)
    vllm = {"use_vllm": grpo.use_vllm, "vllm_mode": grpo.vllm_mode}
    if grpo.vllm_server_base_url:
        vllm["vllm_server_base_url"] = grpo.vllm_server_base_url
    args = GRPOConfig(
        **common_args(job, GRPOConfig, has_val=False),
        num_generations=grpo.num_generations,
        beta=grpo.beta,
        temperature=grpo.temperature,
        max_completion_length=grpo.max_total_response_length,
        max_tool_calling_iterations=grpo.max_tool_calls,
        reward_weights=weights,
        **vllm,
    )
    prompts = read_examples(Path(job.train_file))
    return _agent_trainer_class()(
        model=job.base_model,
        reward_funcs=funcs,
        args=args,
        train_dataset=Dataset.from_list(prompts),
        processing_class=tokenizer,
        callbacks=[progress],
        peft_config=peft_config(job),
        environment_factory=factories,
    )
