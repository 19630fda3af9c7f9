"""Crash drills: `agentune run synthesize` in a subprocess against the scripted
test server, killed with SIGKILL at three seeded-random points and resumed; stopped by the
run's token budget, then continued with a raised one; and killed at 80 % of its budget, then
resumed: it stops at the cap, the first process's spend counted.

What "completed" means. A teacher request is completed when its answer is committed to the
gateway's response cache (or its whole trajectory to the synthesis checkpoint, which is written
after all of its answers were cached). A kill can land after the server sent an answer but before
the client committed it, or while requests are in flight: those answers were never recorded, so
the next run has to ask again, and it does. The drills count, on the server, every request body
that arrives in more than one run: none of them may be a request completed before the kill
(checked against the cache file the killed run left), and there are never more of them than
requests could be in flight at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentune.cli import main as agentune_cli
from agentune.config import RunConfig
from agentune.tasks.llm.tokens import estimate_tokens, prompt_text
from agentune.tasks.llm.types import ChatRequest
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import Action, OpenAITestServer
from support.synthesis_inputs import ScriptedTeacher, planned, publish_inputs, run_config

SEED = 20251104
IN_FLIGHT = 4
"""Teacher (2) plus judge (2) requests at once: the most a kill can catch unanswered."""


def cache_key(body: dict[str, Any]) -> str:
    """The gateway's cache key of a request as it arrived (the provider sends the model plus
    every set field of the ChatRequest)."""
    fields = {k: v for k, v in body.items() if k != "model"}
    return ChatRequest.model_validate(fields).cache_key("openai", body["model"])


def cached_keys(cache_dir: Path) -> set[str]:
    path = cache_dir / "responses.sqlite"
    if not path.exists():
        return set()
    with sqlite3.connect(path) as db:
        return {key for (key,) in db.execute("SELECT key FROM responses")}


def checkpoint_lines(work_dir: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in work_dir.glob("*/checkpoint.jsonl"))


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class KillingTeacher(ScriptedTeacher):
    """The scripted teacher that SIGKILLs the client when ``kill_when(arrivals this run)`` holds,
    as a request arrives (before answering it)."""

    def __init__(self) -> None:
        super().__init__()
        self.pid: int | None = None
        self.kill_when: Callable[[int], bool] | None = None
        self.arrivals = 0
        self.killed_at: dict[str, int] | None = None
        self.work_dir: Path | None = None
        self._lock = threading.Lock()

    def arm(self, pid: int, kill_when: Callable[[int], bool] | None) -> None:
        with self._lock:
            self.pid, self.kill_when, self.arrivals, self.killed_at = pid, kill_when, 0, None

    def __call__(self, body: dict[str, Any], n: int) -> Action:
        with self._lock:
            self.arrivals += 1
            if self.kill_when is not None and self.pid is not None and self.killed_at is None \
                    and self.kill_when(self.arrivals):
                assert self.work_dir is not None
                self.killed_at = {"request": n, "arrival_in_run": self.arrivals,
                                  "checkpointed": checkpoint_lines(self.work_dir)}
                os.kill(self.pid, signal.SIGKILL)
        return self.reply(body)


class MeteredTeacher(KillingTeacher):
    """Bills like a provider: each answer reports the prompt's tokens (as the gateway estimates
    them) and the answer's, and ``billed`` sums every answer sent, to a live client or not.
    ``kill_at``: SIGKILL the client as the first request arrives once ``billed`` reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.billed = 0
        self.kill_at: int | None = None
        self.billed_at_kill: int | None = None

    def __call__(self, body: dict[str, Any], n: int) -> Action:
        reply = self.reply(body)
        fields = {k: v for k, v in body.items() if k != "model"}
        prompt = estimate_tokens(prompt_text(ChatRequest.model_validate(fields)))
        completion = estimate_tokens(reply.content or "")
        with self._lock:
            if self.kill_at is not None and self.pid is not None and self.billed_at_kill is None \
                    and self.billed >= self.kill_at:
                self.billed_at_kill = self.billed
                os.kill(self.pid, signal.SIGKILL)
            # Billed even when the client is gone: a provider charges for the work it did.
            self.billed += prompt + completion
        return dataclasses.replace(reply, prompt_tokens=prompt, completion_tokens=completion)


