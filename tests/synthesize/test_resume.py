"""Kill and resume: `agentune run synthesize` in a subprocess against the scripted test server is
killed with SIGKILL after some trajectories are checkpointed, then run again. The second run
finishes with every combination exactly once (in `trajectories` or as a rejected trajectory),
and the server never sees a request twice, except the one that was in flight at the kill."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentune.config import RunConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import OpenAITestServer
from support.synthesis_inputs import ScriptedTeacher, planned, publish_inputs, run_config

HANG_AT = 14
"""The request (by arrival number) the server holds unanswered while the run is killed."""


def body_hash(body: dict[str, Any]) -> str:
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def checkpoint_lines(work_dir: Path) -> int:
    """Complete lines only: a line torn by the kill is not a checkpointed trajectory."""
    return sum(p.read_bytes().count(b"\n") for p in work_dir.glob("*/checkpoint.jsonl"))


def wait_for(condition: Any, proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class Killed:
    """A run of ``agentune run synthesize`` killed while the server held request HANG_AT."""

    command: list[str]
    env: dict[str, str]
    done_at_kill: int
    """Trajectories in the checkpoint at the kill."""
    held: str
    """The held request's body hash."""


def run_and_kill(config: RunConfig, server: OpenAITestServer, tmp_path: Path) -> Killed:
    """Start the stage with one teacher and one judge request at a time (when the held request
    arrives, every earlier answer has come back, and is in the response cache a moment later),
    and SIGKILL it once the held request has arrived."""
    from prefect.settings import PREFECT_API_URL

    roles = {r: getattr(config.llm, r).model_copy(update={"max_concurrency": 1})
             for r in ("teacher", "judge")}
    config = config.model_copy(update={"llm": config.llm.model_copy(update=roles)})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    command = [str(Path(sys.executable).parent / "agentune"), "run", "synthesize",
               "--config", str(path)]
    # The test session's Prefect API: no ephemeral server of its own to leave behind.
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(server.requests) > HANG_AT, proc, 240, "the held request")
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Counted once the run is dead: a line written between a count and the kill would be
    # checkpointed work the count missed.
    done_at_kill = checkpoint_lines(Path(config.synthesis.work_dir))
    return Killed(command, env, done_at_kill, body_hash(server.requests[HANG_AT].body))


def resume(killed: Killed) -> str:
    """Run the stage again to the end; its output."""
    again = subprocess.run(killed.command, env=killed.env, capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    return again.stdout.decode() + again.stderr.decode()


def paid_once(server: OpenAITestServer, held: str) -> None:
    """No request body reached the server twice, but the one held at the kill."""
    counts = Counter(body_hash(r.body) for r in server.requests)
    repeated = {h for h, n in counts.items() if n > 1}
    assert repeated <= {held} and counts[held] <= 2


def test_killed_run_resumes_every_trajectory_once_without_repeating_a_teacher_call(
        prefect_api: None, tmp_path: Path) -> None:
    store: ArtifactStore = publish_inputs(tmp_path / "store")
    teacher = ScriptedTeacher(hang_at=HANG_AT)
    with OpenAITestServer(teacher) as server:
        config = run_config(tmp_path, server)
        plan = planned(store, config)
        killed = run_and_kill(config, server, tmp_path)
        assert 0 < killed.done_at_kill < len(plan)
        assert not list(store.root.glob("trajectories"))  # nothing published by the killed run
        teacher.hang_at = None
        sent_before = len(server.requests)
        output = resume(killed)

    frame = store.read("trajectories")
    rejects = store.read("rejects")
    rejected = list(rejects[~rejects.item_id.str.contains("/step")].item_id)
    finished = list(frame.id) + rejected
    assert sorted(finished) == sorted(c.id for c in plan)  # every combination exactly once
    assert len(frame) == len(set(frame.id)) and len(frame) > 0
    assert len(server.requests) > sent_before  # the second run had work left
    paid_once(server, killed.held)
    # The checkpointed trajectories were taken from the checkpoint, not run again (their teacher
    # answers would all be cache hits, so the request count alone could not tell).
    assert f"({killed.done_at_kill} from the checkpoint)" in output, output[-3000:]
    assert not any(Path(run_config(tmp_path, server).synthesis.work_dir).glob(
        "*/checkpoint.jsonl"))  # removed once published


def test_killed_scenario_run_resumes_every_attempt_once_without_repeating_a_paid_call(
        prefect_api: None, tmp_path: Path) -> None:
    """The same drill on scenarios with k = 2 attempts run in full: every attempt of every
    scenario x template ends in `attempts` exactly once, the first run's answered attempts come
    from the checkpoint, and no teacher or judge request is paid for twice."""
    from support.scripted_agents import OneStepTeacher, publish_demo_scenarios

    store: ArtifactStore = publish_inputs(tmp_path / "store")
    scenarios = publish_demo_scenarios(
        store, only=lambda r: r["id"] in ("shop-tracking", "shop-status", "trv-flight-and-train"),
        split="train")
    teacher = OneStepTeacher(scenarios, hang_at=HANG_AT)
    with OpenAITestServer(teacher) as server:
        config = run_config(tmp_path, server, scenarios="scenarios", use_queries=False,
                            max_scenarios=len(scenarios), templates_per_scenario=2, attempts=2,
                            stop_at_first_pass=False, structured_output="all", concurrency=1)
        config = config.model_copy(update={"environments": config.environments.model_copy(
            update={"catalog": str(PROJECT_ROOT / "data" / "demo" / "tools.yaml")})})
        killed = run_and_kill(config, server, tmp_path)
        assert killed.done_at_kill > 0
        assert not list(store.root.glob("attempts"))  # nothing published by the killed run
        teacher.hang_at = None
        sent_before = len(server.requests)
        output = resume(killed)

    attempts = store.read("attempts")
    keys = Counter(zip(attempts.scenario_id, attempts.template_id, attempts.attempt, strict=True))
    assert len(keys) == len(scenarios) * 2 * 2 and set(keys.values()) == {1}, keys
    # The first attempt (greedy) answers without the facts, the second passes: pass@2 = 1.
    assert set(attempts[attempts.attempt == 0].passed) == {False}
    assert set(attempts[attempts.attempt == 1].passed) == {True}
    assert len(store.read("trajectories")) == len(scenarios) * 2
    assert len(server.requests) > sent_before  # the second run had work left
    paid_once(server, killed.held)
    # The checkpoint holds attempts; the log counts the scenario x template combinations whose
    # every attempt was checkpointed (the rest resume attempt by attempt).
    resumed = re.findall(r"\((\d+) from the checkpoint\)", output)
    assert resumed and int(resumed[-1]) >= 1, output[-3000:]
