"""The persistent response cache on its own: round trip and several writing processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

import pytest

from agentune.tasks.llm.cache import ResponseCache
from agentune.tasks.llm.types import ChatResult, ToolCall, Usage


def test_round_trip_marks_results_cached(tmp_path):
    path = tmp_path / "deep" / "responses.sqlite"
    result = ChatResult(
        content=None,
        tool_calls=[ToolCall(id="c1", name="search", arguments='{"q": "x"}')],
        finish_reason="tool_calls",
        usage=Usage(prompt_tokens=7, completion_tokens=2),
        model="m",
    )
    cache = ResponseCache(path)
    assert cache.get("k") is None
    cache.put("k", result, "teacher")
    cache.close()

    reopened = ResponseCache(path)
    assert reopened.get("k") == result.model_copy(update={"cached": True})
    reopened.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        role, created_at = db.execute("SELECT role, created_at FROM responses").fetchone()
    assert role == "teacher" and created_at > 0


def test_unreadable_entry_is_a_miss(tmp_path):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    cache.put("k", ChatResult(content="x"), "judge")
    with sqlite3.connect(tmp_path / "responses.sqlite") as db:
        db.execute("UPDATE responses SET result = '{\"usage\": 5}'")
    assert cache.get("k") is None
    cache.close()


def test_several_processes_write_at_once(tmp_path):
    path = tmp_path / "responses.sqlite"
    writer = textwrap.dedent(
        f"""
        import sys
        from agentune.tasks.llm.cache import ResponseCache
        from agentune.tasks.llm.types import ChatResult
        cache = ResponseCache({str(path)!r})
        worker = sys.argv[1]
        for i in range(200):
            cache.put(f"{{worker}}-{{i}}", ChatResult(content=str(i)), "teacher")
            assert cache.get(f"{{worker}}-{{i // 2}}") is not None
        cache.close()
        """
    )
    workers = [
        subprocess.Popen([sys.executable, "-c", writer, str(n)], stderr=subprocess.PIPE)
        for n in range(4)
    ]
    for worker in workers:
        _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0, stderr.decode()
    cache = ResponseCache(path)
    assert len(cache) == 800
    assert cache.get("3-199") == ChatResult(content="199", cached=True)
    cache.close()


def test_writes_from_several_event_loops_share_one_writer(tmp_path) -> None:
    import asyncio
    import threading

    cache = ResponseCache(tmp_path / "cache.sqlite")
    start = threading.Barrier(6)

    def writer(n: int) -> None:
        start.wait()
        asyncio.run(cache.aput(f"k{n}", ChatResult(content=str(n)), "teacher"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(cache) == 6
    cache.close()  # joins the one writer; would hang if a second one had started
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(cache.aput("late", ChatResult(content="x"), "teacher"))


def _legacy_file(path, request, result) -> None:
    """A cache file as the first key format's versions wrote it: responses only, no meta."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, role TEXT NOT NULL, "
                   "result TEXT NOT NULL, created_at REAL NOT NULL)")
        db.execute("INSERT INTO responses VALUES (?, 'teacher', ?, 1.0)",
                   (request.legacy_cache_key("openai", "m"),
                    result.model_dump_json(exclude={"cached"})))


def test_an_answer_stored_under_the_old_key_format_is_still_found(tmp_path):
    from agentune.tasks.llm.types import ChatRequest

    request = ChatRequest(messages=[{"role": "user", "content": "天气？ weather"}],
                          response_format={"type": "json_object"}, temperature=0.0, seed=3)
    result = ChatResult(content='{"a": 1}', usage=Usage(prompt_tokens=5, completion_tokens=3))
    path = tmp_path / "responses.sqlite"
    _legacy_file(path, request, result)
    key = request.cache_key("openai", "m")
    assert key != request.legacy_cache_key("openai", "m")  # the format did change

    cache = ResponseCache(path)
    assert cache.legacy_keys
    assert cache.get(key) == result.model_copy(update={"cached": True})
    other = ChatRequest(messages=[{"role": "user", "content": "other"}])
    assert cache.get(other.cache_key("openai", "m")) is None
    cache.close()  # the copy under the new key was queued; close() writes it
    with sqlite3.connect(path) as db:
        keys = {k for (k,) in db.execute("SELECT key FROM responses")}
    assert keys == {key, request.legacy_cache_key("openai", "m")}


def test_a_new_cache_file_is_marked_and_never_looks_up_old_keys(tmp_path):
    from agentune.tasks.llm.types import ChatRequest

    path = tmp_path / "responses.sqlite"
    cache = ResponseCache(path)
    assert not cache.legacy_keys
    looked_up: list[str] = []
    request = ChatRequest(messages=[{"role": "user", "content": "x"}])
    key = request.cache_key("openai", "m")
    key._legacy = lambda: looked_up.append("legacy") or "nope"  # type: ignore[attr-defined]
    assert cache.get(key) is None and looked_up == []
    cache.put(key, ChatResult(content="y"), "teacher")
    cache.close()
    reopened = ResponseCache(path)  # it has answers now, and its mark
    assert not reopened.legacy_keys and reopened.get(key).content == "y"
    reopened.close()


def test_the_cache_key_decides_on_every_field_and_the_identity():
    from agentune.tasks.llm.types import ChatRequest

    base = ChatRequest(messages=[{"role": "user", "content": "x"}], temperature=0.0)
    keys = {base.cache_key("openai", "m"), base.cache_key("openai", "m2"),
            base.cache_key("local", "m"), base.cache_key("openai", "m" + "2")}
    assert len(keys) == 3
    for change in ({"temperature": 0.5}, {"seed": 1}, {"max_tokens": 7}, {"stop": ["\n"]},
                   {"messages": [{"role": "user", "content": "y"}]}):
        assert base.model_copy(update=change).cache_key("openai", "m") != \
            base.cache_key("openai", "m")
    assert base.cache_key("open", "aim") != base.cache_key("opena", "im")
