"""Durable before used: an answer is committed to the response cache before its caller sees it,
so no answer a killed run had seen is ever paid for again.

A child process asks the scripted test server (answers 2-20 ms apart, seeded) for 48 different
answers through the gateway, 12 at a time, and appends each answer's cache key to a file the
moment ``gateway.chat`` returns it (a plain write: what reached the file outlives a SIGKILL).
The parent kills it with SIGKILL right as answers arrive: once the server has sent k answers
(k seeded, 3-40), after a seeded 0-3 ms. Then:

- every key the caller had received is in the cache file the killed run left;
- a second run on the same cache completes the plan, and the server sees again only requests
  whose answer was never committed (it sent them, or they were in flight, when the kill came):
  answers paid twice = 0, over every seed.

Without the wait for the commit (the answer handed back while the writer thread still holds
it), kills in the gap between the two leave delivered answers out of the file, which the next
run pays for again: this drill then fails.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentune.tasks.llm.types import ChatRequest

from support.openai_server import Latency, OpenAITestServer, Reply

SEEDS = range(12)
REQUESTS = 48
CONCURRENCY = 12

CHILD = r'''
import asyncio, os, sys
from agentune.config.llm import LLMConfig
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.types import ChatRequest

base_url, cache_dir, delivered_path, n, concurrency = sys.argv[1:6]
role = {"provider": "openai", "model": "test-model", "base_url": base_url,
        "max_concurrency": int(concurrency), "max_retries": 0, "timeout_s": 30}
config = LLMConfig.model_validate({"teacher": role, "cache_dir": cache_dir})
delivered = os.open(delivered_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

async def main():
    async with LLMGateway(config) as gateway:
        async def one(i):
            request = ChatRequest(messages=[{"role": "user", "content": f"question {i}"}],
                                  max_tokens=16, temperature=0.0)
            await gateway.chat("teacher", request, stage="drill")
            # The caller has the answer: record it (the kernel keeps it through a SIGKILL).
            os.write(delivered, (request.cache_key("openai", "test-model") + "\n").encode())
        await asyncio.gather(*(one(i) for i in range(int(n))))

print("ready", flush=True)
asyncio.run(main())
'''


def cache_key(body: dict[str, Any]) -> str:
    fields = {k: v for k, v in body.items() if k != "model"}
    return ChatRequest.model_validate(fields).cache_key("openai", body["model"])


def committed(cache_dir: Path) -> set[str]:
    path = cache_dir / "responses.sqlite"
    if not path.exists():
        return set()
    with sqlite3.connect(path) as db:
        return {key for (key,) in db.execute("SELECT key FROM responses")}


def child(server: OpenAITestServer, cache_dir: Path, delivered: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, server.base_url, str(cache_dir), str(delivered),
         str(REQUESTS), str(CONCURRENCY)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def kill_as_answers_arrive(server: OpenAITestServer, proc: subprocess.Popen[str],
                           answers: int, delay_s: float) -> int:
    """SIGKILL ``delay_s`` after the server sent its ``answers``-th answer; how many it had sent
    by the kill."""
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 120
    while sum(r.answered is not None for r in server.requests) < answers:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the child ended before {answers} answers: {proc.stderr.read()[-2000:]}"
                        if proc.stderr else "the child ended early")
        time.sleep(0.0002)
    time.sleep(delay_s)
    proc.kill()
    proc.wait(timeout=30)
    return sum(r.answered is not None for r in server.requests)


@pytest.mark.slow
def test_no_answer_seen_before_a_kill_is_paid_for_again(tmp_path: Path) -> None:
    totals = {"kills": 0, "sent_before_kill": 0, "delivered": 0, "committed": 0,
              "asked_again": 0, "paid_twice": 0}
    for seed in SEEDS:
        rng = random.Random(seed)
        folder = tmp_path / f"seed{seed}"
        cache_dir, delivered_path = folder / "cache", folder / "delivered.txt"
        folder.mkdir()
        with OpenAITestServer(default=Reply("ok"),
                              latency_s=Latency.uniform(0.002, 0.02, seed=seed)) as server:
            proc = child(server, cache_dir, delivered_path)
            sent = kill_as_answers_arrive(server, proc, rng.randint(3, 40),
                                          rng.uniform(0.0, 0.003))
            delivered = set(delivered_path.read_text().split()) if delivered_path.exists() \
                else set()
            stored = committed(cache_dir)
            # Durable before used: everything the caller saw is in the file.
            assert delivered <= stored, (f"seed {seed}: {len(delivered - stored)} answers seen "
                                         "by the caller are not in the cache")
            first_run = len(server.requests)

            resumed = child(server, cache_dir, delivered_path)
            out, err = resumed.communicate(timeout=300)
            assert resumed.returncode == 0, err[-2000:]
            again = {cache_key(r.body) for r in server.requests[first_run:]}
            paid_twice = again & stored
            assert not paid_twice, f"seed {seed}: {len(paid_twice)} committed answers paid again"
            # The plan completed: every request answered once by the second run or before.
            assert len(again | stored) == REQUESTS
            assert len(set(delivered_path.read_text().split())) == REQUESTS
        totals["kills"] += 1
        totals["sent_before_kill"] += sent
        totals["delivered"] += len(delivered)
        totals["committed"] += len(stored)
        totals["asked_again"] += len(again)
        totals["paid_twice"] += len(paid_twice)
    print(json.dumps({"drill": "durable_cache", **totals}))
    assert totals["paid_twice"] == 0
    # The kills landed while answers were arriving: some sent answers had not been committed.
    assert totals["sent_before_kill"] > totals["committed"]