def write_config(config: RunConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    return path


def drill_config(root: Path, server: OpenAITestServer, **llm: Any) -> RunConfig:
    config = run_config(root, server)
    roles = {role: getattr(config.llm, role).model_copy(update={"max_concurrency": 2})
             for role in ("teacher", "judge")}
    return config.model_copy(update={"llm": config.llm.model_copy(update={**roles, **llm})})


def agentune_run(config_path: Path) -> subprocess.Popen[bytes]:
    from prefect.settings import PREFECT_API_URL

    command = [str(Path(sys.executable).parent / "agentune"), "run", "synthesize",
               "--config", str(config_path)]
    # The test session's Prefect API: no ephemeral server of its own to leave behind.
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes], timeout_s: float = 240) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.decode() + err.decode()


def nothing_half_published(store: ArtifactStore) -> None:
    """No synthesis output, no leftover temporary folder, and every version verifies."""
    assert not store.versions("trajectories") and not store.versions("rejects")
    assert not list(store.root.glob("*/.tmp-*"))
    assert agentune_cli(["verify", "--store", str(store.root)]) == 0


def assert_each_combination_once(store: ArtifactStore, plan: list[Any]) -> None:
    frame = store.read("trajectories")
    rejects = store.read("rejects")
    rejected = list(rejects[~rejects.item_id.str.contains("/step")].item_id)
    assert sorted(list(frame.id) + rejected) == sorted(c.id for c in plan)
    assert len(frame) > 0


