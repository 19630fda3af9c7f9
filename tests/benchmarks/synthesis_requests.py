"""The teacher requests synthesis sends, rendered without a model: the demo's scenarios under the
benchmark planner templates, acted out by synthesis's own agent loop (``AgentLoop``: its prompt
rendering, its step grammar, its real environment tools) against a scripted teacher that makes
each scenario's ground-truth calls and then finishes. Every request the loop sends is recorded,
so the pool holds the first steps, the later steps (with the earlier calls' results in the
prompt), the concluder's requests and the simulated user's, in the lengths synthesis produces
with the prompt code of the checkout it runs in.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field

from agentune.config import load_config
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import benchmark_id, benchmark_template
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.llm.types import ChatRequest, ChatResult, Usage
from agentune.tasks.synthesize.agent_loop import AgentLoop, Verification
from agentune.tasks.synthesize.sampling import SynthesisInputs, plan_synthesis
from agentune.tasks.verifier.rollout import ask_user_tool

from support.planted import ideal_answer
from support.scripted_agents import demo_records, finish_json, step_json

# The demo synthesizes in its benchmark template (kuaiagent) and Meta-Agent ones written in the
# JSON (autogpt) or ReAct protocols; the benchmark templates stand in for those.
PLANNERS = ("kuaiagent", "react", "autogpt")


@dataclass
class ScriptedTeacher:
    """Answers the loop's requests for one scenario: its ground-truth steps, then a finish with
    the facts; the simulated user's question with the hidden information. Records every
    request."""

    record: ScenarioRecord | None = None
    protocol: str = ""
    sent: list[ChatRequest] = field(default_factory=list)
    _steps: int = 0
    _asked: bool = False

    def start(self, record: ScenarioRecord, protocol: str) -> None:
        self.record, self.protocol, self._steps, self._asked = record, protocol, 0, False

    async def chat(self, role: str, request: ChatRequest, *, stage: str) -> ChatResult:
        self.sent.append(request)
        return ChatResult(content=self._answer(request), tool_calls=[], finish_reason="stop",
                          usage=Usage(prompt_tokens=0, completion_tokens=0), model="scripted")

    def _answer(self, request: ChatRequest) -> str:
        assert self.record is not None
        scenario = self.record.scenario
        name = ((request.response_format or {}).get("json_schema") or {}).get("name", "")
        if request.response_format and not name.endswith("_step"):  # the simulated user
            return json.dumps({"reply": scenario.hidden or "nothing to add"})
        if not request.response_format:  # KuaiAgent's concluder writes plain text
            return ideal_answer(scenario, list(scenario.facts))
        if scenario.hidden and not self._asked:
            self._asked = True
            return json.dumps(step_json(self.protocol, [(ask_user_tool().name, {
                "question": "Could you give me the details?"})]), ensure_ascii=False)
        if self._steps < len(scenario.ground_truth):
            calls = [(c.name, c.arguments) for c in scenario.ground_truth[self._steps]]
            self._steps += 1
            return json.dumps(step_json(self.protocol, calls), ensure_ascii=False)
        return json.dumps(finish_json(self.protocol, ideal_answer(scenario, list(scenario.facts))),
                          ensure_ascii=False)


def synthesis_pool() -> list[ChatRequest]:
    """Every teacher request of the demo's train scenarios under each planner template, with
    the demo's synthesis settings (configs/demo.yaml)."""
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    cfg = demo.synthesis.model_copy(update={"templates_per_scenario": len(PLANNERS),
                                             "max_scenarios": None, "use_queries": False})
    catalog, records = demo_records("train")
    training = catalog.training()
    records = [r for r in records if r.scenario.environment in training]
    ask = ask_user_tool()
    # As tasks/synthesize/stage.py's read_inputs builds them; the plan as the flow makes it.
    inputs = SynthesisInputs(
        queries=[], tools={}, templates={benchmark_id(n): benchmark_template(n) for n in PLANNERS},
        scenarios=records, offered={name: (*(t.name for t in catalog.offered_tools(name)),
                                           ask.name) for name in training},
        scenario_tools={**{t.name: t for t in catalog.training_tools()}, ask.name: ask})
    plan = plan_synthesis(inputs, cfg, seed=demo.seed)
    templates, tools = inputs.templates, inputs.all_tools()
    teacher = ScriptedTeacher()
    by_id = {r.scenario.id: r for r in records}

    async def act() -> None:
        async with executor_for(catalog, ToolsConfig()) as executor:
            verification = Verification(by_id, Episode(catalog, executor), VerifierConfig())
            loop = AgentLoop(teacher, executor, tools,  # type: ignore[arg-type]
                             cfg, demo.seed, verification)
            for combo in plan:
                template = templates[combo.template_id]
                teacher.start(by_id[combo.scenario_id], template.protocol)
                await loop.run(combo, template)

    asyncio.run(act())
    return teacher.sent


def benchmark_requests(pool: list[ChatRequest], n: int, max_tokens: int,
                       seed: int = 0) -> list[ChatRequest]:
    """``n`` requests drawn from the pool (seeded), all greedy with ``max_tokens``: half of them
    planning steps under their grammar, half drawn from every request and sent without one
    (free text, as the concluder's), interleaved."""
    rng = random.Random(seed)
    steps = [r for r in pool if r.response_format is not None]
    constrained = rng.sample(steps, n // 2)
    free = rng.sample([r for r in pool if r not in constrained], n - n // 2)
    out = []
    for i in range(n):
        request, grammar = ((constrained[i // 2], True) if i % 2 == 0 and i // 2 < len(constrained)
                            else (free[i // 2], False))
        out.append(request.model_copy(update={
            "max_tokens": max_tokens, "temperature": 0.0, "seed": None, "stop": None,
            "response_format": request.response_format if grammar else None}))
    return out
