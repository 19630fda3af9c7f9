"""GRPO with tools: agentune's environments as TRL environments, the reward registry as TRL
rewards, and a run on a toy environment (one tool, a rule reward) whose mean reward rises.

The toy (tests/support/toy_grpo.py) is a fruit stand with one tool; its scenarios are answered
by calling it. A tiny random Llama, whose tokenizer has the call and the two plain answers as
single tokens, is warm-started by a few SFT steps to call the tool about as often as it declines;
GRPO with the rule reward "called the tool" then has a choice to shift, and a fixed, seeded
number of steps must raise the mean reward well above where it started.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.config.tools import ToolsConfig
from agentune.config.train import GRPOSettings
from agentune.config.verifier import RewardConfig, VerifierConfig
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.grpo_env import (
    environment_classes,
    reward_functions,
    tool_method,
    truncate,
)
from agentune.tasks.verifier.rewards import RewardModel

from support.scripted_agents import demo_records
from support.toy_grpo import (
    CALL,
    TEMPLATE,
    conversations,
    publish_scenarios,
    tool_schemas,
    toy_catalog,
    toy_model,
)


def test_tool_methods_mirror_the_tool_schema() -> None:
    from transformers.utils import get_json_schema

    catalog, _ = demo_records()
    tool = next(t for t in catalog.offered_tools("travel") if t.name == "search_flights")
    schema = get_json_schema(tool_method(tool))["function"]
    assert schema["name"] == "search_flights"
    assert set(schema["parameters"]["properties"]) == set(tool.parameters["properties"])
    assert set(schema["parameters"]["required"]) == set(tool.parameters["required"])


def test_truncation_sides() -> None:
    text = "".join(f"{i:02d}" for i in range(100))  # 200 characters
    assert truncate(text, None, 10, "right").startswith("000102")
    assert truncate(text, None, 10, "left").endswith("9899")
    middle = truncate(text, None, 10, "middle")
    assert middle.startswith("0001") and middle.endswith("9899") and "truncated" in middle
    assert truncate("short", None, 10, "middle") == "short"


@pytest.fixture(scope="module")
def demo() -> Any:
    return demo_records("train")


async def test_environments_run_calls_limit_parallel_ones_and_score_rollouts(demo: Any) -> None:
    catalog, records = demo
    by_id = {r.scenario.id: r for r in records}
    record = by_id["trv-flights-bj-sh"]
    async with executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor)
        limits = GRPOSettings(max_parallel_calls=1, max_tool_response_length=64,
                              tool_response_truncate_side="middle")
        classes = environment_classes(catalog, {record.scenario.id: record}, episode, limits,
                                      tokenizer=None)
        env = classes["travel"]()
        env.reset(scenario_id=record.scenario.id, prompt=[])
        args = dict(record.scenario.ground_truth[0][0].arguments)
        first = await env.search_flights(**args)
        second = await env.search_flights(**args)  # same turn: over max_parallel_calls = 1
        assert "CA1501" in first and "not run" in second
        env._end_turn()
        assert "CA1501" in await env.search_flights(**args)
        reward = RewardModel.from_config(RewardConfig(functions=["verifier", "outcome"]))
        funcs, weights = reward_functions(reward, VerifierConfig(), eos_ids=[0])
        assert weights == [1.0, 1.0]
        prompt = [{"role": "user", "content": record.scenario.request}]
        good = [{"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "search_flights",
                                                      "arguments": args}}]},
                {"role": "tool", "name": "search_flights", "content": first},
                {"role": "assistant", "content": "CA1501 and MU5102 fly that day."}]
        bad = [{"role": "assistant", "content": "No idea."}]
        envs = [classes["travel"](), classes["travel"]()]
        for e in envs:
            e.reset(scenario_id=record.scenario.id)
        values = [await f(prompts=[prompt, prompt], completions=[good, bad],
                          completion_ids=[[5, 0], [7, 0]], environments=envs) for f in funcs]
        assert values[1] == [1.0, -1.0]  # outcome
        assert values[0][0] == pytest.approx(1.0) and values[0][1] < 0.5  # the verifier


def _warm_start(model: Path, tools: list[dict[str, Any]], out: Path) -> Path:
    from datasets import Dataset, Features, Json, List

    from support.tiny_models import sft_trainer_for

    data = Dataset.from_list(conversations(tools) * 2,
                             features=Features({"messages": List(Json()), "tools": List(Json())}))
    trainer = sft_trainer_for(model, TEMPLATE.read_text("utf-8"), data, out / "sft",
                              max_steps=40, learning_rate=1e-2,
                              lr_scheduler_type="constant", save_strategy="no", use_cpu=True,
                              disable_tqdm=True, seed=0)
    trainer.train()
    trainer.save_model(str(out / "warm"))
    return out / "warm"


def grpo_config(store: ArtifactStore, catalog: Path, model: Path, tmp_path: Path,
                **grpo: Any) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(store.root)}, "environments": {"catalog": str(catalog)},
        "reward": {"functions": ["support.toy_grpo:called_the_tool"]},
        "train": {"method": "grpo", "base_model": str(model), "chat_template": str(TEMPLATE),
                  "precision": "fp32", "max_length": 512, "per_device_batch_size": 8,
                  "gradient_accumulation_steps": 1, "warmup_ratio": 0.0,
                  "lr_scheduler": "constant_with_warmup", "logging_steps": 1,
                  "save_steps": 1000, "gradient_checkpointing": False,
                  "work_dir": str(tmp_path / "runs"),
                  "grpo": {"num_generations": 4, "beta": 0.0, "learning_rate": 3e-3,
                           "max_steps": 16, "max_tool_calls": 1,
                           "max_total_response_length": 48} | grpo}})


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("toy")
    catalog = toy_catalog(root)
    tools = tool_schemas(catalog)
    warm = _warm_start(toy_model(root, tools), tools, root)
    store = ArtifactStore(root / "store")
    publish_scenarios(store, catalog)
    return {"catalog": catalog, "warm": warm, "store": store}


def test_grpo_on_the_toy_environment_raises_the_mean_reward(toy: dict[str, Any],
                                                            tmp_path: Path) -> None:
    from agentune.tasks.train.sft_trainer import build_trainer
    from agentune.tasks.train.stage import plan_training, prepare_launch

    config = grpo_config(toy["store"], toy["catalog"], toy["warm"], tmp_path)
    plan = plan_training(config, toy["store"])
    assert plan.method == "grpo" and len(plan.train_examples) == 4
    assert plan.reward and plan.reward[0]["name"] == "support.toy_grpo:called_the_tool"
    _, _, job = prepare_launch(plan)
    trainer = build_trainer(job.model_copy(update={"deepspeed_config": None}))
    trainer.train()
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    calls = [e["tools/call_frequency"] for e in trainer.state.log_history if "reward" in e]
    message = (f"mean reward per step over 16 seeded GRPO steps: {[round(r, 3) for r in rewards]}"
               f" (tool calls per rollout: {[round(c, 3) for c in calls]})")
    assert len(rewards) == 16, message
    start, end = mean(rewards[:4]), mean(rewards[-4:])
    assert end > start + 0.25 and end >= 0.75, message
    print(message)


async def test_grpo_runs_zero3_and_publishes_its_lineage(toy: dict[str, Any], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from agentune.tasks.train.stage import plan_training, publish_model, run_training

    # The training processes import the toy environment and reward by module name, as they
    # would a user's: tests/ goes on their PYTHONPATH.
    tests = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (tests, os.environ.get("PYTHONPATH")) if p))

    config = grpo_config(toy["store"], toy["catalog"], toy["warm"], tmp_path, max_steps=2)
    config.train.nproc_per_node = 2
    config.train.per_device_batch_size = 4
    plan = plan_training(config, toy["store"])
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    assert result["world_size"] == 2 and result["global_step"] == 2
    assert result["signal"] == "reward" and result["final_signal"] is not None
    manifest = publish_model(toy["store"], plan, result, wall_seconds=1.0, estimate=None)
    params = manifest.params
    train = params["train"]
    assert train["method"] == "grpo" and train["base_model"]["name"] == str(toy["warm"])
    assert [t["name"] for t in params["reward"]] == ["support.toy_grpo:called_the_tool"]
    assert train["grpo"]["max_tool_calls"] == 1 and train["dpo"] is None
    assert [p["name"] for p in manifest.parents] == ["scenarios"]
    assert manifest.stats["lineage"]["method"] == "grpo"
    assert toy["store"].file(manifest.ref, "reward_curve.png").stat().st_size > 1000
    assert json.loads(Path(plan.job.grpo.scenarios_file).read_text())  # the job's scenarios


def test_tool_results_carry_no_loss(toy: dict[str, Any], tmp_path: Path) -> None:
    from agentune.tasks.train.sft_trainer import build_trainer
    from agentune.tasks.train.stage import plan_training, prepare_launch

    plan = plan_training(grpo_config(toy["store"], toy["catalog"], toy["warm"], tmp_path),
                         toy["store"])
    _, _, job = prepare_launch(plan)
    trainer = build_trainer(job.model_copy(update={"deepspeed_config": None}))
    batch = [row for row in trainer.train_dataset for _ in range(4)]
    trainer.model.train()
    out = trainer._generate_and_score_completions(batch)
    tokenizer = trainer.processing_class
    masked = []
    for ids, completion, tool in zip(out["completion_ids"].tolist(),
                                     out["completion_mask"].tolist(),
                                     out["tool_mask"].tolist(), strict=True):
        kept = [i for i, c in zip(ids, completion, strict=True) if c]
        flags = tool[:len(kept)]
        masked.append(tokenizer.decode([i for i, f in zip(kept, flags, strict=True) if not f]))
    called = [m for m in masked if m]
    assert called, "no rollout called the tool"
    # What carries no loss is exactly the tool turn: its result, between the model's turns.
    assert all("apple 3 yuan" in m and CALL not in m for m in called), called
