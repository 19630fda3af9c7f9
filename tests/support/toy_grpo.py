"""The GRPO toy: a fruit stand with one tool, scenarios whose right move is to call it and then
answer, a tiny model warm-started to do that about half the time, and the helpers to run it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentune.config.tools import ToolsConfig
from agentune.tasks.common.schemas import SCENARIO_FEATURES
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import Call, Scenario, scenario_row
from agentune.tasks.environments.session import DEFAULT_NOW
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef

from support.tiny_models import tiny_llama

HERE = Path(__file__).parent
TEMPLATE = HERE / "toy" / "compact_chat.j2"
"""The toy's chat template: tools by name only, so prompts stay a few dozen tokens."""
REQUESTS = ["What do fruits cost today?", "Tell me the fruit prices.",
            "How much are apples and pears?", "Price list please."]
ANSWER = "apple 3 yuan, pear 4 yuan."
DECLINE = "I do not know."


def toy_catalog(folder: Path) -> Path:
    """A tool catalog file with the fruit stand as its one environment."""
    path = folder / "toy_tools.yaml"
    path.write_text("environments:\n  - class: support.toy.fruit_stand:FruitStand\n",
                    encoding="utf-8")
    return path


def publish_scenarios(store: ArtifactStore, catalog_path: Path) -> VersionRef:
    catalog = load_environments(catalog_path, implementations=ToolsConfig().implementations)
    scenarios = [Scenario(id=f"fruit-{i}", environment="fruit_stand", lang="en",
                          kind="single_call", request=r,
                          ground_truth=[[Call(name="price_list")]], facts=[])
                 for i, r in enumerate(REQUESTS)]

    async def rows() -> list[dict[str, Any]]:
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            return [scenario_row(s, "train", DEFAULT_NOW, await execute_ground_truth(s, episode),
                                 "test") for s in scenarios]

    return store.publish("scenarios", asyncio.run(rows()), features=SCENARIO_FEATURES).ref


CALL = '<tool_call>\n{"name": "price_list", "arguments": {}}\n</tool_call>'


def tool_schemas(catalog_path: Path) -> list[dict[str, Any]]:
    """The tools as TRL renders the GRPO environment's methods (the fruit stand's and ask_user)."""
    from transformers.utils import get_json_schema

    from agentune.tasks.train.grpo_env import tool_method
    from agentune.tasks.verifier.rollout import ask_user_tool

    catalog = load_environments(catalog_path, implementations=ToolsConfig().implementations)
    return [get_json_schema(tool_method(t))
            for t in (*catalog.offered_tools("fruit_stand"), ask_user_tool())]


def conversations(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Warm-start data: per request, a call then the answer, and a plain decline."""
    out = []
    for i, request in enumerate(REQUESTS):
        user = {"role": "user", "content": request}
        call = {"role": "assistant", "content": "", "tool_calls": [{
            "id": f"c{i}", "type": "function",
            "function": {"name": "price_list", "arguments": {}}}]}
        out.append({"messages": [user, call,
                                 {"role": "tool", "tool_call_id": f"c{i}", "content": ANSWER},
                                 {"role": "assistant", "content": ANSWER}],
                    "tools": tools})
        out.append({"messages": [user, {"role": "assistant", "content": DECLINE}],
                    "tools": tools})
    return out


def toy_model(folder: Path, tools: list[dict[str, Any]]) -> Path:
    """A tiny random Llama whose tokenizer has the call, the answer and the decline as single
    tokens: the choice GRPO has to shift is then between a handful of tokens, which a model of
    this size learns in a few steps (the mechanics are what the test is about)."""
    import torch

    torch.manual_seed(0)  # the random weights: the same toy every run
    corpus = REQUESTS + ["tools: price_list ask_user system user assistant tool"]
    return tiny_llama(folder / "model", corpus * 4, chat_template=TEMPLATE.read_text("utf-8"),
                      vocab_size=300, max_positions=512, hidden_size=48,
                      added_tokens=[CALL, ANSWER, DECLINE])


def called_the_tool(*, scenario: Any, rollout: Any, verdict: Any) -> float:
    """The toy's rule reward: 1 when the rollout called the fruit stand's tool, else 0."""
    return 1.0 if any(c.name == "price_list" for c in rollout.calls()) else 0.0
