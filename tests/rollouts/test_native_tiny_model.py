"""Native tool-call evaluation of a messages-trained model: a tiny model is trained (TRL's
SFTTrainer, assistant-only loss, agentune's ChatML training template) on one demo scenario's
ideal conversation, then acts in that scenario in closed loop through the local provider's
``chat_template`` mode: its ``<tool_call>`` block is read back, run in the environment, and the
verifier passes the trial. The same model untrained does not."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.paths import PROJECT_ROOT, templates_dir
from agentune.tasks.common.chat_audit import CHATML_TRAINING_TEMPLATE
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord, load_scenarios
from agentune.tasks.environments.session import DEFAULT_NOW
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.rollouts.closed_loop import (
    NativePolicy,
    SimulatedUser,
    Trial,
    TrialSettings,
    run_trial,
)

from support.planted import ideal_answer
from support.tiny_models import sft_trainer_for, tiny_llama

DEMO = PROJECT_ROOT / "data" / "demo"
SCENARIO = "shop-status"
TEMPLATE = templates_dir() / CHATML_TRAINING_TEMPLATE


async def _ideal(record: ScenarioRecord, catalog: Any, tools: list[dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The conversation a perfect agent has, tool result included (run for real)."""
    s = record.scenario
    call = s.ground_truth[0][0]
    async with executor_for(catalog, ToolsConfig()) as executor:
        session = Episode(catalog, executor).open(s, record.now)
        result = await executor.execute(call.name, dict(call.arguments),
                                        context=session.context())
    return [{"role": "user", "content": s.request},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_0_0", "type": "function",
                "function": {"name": call.name, "arguments": dict(call.arguments)}}]},
            {"role": "tool", "tool_call_id": "call_0_0", "name": call.name,
             "content": result.content},
            {"role": "assistant", "content": ideal_answer(s, list(s.facts))}]


async def _closed_loop(folder: Path, record: ScenarioRecord, catalog: Any,
                       tools: list[dict[str, Any]]) -> Trial:
    role = RoleConfig(provider="local", model=str(folder), tool_format="chat_template",
                      chat_template=str(TEMPLATE), dtype="float32", device="cpu")
    settings = TrialSettings(trials=1, temperature=0.0, top_p=None, max_tokens=64, max_steps=3,
                             max_user_turns=1, user_max_chars=160, seed=0)
    async with LLMGateway(LLMConfig(student=role, cache=False)) as gateway, \
            executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor, gateway=gateway)
        return await run_trial(record, policy=NativePolicy(gateway, "student", tools, settings,
                                                           "evaluate"),
                               episode=episode, user=SimulatedUser(gateway, settings, "evaluate"),
                               system=None, settings=settings, trial=0, group="native",
                               verifier=VerifierConfig())


@pytest.mark.slow
def test_a_messages_trained_tiny_model_passes_in_closed_loop(tmp_path) -> None:
    import datasets
    from transformers import AutoTokenizer

    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)
    scenario = next(s for s in load_scenarios(DEMO / "scenarios.yaml", catalog)
                    if s.id == SCENARIO)

    async def record() -> ScenarioRecord:
        async with executor_for(catalog, ToolsConfig()) as executor:
            run = await execute_ground_truth(scenario, Episode(catalog, executor))
        return ScenarioRecord(scenario, "heldout", DEFAULT_NOW, run.initial_state,
                              run.expected_state)

    rec = asyncio.run(record())
    # Only the tool it needs is offered: a short sequence trains in seconds.
    tools = [t.to_openai() for t in catalog.offered_tools(scenario.environment)
             if t.name == scenario.ground_truth[0][0].name]
    messages = asyncio.run(_ideal(rec, catalog, tools))
    template = TEMPLATE.read_text(encoding="utf-8")
    base = tiny_llama(tmp_path / "base", [json.dumps([messages, tools], ensure_ascii=False)],
                      chat_template=template, vocab_size=1000, max_positions=4096)

    untrained = asyncio.run(_closed_loop(base, rec, catalog, tools))
    assert not untrained.verdict.passed

    train = datasets.Dataset.from_list([{"messages": messages, "tools": tools}] * 8)
    trainer = sft_trainer_for(base, template, train, tmp_path / "run", max_steps=120,
                              learning_rate=3e-3, lr_scheduler_type="constant",
                              logging_steps=40, save_strategy="no")
    trainer.train()
    tuned = tmp_path / "tuned"
    trainer.save_model(str(tuned))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(tuned))

    trial = asyncio.run(_closed_loop(tuned, rec, catalog, tools))
    calls = [c["function"]["name"] for m in trial.messages for c in m.get("tool_calls") or []]
    assert trial.verdict.passed, (trial.verdict.reasons, trial.messages[1:])
    assert calls == [scenario.ground_truth[0][0].name]
