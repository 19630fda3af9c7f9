"""Synthesis inputs in a temporary store and a scripted teacher, shared by the synthesize flow, resume and embedded-teacher tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import BENCHMARKS, benchmark_id, benchmark_template
from agentune.tasks.build_templates.stage import TEMPLATE_FEATURES
from agentune.tasks.common.schemas import QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.synthesize.sampling import (
    SynthesisInputs,
    read_catalog,
    read_queries,
    read_templates,
    sample_combinations,
)
from agentune.tasks.tools.catalog import load_tool_catalog

from support.openai_server import Action, Hang, OpenAITestServer, Reply

CATALOG = {t.name: t for t in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml")}


TOOL_NAMES = ("calculator", "unit_convert", "get_weather", "date_calculate")


@dataclass(frozen=True)
class Plan:
    """What the scripted teacher does for a query: the calls, in order, then the answer."""

    text: str
    likely: tuple[str, ...]
    calls: tuple[tuple[str, dict[str, Any]], ...]
    answer: str


PLANS = {
    "q-mul": Plan("What is 17 times 23?", ("calculator",),
                  (("calculator", {"expression": "17*23"}),), "17 times 23 is 391."),
    "q-pow": Plan("Compute 2 to the power of 10.", ("calculator",),
                  (("calculator", {"expression": "2**10"}),), "2 to the power of 10 is 1024."),
    "q-rain": Plan("Will it rain in Oslo tomorrow?", ("get_weather",),
                   (("get_weather", {"location": "Oslo", "date": "2025-06-03"}),),
                   "Tomorrow Oslo stays dry."),
    "q-km": Plan("How many miles are 42 km, and what is twice that?",
                 ("unit_convert", "calculator"),
                 (("unit_convert", {"value": 42, "from_unit": "km", "to_unit": "mi"}),
                  ("calculator", {"expression": "26.0976*2"})), "42 km is 26.1 miles; twice "
                 "that is 52.2 miles."),
    "q-hello": Plan("Say hello in French.", (), (), "Bonjour !"),
    # The teacher calls a tool for a query that needs none: rejected (unneeded_tool_call).
    "q-joke": Plan("Tell me a short joke about cats.", (),
                   (("calculator", {"expression": "9*9"}),), "Cats have nine lives."),
}


def publish_inputs(root: Path) -> ArtifactStore:
    store = ArtifactStore(root)
    queries = [{"id": qid, "text": p.text, "lang": "en", "set_id": "set-en-000", "source": "seed",
                "parent_ids": [], "scenario": "mixed",
                "tool_ids": list(dict.fromkeys(p.likely + ("calculator", "date_calculate"))),
                "pii_placeholders": [], "likely_tool_ids": list(p.likely),
                "tool_hints": list(p.likely)} for qid, p in PLANS.items()]
    store.publish("queries", queries, features=QUERY_FEATURES)
    store.publish("tools", [CATALOG[n].to_row() for n in TOOL_NAMES], features=TOOL_FEATURES)
    rows = []
    for name in ("kuaiagent", "kuaiagent_concluder", "react", "autogpt"):
        spec, template = BENCHMARKS[name], benchmark_template(name)
        rows.append({"id": benchmark_id(name), "source": "benchmark", "kind": spec.kind,
                     "set_id": None, "name": name, "lang": spec.lang, "protocol": spec.protocol,
                     "text": template.text, "sections": {}, "style": None, "score": None,
                     "n_instances": 0, "n_kept_instances": None, "kept": True, "reserved": False, "reason": None,
                     "detail": ""})
    dropped = dict(rows[-1], id="tpl-dropped", source="meta-agent", kept=False,
                   reason="below_threshold")
    store.publish("templates", rows + [dropped], features=TEMPLATE_FEATURES)
    return store


def run_config(root: Path, server: OpenAITestServer, **synthesis: Any) -> RunConfig:
    role = {"provider": "openai", "model": "test-model", "base_url": server.base_url,
            "max_retries": 0, "max_concurrency": 4}
    return RunConfig.model_validate({
        "store": {"root": str(root / "store")},
        "llm": {"teacher": role, "judge": role, "cache_dir": str(root / "cache")},
        # Plain queries (no scenarios): the unverified path, gated and judged.
        "synthesis": {"scenarios": None, "judgements": None, "use_queries": True,
                      "templates_per_query": 2, "judge": True, "min_judge_score": 6.0,
                      "concurrency": 3, "work_dir": str(root / "work"), **synthesis},
        "environments": {"tools": {"simulation": {"error_rate": 0.0}}},
    })


def planned(store: ArtifactStore, config: RunConfig) -> list[Any]:
    cfg = config.synthesis
    tools = read_catalog(store.read(cfg.catalog), "tools")
    inputs = SynthesisInputs(read_queries(store.read(cfg.queries), "queries", tools), tools,
                             read_templates(store.read(cfg.templates), "templates"))
    return sample_combinations(inputs, cfg, seed=config.seed)


class ScriptedTeacher:
    """Answers by what a request is: a simulated API, the judge, a concluder, or a planning
    step in KuaiAgent, AutoGPT or ReAct. A planning step makes the query's next call not yet in
    the prompt's memory, then finishes. Calculator calls for q-pow first name a wrong argument
    (asked again: the retry request carries the problem). ``hang_at``: that request (by arrival
    number) hangs until the server stops."""

    def __init__(self, hang_at: int | None = None) -> None:
        self.hang_at = hang_at

    def __call__(self, body: dict[str, Any], n: int) -> Action:
        reply = self.reply(body)
        if self.hang_at is not None and n == self.hang_at:
            return Hang(600, reply)
        return reply

    def reply(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        first = messages[0]["content"]
        schema_name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if first.startswith("You are the server behind a web API"):
            return Reply(json.dumps({"response": {"location": "Oslo", "rain_mm": 0,
                                                  "condition": "dry"}}))
        if schema_name == "answer_judgement":
            return Reply(json.dumps({"rationale": "grounded", "score": 8}))
        plan = next(p for p in PLANS.values() if p.text in first)
        if "Write a helpful answer for the user:" in first:
            return Reply(plan.answer)
        todo = [(tool, args) for tool, args in plan.calls
                if str(next(iter(args.values()))) not in first.split(plan.text, 1)[1]]
        retried = len(messages) > 1
        if todo and plan is PLANS["q-pow"] and not retried:
            todo = [("calculator", {"expr": "2**10"})]
        if "task_complete" in first:
            tool, args = todo[0] if todo else ("task_complete", {})
            return Reply(json.dumps({"task_name": f"use {tool}",
                                     "command": {"name": tool, "args": args}}))
        if '"thoughts"' in first:
            tool, args = todo[0] if todo else ("finish", {"response": plan.answer})
            return Reply(json.dumps({"thoughts": {"text": f"use {tool}"},
                                     "command": {"name": tool, "args": args}}))
        if todo:
            tool, args = todo[0]
            return Reply(f"Thought: use {tool}\nAction: {tool}\nAction Input: {json.dumps(args)}")
        return Reply(f"Thought: I now know the final answer\nFinal Answer: {plan.answer}")
