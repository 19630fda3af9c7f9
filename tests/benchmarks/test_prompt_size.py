"""Prompt size of synthesis: the median tokens of the teacher's first-step requests and of the SFT
rows' prompts (what a row shows before its first assistant turn: system message, tools, request),
before (every shared utility offered, bilingual descriptions, the template's Profile as system
message: ``distractor_tools: null``, ``tool_descriptions: catalog``, ``system_prompt:
template``), after (the defaults: ``distractors_from: shared``) and after with
``distractors_from: session`` (the demo's: the environment's own tools not needed are
distractors too), on the demo's train scenarios under every benchmark planner template.

No model runs: the agent loop renders each combination's first step and hands the request to a
gateway that records it and answers nothing, so the requests are the ones the stage sends. Tokens
are counted with the embedded teacher's tokenizer (SmolLM2, ChatML) as the local provider counts
a request (its chat template over the messages), and the rows with the training chat template
(build_dataset's audit): the figures the demo's prefill time and max_length depend on.

    pytest -m benchmark -s tests/benchmarks/test_prompt_size.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
from typing import Any

import pytest

from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import BENCHMARKS, benchmark_template
from agentune.tasks.common.chat_audit import ChatAuditor
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import (
    ScenarioRecord,
    assign_split,
    load_scenarios,
)
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.errors import EndpointUnreachable
from agentune.tasks.llm.types import ChatRequest, ChatResult, Role
from agentune.tasks.synthesize.agent_loop import AgentLoop, Verification
from agentune.tasks.synthesize.sampling import SynthesisInputs, plan_synthesis
from agentune.tasks.synthesize.trajectory_forms import RowFraming
from agentune.tasks.verifier.rollout import ask_user_tool

pytestmark = pytest.mark.benchmark

DEMO = PROJECT_ROOT / "data" / "demo"
BEFORE = {"distractor_tools": None, "tool_descriptions": "catalog", "system_prompt": "template"}


class RecordingGateway:
    """Records each request and answers none (an outage the loop ends the attempt on)."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def chat(self, role: Role, request: ChatRequest, *, stage: str) -> ChatResult:
        self.requests.append(request)
        raise EndpointUnreachable("recorded, not answered")


def demo_config(**synthesis: Any) -> RunConfig:
    """The demo's run, every train scenario under every benchmark planner."""
    config = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    update = {"max_scenarios": None, "templates_per_scenario": len(BENCHMARKS),
              "use_queries": False, **synthesis}
    return config.model_copy(update={"synthesis": config.synthesis.model_copy(update=update)})


async def first_steps(config: RunConfig) -> tuple[list[ChatRequest], list[dict[str, Any]]]:
    """The first-step request of every combination, and its SFT row's prompt (messages, tools)."""
    cfg = config.synthesis
    tools = config.environments.tools
    tools_cfg = tools.model_copy(update={"sandbox": tools.sandbox.model_copy(
        update={"mode": "unsafe_local"})})  # nothing is executed: no bwrap needed
    catalog = load_environments(DEMO / "tools.yaml", implementations=tools_cfg.implementations)
    records = []
    for scenario in load_scenarios(DEMO / "scenarios.yaml", catalog):
        split = assign_split(scenario, catalog, heldout_fraction=config.scenarios.heldout_fraction,
                             seed=config.seed)
        records.append(ScenarioRecord(scenario, split, cfg.current_time, {}, {}))
    ask = ask_user_tool()
    templates = {benchmark_template(name).id: benchmark_template(name)
                 for name, spec in BENCHMARKS.items() if spec.kind == "planner"}
    inputs = SynthesisInputs(
        [], {}, templates, scenarios=records,
        scenario_tools={**{t.name: t for t in catalog.training_tools()}, ask.name: ask},
        offered={name: (*(t.name for t in catalog.offered_tools(name)), ask.name)
                 for name in catalog.training()},
        shared=frozenset(t.name for spec in catalog.environments.values() if spec.shared
                         for t in spec.tools))
    plan = plan_synthesis(inputs, cfg, seed=config.seed)
    framing = RowFraming.from_config(cfg)
    gateway = RecordingGateway()
    rows = []
    async with executor_for(catalog, tools_cfg) as executor:
        verification = Verification({r.scenario.id: r for r in records},
                                    Episode(catalog, executor), config.verifier)
        for combo in plan:
            tools = framing.tools(inputs.all_tools(), combo.lang)
            loop = AgentLoop(gateway, executor, tools, cfg, 0, verification)
            outcome = await loop.run(combo, templates[combo.template_id])
            system = framing.system(outcome, tools, cfg.current_time)
            rows.append({"messages": [*([{"role": "system", "content": system}] if system else []),
                                      {"role": "user", "content": combo.query}],
                         "tools": [tools[name].to_openai() for name in combo.tool_names]})
    assert len(gateway.requests) == len(plan)  # one first step each
    return gateway.requests, rows


def medians(auditor: ChatAuditor, config: RunConfig) -> dict[str, float]:
    requests, rows = asyncio.run(first_steps(config))
    tokenizer = auditor.tokenizer

    def request_tokens(request: ChatRequest) -> int:
        ids = tokenizer.apply_chat_template(request.messages, tokenize=True, return_dict=True,
                                            add_generation_prompt=True)["input_ids"]
        return len(ids)

    return {"requests": len(requests),
            "synthesis_prompt_tokens_p50": statistics.median(map(request_tokens, requests)),
            "sft_prompt_tokens_p50": statistics.median(
                len(auditor.encode(r["messages"], r["tools"])[0]) for r in rows),
            "tools_offered_p50": statistics.median(len(r["tools"]) for r in rows)}


def test_synthesis_prompts_shrink() -> None:
    auditor = ChatAuditor(resolve_model_path("embedded"), max_length=1_000_000)
    before = medians(auditor, demo_config(**BEFORE))
    after = medians(auditor, demo_config(distractors_from="shared"))  # the project's default
    session = medians(auditor, demo_config(distractors_from="session"))  # the demo's
    keys = ("synthesis_prompt_tokens_p50", "sft_prompt_tokens_p50")
    line = {"benchmark": "synthesis_prompt_size", "tokenizer": "embedded (SmolLM2-135M)",
            "before": before, "after": after, "after_distractors_from_session": session,
            **{f"{key.removesuffix('_tokens_p50')}_ratio": round(after[key] / before[key], 3)
               for key in keys},
            **{f"{key.removesuffix('_tokens_p50')}_ratio_session":
               round(session[key] / before[key], 3) for key in keys}}
    print(json.dumps(line))
    assert before["requests"] == after["requests"] == session["requests"] > 0
    for key in keys:
        assert session[key] < after[key] < before[key]
