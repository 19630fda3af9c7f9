"""Fault drill: an API key never lands anywhere a full run writes.

The whole pipeline (every stage of flows/pipeline.py) runs inside Prefect against the test API,
with result persistence on, the teacher and judge on the openai provider (a scripted
OpenAI-compatible server on loopback) and a tiny random student. The key is a fresh random value
in the environment variable the roles name. Afterwards every file under the run's folders (store,
response cache, work dirs, Prefect results), the Prefect home and database, the captured console
output, and every flow run's parameters and state message, task run state message, log line and
artifact read back through the Prefect API is searched for it. The key did reach the server (its
Authorization header), and the scanner does find a planted copy, so the test can fail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.formats import FinalAnswerStep, agent_format

from support.openai_server import OpenAITestServer, Reply
from support.template_sections import sections
from support.tiny_train_model import make_tiny_model

KEY_ENV = "AGENTUNE_DRILL_API_KEY"

# Planner prompts, told apart by what their Format section asks for.
PROTOCOL_MARKERS = (("<|startofthink|>", "modelscope"), ("give_up_and_restart", "toolllama"),
                    ("task_complete", "kuaiagent"), ('"thoughts"', "autogpt"))


def scripted_models(body: dict[str, Any], n: int) -> Reply:
    """Teacher and judge for every stage, by request type: query expansion, Meta-Agent,
    template judge, simulated tool, trajectory judge, KuaiAgent concluder, and planner steps in
    each agent format (answering at once: these trajectories call no tool)."""
    messages = body["messages"]
    first, last = messages[0]["content"], messages[-1]["content"]
    schema = (body.get("response_format") or {}).get("json_schema", {})
    name = schema.get("name")
    if name == "query_expansion":
        count = schema["schema"]["properties"]["queries"]["minItems"]
        return Reply(json.dumps({"queries": [f"Could you check item {n}-{i} of order {i * 7919}"
                                             f" for me, please?" for i in range(count)]}))
    if name == "agent_prompt_template":
        protocol = re.search(r'Set "protocol" to "(\w+)"', last).group(1)  # type: ignore[union-attr]
        return Reply(json.dumps({"name": "Alpha", "protocol": protocol, **sections("Alpha")}))
    if name == "template_judgement":
        def score(tag: str) -> dict[str, Any]:
            answer = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", last, re.DOTALL).group(1)  # type: ignore[union-attr]
            return {"rationale": "ok", "score": 9 if "ALPHA" in answer else 6}
        return Reply(json.dumps({"answer_a": score("answer_a"), "answer_b": score("answer_b")}))
    if name == "answer_judgement":
        return Reply(json.dumps({"rationale": "grounded", "score": 8}))
    if first.startswith("You are the server behind a web API"):
        return Reply(json.dumps({"response": {"status": "ok"}}))
    answer = f"Answer {n}: here is what you asked for, worked out step {n % 7} by step."
    if "Write a helpful answer for the user:" in first:
        return Reply(answer)
    prompt = "\n".join(str(m["content"]) for m in messages)
    protocol = next((p for marker, p in PROTOCOL_MARKERS if marker in prompt), "react")
    thought = "ALPHA knows the answer" if "You are Alpha" in prompt else "I know the answer"
    if protocol == "kuaiagent":
        fmt = agent_format("kuaiagent")
        return Reply(fmt.render(fmt.finish(thought)))  # type: ignore[attr-defined]
    return Reply(agent_format(protocol).render(FinalAnswerStep(answer, thought)))


def files_containing(roots: list[Path], needle: bytes) -> list[Path]:
    """Every file under ``roots`` whose bytes contain ``needle`` (symlinks not followed)."""
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
    return found


async def read_all(read: Any, page: int = 200) -> list[Any]:
    """Every object a Prefect client ``read_*`` method returns, page by page."""
    found: list[Any] = []
    while batch := await read(limit=page, offset=len(found)):
        found += batch
        if len(batch) < page:
            break
    return found


def pipeline_config(tmp_path: Path, server: OpenAITestServer, tiny: Path) -> RunConfig:
    """The demo config, tiny: teacher and judge on the test server, the random student."""
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml").model_dump(mode="json")
    role = {"provider": "openai", "model": "drill-model", "base_url": server.base_url,
            "api_key_env": KEY_ENV, "max_retries": 0, "max_concurrency": 8}
    demo["store"]["root"] = str(tmp_path / "store")
    demo["llm"].update(cache_dir=str(tmp_path / "cache"), teacher=role, judge=role)
    demo["environments"].update(catalog=str(PROJECT_ROOT / "data/demo/tools.yaml"))
    demo["queries"].update(seed_queries=str(PROJECT_ROOT / "data/demo/queries.jsonl"),
                           expansion_max_new=4, expansion_rounds=1, tools_min=1, tools_max=2,
                           likely_tools_max=1)
    demo["templates"].update(max_sets=1, protocols=["react"], benchmark_templates=["react"],
                             unseen_templates=0)
    demo["synthesis"].update(work_dir=str(tmp_path / "synthesis"), max_combinations=6,
                             templates_per_query=2, require_tool_call=False, min_judge_score=6.0,
                             structured_output="json_protocols", retrieval_tools=2,
                             keep_checkpoints=True, guided_attempts=0)
    demo["dataset"].update(general_data=[str(PROJECT_ROOT / "data/demo/general.jsonl")],
                           student_model=str(tiny), max_length=2048, val_fraction=0.2,
                           test_fraction=0.2, agent_to_general=1.0)
    demo["train"].update(base_model=str(tiny), work_dir=str(tmp_path / "runs"), max_steps=2,
                         nproc_per_node=1, precision="fp32", max_length=2048, eval_steps=1000,
                         save_steps=1, keep_checkpoints=True, gradient_accumulation_steps=1,
                         warmup_ratio=0.0)
    demo["train_retriever"] = {"base_model": str(tiny), "max_steps": 2, "batch_size": 4,
                               "work_dir": str(tmp_path / "retriever")}
    demo["evaluate"].update(
        kagentbench_file=str(PROJECT_ROOT / "data/demo/kagentbench_sample.jsonl"),
        max_tokens=8, max_prompt_tokens=400, human_eval={"sample_size": 2},
        models=[{"label": "base", "model": str(tiny), "dtype": "float32"},
                {"label": "tuned", "model": "model@latest", "dtype": "float32"}],
        bfcl={**demo["evaluate"]["bfcl"], "max_per_category": 1, "max_tokens": 8})
    return RunConfig.model_validate(demo)


@pytest.mark.slow
async def test_a_full_run_writes_the_api_key_nowhere(prefect_api, tmp_path: Path, monkeypatch,
                                                     capfd) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import (
        PREFECT_API_DATABASE_CONNECTION_URL,
        PREFECT_HOME,
        PREFECT_RESULTS_LOCAL_STORAGE_PATH,
        PREFECT_RESULTS_PERSIST_BY_DEFAULT,
        temporary_settings,
    )

    from agentune.flows.pipeline import pipeline, pipeline_steps

    key = "sk-drill-" + secrets.token_hex(24)
    monkeypatch.setenv(KEY_ENV, key)
    tiny = make_tiny_model(tmp_path / "tiny")
    results = tmp_path / "prefect-results"
    with OpenAITestServer(scripted_models) as server, temporary_settings({
            PREFECT_RESULTS_PERSIST_BY_DEFAULT: True,
            PREFECT_RESULTS_LOCAL_STORAGE_PATH: results}):
        config = pipeline_config(tmp_path, server, tiny)
        done = await pipeline(config=config)
        requests = list(server.requests)
        database = PREFECT_API_DATABASE_CONNECTION_URL.value()
        home = PREFECT_HOME.value()

    assert list(done) == [name for name, _, _ in pipeline_steps(config)]
    assert done["evaluate"]["outputs"] and done["train"]["outputs"]["model"].startswith("model@")
    # Not vacuous: every stage that calls the teacher or judge did, with the key.
    assert len(requests) >= 10
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {key}"}
    assert any(p.is_file() for p in results.rglob("*")), "no Prefect result was persisted"
    # The work dirs kept what they wrote (checkpoints, job files, logs), so they are scanned too.
    assert any((tmp_path / "synthesis").rglob("*.json*"))
    assert any((tmp_path / "runs").rglob("checkpoint-*")) and any((tmp_path / "runs").rglob("*.log"))

    # Every file the run wrote, the Prefect home and its database.
    roots = [tmp_path, Path(home)]
    db_file = re.sub(r"^sqlite\+aiosqlite:///", "", database or "")
    if db_file and Path(db_file).exists():
        roots.append(Path(db_file).parent)
    needle = key.encode()
    canary = tmp_path / "store" / "canary.txt"
    canary.write_text(f"planted {key}\n")  # the scanner must see a copy where one is written
    assert files_containing(roots, needle) == [canary]
    canary.unlink()
    assert files_containing(roots, needle) == []

    # What Prefect holds, read back through its API.
    async with get_client() as client:
        flow_runs = await read_all(client.read_flow_runs)
        task_runs = await read_all(client.read_task_runs)
        logs = await read_all(client.read_logs)
        artifacts = await read_all(client.read_artifacts)
    texts = [json.dumps(run.parameters, default=str) for run in flow_runs]
    texts += [str(run.state and run.state.message) for run in [*flow_runs, *task_runs]]
    texts += [log.message for log in logs]
    texts += [json.dumps(a.data, default=str) + str(a.description) for a in artifacts]
    assert len(flow_runs) >= len(done) + 1 and task_runs and logs and artifacts
    assert any(str(tmp_path / "store") in json.dumps(r.parameters) for r in flow_runs)
    assert [t for t in texts if key in t] == []
    out, err = capfd.readouterr()
    assert key not in out and key not in err
    assert os.environ[KEY_ENV] == key  # the run left the environment alone