@pytest.mark.slow
def test_kill_9_at_three_random_points_then_resume(prefect_api: None, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    store = publish_inputs(tmp_path / "store")
    teacher = KillingTeacher()
    # Small latency: a run takes a few seconds, so kills land mid-run with requests in flight.
    with OpenAITestServer(teacher, latency_s=lambda: rng.uniform(0.02, 0.08)) as server:
        config = drill_config(tmp_path, server)
        path = write_config(config, tmp_path / "run.yaml")
        plan = planned(store, config)
        work_dir, cache_dir = Path(config.synthesis.work_dir), Path(config.llm.cache_dir)
        teacher.work_dir = work_dir
        early, after = rng.randint(1, 2), rng.randint(3, 8)
        # Late: 3-4 trajectories left, so requests still arrive (three run at once).
        middle, late = rng.randint(2, len(plan) // 2 - 1), len(plan) - rng.randint(3, 4)
        kill_points: list[tuple[str, Callable[[int], bool]]] = [
            # Before any trajectory is checkpointed: each needs 2+ answers and the first two
            # requests are two trajectories' first steps.
            ("early", lambda n: n == early),
            ("middle", lambda n: n >= after and checkpoint_lines(work_dir) >= middle),
            ("late", lambda n: checkpoint_lines(work_dir) >= late),
        ]
        runs: list[list[Any]] = []  # the requests each run sent
        completed_at_kill: list[set[str]] = []  # cache contents after each kill
        kills = []
        for name, when in kill_points:
            sent_before = len(server.requests)
            proc = agentune_run(path)
            teacher.arm(proc.pid, when)
            code, output = finish(proc)
            assert code == -signal.SIGKILL, (name, code, output[-2000:])
            assert teacher.killed_at is not None
            kills.append({"point": name, **teacher.killed_at})
            runs.append(server.requests[sent_before:])
            completed_at_kill.append(cached_keys(cache_dir))
            nothing_half_published(store)
        assert kills[0]["checkpointed"] == 0
        assert 0 < kills[1]["checkpointed"] < kills[2]["checkpointed"] < len(plan)

        sent_before = len(server.requests)
        proc = agentune_run(path)
        teacher.arm(proc.pid, None)
        code, output = finish(proc)
        assert code == 0, output[-3000:]
        runs.append(server.requests[sent_before:])

    assert_each_combination_once(store, plan)
    resumed = checkpoint_lines(work_dir)
    assert resumed == 0  # the checkpoint is removed once the outputs are published
    assert f"({kills[2]['checkpointed']} from the checkpoint)" in output, output[-3000:]
    # Every cached answer corresponds to a request the server saw: the key mapping holds.
    keys_seen = {cache_key(r.body) for run in runs for r in run}
    assert cached_keys(cache_dir) <= keys_seen
    # Requests seen in more than one run: none was completed before the kill that preceded it.
    first_run_of: dict[str, int] = {}
    remade: list[tuple[int, str]] = []
    for i, run in enumerate(runs):
        for request in run:
            key = cache_key(request.body)
            if key in first_run_of and first_run_of[key] < i:
                remade.append((i, key))
            first_run_of.setdefault(key, i)
    assert all(completed_at_kill[1:])  # not vacuous: answers were cached before those kills
    completed_remade = [key for i, key in remade if key in completed_at_kill[i - 1]]
    assert completed_remade == []
    per_kill = Counter(i for i, _ in remade)
    assert all(n <= IN_FLIGHT for n in per_kill.values()), per_kill
    within_run = [h for run in runs for h, n in Counter(body_hash(r.body) for r in run).items()
                  if n > 1]
    assert within_run == []  # no run asked the same thing twice
    print(json.dumps({"kills": kills, "requests_per_run": [len(r) for r in runs],
                      "uncompleted_at_kill": [
                          sum(cache_key(r.body) not in done for r in run)
                          for run, done in zip(runs, completed_at_kill, strict=False)],
                      "remade_uncompleted": len(remade), "remade_completed": 0,
                      "plan": len(plan)}))


def capped_config(config: RunConfig, *, max_tokens: int | None, concurrency: int) -> RunConfig:
    """Short answers (max_tokens 128: a call's worst case ~1,000 tokens) and ``concurrency``
    calls per role and trajectories at once."""
    roles = {role: getattr(config.llm, role).model_copy(update={"max_concurrency": concurrency})
             for role in ("teacher", "judge")}
    budget = config.llm.budget.model_copy(update={"max_tokens": max_tokens})
    return config.model_copy(update={
        "llm": config.llm.model_copy(update={**roles, "budget": budget}),
        "synthesis": config.synthesis.model_copy(update={
            "step_max_tokens": 128, "answer_max_tokens": 128, "concurrency": concurrency})})


BUDGET_TOKENS = 8_000
"""About a third of the whole plan (33 calls, ~22,600 tokens as the metered teacher bills)."""


@pytest.mark.slow
def test_budget_cap_mid_stage_stops_cleanly_and_the_next_run_continues(
        prefect_api: None, tmp_path: Path) -> None:
    store = publish_inputs(tmp_path / "store")
    teacher = MeteredTeacher()
    with OpenAITestServer(teacher, latency_s=0.02) as server:
        config = capped_config(drill_config(tmp_path, server), max_tokens=None, concurrency=2)
        plan = planned(store, config)
        capped = capped_config(config, max_tokens=BUDGET_TOKENS, concurrency=2)
        code, output = finish(agentune_run(write_config(capped, tmp_path / "capped.yaml")))
        assert code == 2, output[-3000:]
        # The last word is agentune's one-line error (Prefect logs the failed task above it).
        last = output.strip().splitlines()[-1]
        assert last.startswith("agentune: error: token budget exhausted"), output[-3000:]
        assert f"cap llm.budget.max_tokens = {BUDGET_TOKENS}" in last
        # Calls in flight reserved their worst case: together they never passed the cap.
        billed_capped = teacher.billed
        assert 0 < billed_capped <= BUDGET_TOKENS
        work_dir, cache_dir = Path(config.synthesis.work_dir), Path(config.llm.cache_dir)
        finished = checkpoint_lines(work_dir)
        assert 0 < finished < len(plan)
        nothing_half_published(store)
        assert {m.name for m in store.versions()} == {"queries", "tools", "templates"}
        first = list(server.requests)
        completed = cached_keys(cache_dir)

        code, output = finish(agentune_run(write_config(config, tmp_path / "raised.yaml")))
        assert code == 0, output[-3000:]
        second = server.requests[len(first):]
    assert_each_combination_once(store, plan)
    assert f"({finished} from the checkpoint)" in output, output[-3000:]
    again = [r for r in second if cache_key(r.body) in {cache_key(f.body) for f in first}]
    assert not [r for r in again if cache_key(r.body) in completed]
    assert len(again) <= IN_FLIGHT
    print(json.dumps({"budget_tokens": BUDGET_TOKENS, "billed_capped_run": billed_capped,
                      "requests_capped_run": len(first), "checkpointed_at_stop": finished,
                      "plan": len(plan), "requests_resumed_run": len(second),
                      "remade_uncompleted": len(again)}))


KILL_BUDGET_TOKENS = 16_000


@pytest.mark.slow
def test_kill_9_at_80_percent_of_the_budget_then_resume_stops_at_the_cap(
        prefect_api: None, tmp_path: Path) -> None:
    """The budget persists beside the response cache: the resumed process counts what the
    killed one spent (and what it had in flight, at its worst case), so the two together stay
    under the cap. With the sum kept in memory the second would start from zero and the
    provider would bill ~1.6x the cap."""
    store = publish_inputs(tmp_path / "store")
    teacher = MeteredTeacher()
    with OpenAITestServer(teacher, latency_s=0.02) as server:
        # One call in flight at a time, so the kill leaves at most one worst case to reclaim.
        config = capped_config(drill_config(tmp_path, server), max_tokens=KILL_BUDGET_TOKENS,
                               concurrency=1)
        plan = planned(store, config)
        path = write_config(config, tmp_path / "run.yaml")
        teacher.work_dir = Path(config.synthesis.work_dir)
        teacher.kill_at = int(0.8 * KILL_BUDGET_TOKENS)
        proc = agentune_run(path)
        teacher.arm(proc.pid, None)
        code, output = finish(proc)
        assert code == -signal.SIGKILL, output[-3000:]
        assert teacher.billed_at_kill is not None
        billed_first = teacher.billed
        assert 0.8 * KILL_BUDGET_TOKENS <= billed_first < KILL_BUDGET_TOKENS
        requests_first = len(server.requests)
        nothing_half_published(store)

        proc = agentune_run(path)  # the same config, started again
        teacher.arm(proc.pid, None)
        code, output = finish(proc)
        second = server.requests[requests_first:]
    assert code == 2, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith("agentune: error: token budget exhausted"), output[-3000:]
    assert f"spent by run '{config.name}/synthesize'" in last
    spent = int(last.split("exhausted before a ")[1].split(": ")[1].split(" tokens spent")[0])
    assert spent >= billed_first  # the first process's spend is counted
    assert second  # the resumed run did work before stopping ...
    assert teacher.billed <= KILL_BUDGET_TOKENS  # ... and the provider billed no more than the cap
    assert checkpoint_lines(Path(config.synthesis.work_dir)) < len(plan)
    nothing_half_published(store)
    print(json.dumps({"budget_tokens": KILL_BUDGET_TOKENS, "billed_at_kill": teacher.billed_at_kill,
                      "billed_first_process": billed_first, "spent_counted_at_stop": spent,
                      "billed_total": teacher.billed, "requests": [requests_first, len(second)],
                      "plan": len(plan)}))
