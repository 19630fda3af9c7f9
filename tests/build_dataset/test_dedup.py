"""Dedup of training samples: exact and near duplicates planted in generated trajectories
(precision and recall), Chinese near duplicates, the representative rule, mixed shingling, and
the LSH index kept in a real Redis server.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentune.config.build_dataset import BuildDatasetConfig, RedisIndexConfig
from agentune.tasks.build_dataset.dedup import cluster_id, deduplicate_samples
from agentune.tasks.build_dataset.samples import (
    _canonical_json,
    _dumps,
    _normalised,
    dedup_text,
    exact_key,
)
from agentune.tasks.build_dataset.stage import redis_storage_config
from agentune.tasks.common.near_dedup import (
    NearDupIndex,
    hash_jaccard,
    mixed_ngram_hashes,
)

from support.near_dup import near_dup_clusters
from support.trajectories import (
    exact_copy,
    make_trajectories,
    near_copy,
    precision_recall,
    samples_of,
    trajectory_row,
    zh_text,
)

# --------------------------------------------------------------------------- tests


def test_planted_exact_and_near_duplicates_precision_and_recall() -> None:
    gen = make_trajectories(400, exact_dups=40, near_dups=60, seed=1)
    outcome = deduplicate_samples(samples_of(gen.rows), BuildDatasetConfig(), stage="test")
    dropped = {r.item_id for r in outcome.rejects}
    precision, recall = precision_recall(gen, dropped)
    assert (precision, recall) == (1.0, 1.0)
    # Each group of exact copies loses all but one in the exact pass, the near copies go in the
    # near pass.
    assert outcome.stats["exact_duplicates"] == len(gen.exact)
    assert outcome.stats["near_duplicates"] == len(gen.near)
    assert len(outcome.kept) == len(gen.rows) - len(dropped) == 400
    assert outcome.stats["lsh_bands"] * outcome.stats["lsh_rows"] <= 128


def test_chinese_near_duplicates_are_found_and_distinct_texts_kept() -> None:
    gen = make_trajectories(120, near_dups=30, seed=2, langs=("zh",))
    outcome = deduplicate_samples(samples_of(gen.rows), BuildDatasetConfig(), stage="test")
    dropped = {r.item_id for r in outcome.rejects}
    precision, recall = precision_recall(gen, dropped)
    assert (precision, recall) == (1.0, 1.0)
    assert {r.reason for r in outcome.rejects} == {"near_duplicate"}


def test_representative_is_best_judge_score_then_shortest_and_cluster_ids() -> None:
    rng = random.Random(3)
    base = trajectory_row(rng, row_id="a", set_id="s", lang="en", task_type="tool_selection",
                          template_source="benchmark")
    worse = near_copy(rng, base, "b")
    better = near_copy(rng, base, "c")
    base["judge_score"], worse["judge_score"], better["judge_score"] = 7.0, 6.0, 8.5
    # Same score as `better`, one word longer: loses on length.
    longer = copy.deepcopy(better)
    longer["id"] = "d"
    longer["messages"][-1]["content"] += " extra"
    unscored = near_copy(rng, base, "e")
    unscored["judge_score"] = None
    outcome = deduplicate_samples(samples_of([base, worse, longer, unscored, better]),
                                  BuildDatasetConfig(), stage="test")
    assert [s.id for s in outcome.kept] == ["c"]
    assert outcome.kept[0].cluster_id == cluster_id("c")
    details = {r.item_id: r.detail for r in outcome.rejects}
    assert set(details) == {"a", "b", "d", "e"}
    assert all(f"with c (cluster {cluster_id('c')})" in d for d in details.values())
    assert outcome.stats["largest_cluster"] == 5


def test_exact_key_normalises_whitespace_and_tool_call_ids_but_not_content() -> None:
    rng = random.Random(4)
    row = trajectory_row(rng, row_id="x", set_id="s", lang="en", task_type="tool_selection",
                         template_source="benchmark")
    a, b = samples_of([row, exact_copy(rng, row, "y")])
    assert exact_key(a) == exact_key(b)
    changed = copy.deepcopy(row)
    changed["messages"][2]["tool_calls"][0]["function"]["arguments"]["extra"] = 1
    assert exact_key(samples_of([changed])[0]) != exact_key(a)


def _wire_form(row: dict[str, Any], rng: random.Random | None = None) -> dict[str, Any]:
    """The row with every tool call's arguments as a JSON string (OpenAI's wire form); with
    ``rng``, the keys (nested ones too) in reverse order and some spacing of its own."""
    def shuffled(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        items = list(value.items())
        if rng is not None:
            items.reverse()
        return {k: shuffled(v) for k, v in items}

    wire = copy.deepcopy(row)
    for message in wire["messages"]:
        for call in message.get("tool_calls") or []:
            spacing = (", ", ": ") if rng is not None and rng.random() < 0.5 else (",", ":")
            call["function"]["arguments"] = json.dumps(
                shuffled(call["function"]["arguments"]), ensure_ascii=False, separators=spacing)
    return wire


def test_tool_call_arguments_compare_in_canonical_form_as_objects_or_json_strings() -> None:
    rng = random.Random(19)
    rows, planted = [], set()
    for i in range(50):
        row = trajectory_row(rng, row_id=f"r{i}", set_id=f"s{i % 7}", lang="en" if i % 2 else "zh",
                             task_type="tool_selection", template_source="benchmark")
        base = _wire_form(row)
        # Differs only in the order of the arguments' keys (and spacing, and call ids).
        copy_ = _wire_form(exact_copy(rng, row, f"r{i}-keys"), rng)
        assert all(json.loads(c["function"]["arguments"]) == json.loads(o["function"]["arguments"])
                   and c["function"]["arguments"] != o["function"]["arguments"]
                   for m, n in zip(copy_["messages"], base["messages"], strict=True)
                   for c, o in zip(m.get("tool_calls") or [], n.get("tool_calls") or [],
                                   strict=True))
        rows += [base, copy_]
        planted.add(copy_["id"])
    # The same trajectory stored with object arguments is the same sample too.
    rows.append({**copy.deepcopy(rows[0]), "id": "r0-objects", "messages": [
        {**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(
            c["function"]["arguments"])}} for c in m["tool_calls"]]} if m.get("tool_calls")
        else m for m in rows[0]["messages"]]})
    planted.add("r0-objects")
    outcome = deduplicate_samples(samples_of(rows), BuildDatasetConfig(), stage="test")
    # Each group (a trajectory and its copies) keeps exactly one row: 51 of 51 copies found.
    kept = {s.id for s in outcome.kept}
    assert len(kept) == 50 and len(outcome.rejects) == len(planted) == 51
    assert all(len(kept & {f"r{i}", f"r{i}-keys", *(["r0-objects"] if i == 0 else [])}) == 1
               for i in range(50))
    assert outcome.stats["exact_duplicates"] == 51

    sample = samples_of([rows[1]])[0]
    text = dedup_text(sample)
    arguments = json.loads(rows[1]["messages"][2]["tool_calls"][0]["function"]["arguments"])
    assert json.dumps(arguments, ensure_ascii=False, sort_keys=True) in text
    name = rows[1]["messages"][2]["tool_calls"][0]["function"]["name"]

    def call_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith(name + " ")]

    assert call_lines(text) == call_lines(dedup_text(samples_of([rows[0]])[0]))


def test_canonical_json_equals_the_walk_on_fuzzed_values() -> None:
    """The exact key normalises the serialised text (C speed) instead of walking the value in
    Python; on values built from every kind of whitespace, escapes, combining marks after
    escaped letters, fullwidth forms and NFKC-unsafe characters, both give the same text."""
    rng = random.Random(11)
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    alphabet = (list('ab xyz"\\/{}[]:,e<=') + spaces
                + ["\u0301", "\u0327", "\u0338", "\uff0c", "\uff1f", "\ufb01", "\u2460", "中",
                   "\x00", "\x01", "\x08", "\x7f", "\u200b", "\ufe68", "\uff02", "\uff3c",
                   "\ue000", "\U0001F600", "\u1100", "\u1161", "\u2126", "\u0344"])

    def value(depth: int = 0) -> Any:
        r = rng.random()
        if depth > 3 or r < 0.4:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if r < 0.5:
            return rng.choice([1, 2.5, None, True])
        if r < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 4))}

    for _ in range(20_000):
        v = value()
        assert _canonical_json(v) == _dumps(_normalised(v)), v


def test_dedup_text_leaves_out_system_prompt_tool_schemas_and_results() -> None:
    rng = random.Random(5)
    row = trajectory_row(rng, row_id="x", set_id="s", lang="en", task_type="tool_selection",
                         template_source="benchmark")
    text = dedup_text(samples_of([row])[0])
    assert "agent template" not in text and "Weather by city" not in text
    assert row["messages"][3]["content"] not in text  # the tool result
    call = row["messages"][2]["tool_calls"][0]["function"]
    assert call["name"] in text and next(iter(call["arguments"])) in text


def test_mixed_shingles_words_for_latin_characters_for_chinese() -> None:
    words = "one two three four five six seven eight nine ten eleven twelve"
    hashes = mixed_ngram_hashes(words, 5, 3)
    assert hashes.size == 8 and np.all(np.diff(hashes.astype(np.int64)) > 0)
    assert mixed_ngram_hashes("Hello, WORLD!", 5, 3).size == 1  # shorter than n: one gram
    assert np.array_equal(mixed_ngram_hashes("Hello, WORLD!", 5, 3),
                          mixed_ngram_hashes("hello world", 5, 3))
    assert mixed_ngram_hashes("明天北京会下雨吗", 5, 3).size == 6
    # Mixed text: both kinds of grams, Latin words and CJK characters apart.
    mixed = mixed_ngram_hashes("打开 App 然后 login 北京", 2, 2)
    assert mixed.size == 1 + 5  # "app login"; bigrams of the CJK stream 打开然后北京
    assert hash_jaccard(mixed, mixed) == 1.0
    assert hash_jaccard(np.zeros(0, np.uint32), np.zeros(0, np.uint32)) == 1.0


def test_streaming_deduplicate_equals_one_at_a_time() -> None:
    rng = random.Random(7)
    texts = [zh_text(rng, 60) for _ in range(50)]
    texts += [t[:-1] + "鑫" for t in texts[:20]]
    items = [(str(i), t) for i, t in enumerate(texts)]
    one = NearDupIndex(0.8, word_ngram=5, ngram=5)
    expected = [(k, one.add_if_new(k, t)) for k, t in items]
    streamed = list(NearDupIndex(0.8, word_ngram=5, ngram=5).deduplicate(items, batch_size=7))
    assert streamed == expected
    clusters = near_dup_clusters(items, 0.8, word_ngram=5, ngram=5, batch_size=16)
    assert len(clusters) == 50 and sum(len(c) for c in clusters.values()) == 70


# --------------------------------------------------------------------------- Redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A private redis-server on 127.0.0.1 (no persistence), stopped at teardown."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    import redis

    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail("redis-server did not answer within 5 s")
        yield {"host": "127.0.0.1", "port": port}
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


def test_redis_index_persists_across_processes_and_builds(redis_server) -> None:
    storage = {"type": "redis", "redis": redis_server, "basename": b"agentune-test"}
    gen = make_trajectories(60, near_dups=15, seed=8)
    first = deduplicate_samples(samples_of(gen.rows[:50]), BuildDatasetConfig(), stage="test",
                                storage_config=storage)
    in_memory = deduplicate_samples(samples_of(gen.rows[:50]), BuildDatasetConfig(), stage="test")
    assert [s.id for s in first.kept] == [s.id for s in in_memory.kept]
    assert first.stats["index"] == "redis" and first.stats["indexed_before"] == 0

    # A later build of new rows (a new index object, as in another process or for the next
    # dataset version) is deduplicated against what the first one kept.
    second = deduplicate_samples(samples_of(gen.rows[50:]), BuildDatasetConfig(), stage="test",
                                 storage_config=storage)
    assert second.stats["indexed_before"] == len(first.kept)
    assert any("indexed earlier" in r.detail for r in second.rejects)
    dropped = {r.item_id for r in first.rejects + second.rejects}
    assert precision_recall(gen, dropped) == (1.0, 1.0)

    # Re-running the first build changes nothing: its rows are already indexed.
    again = deduplicate_samples(samples_of(gen.rows[:50]), BuildDatasetConfig(), stage="test",
                                storage_config=storage)
    assert [s.id for s in again.kept] == [s.id for s in first.kept]

    # Settings (shingling scheme included) are checked against the stored ones.
    with pytest.raises(ValueError, match="was built with"):
        NearDupIndex(0.8, word_ngram=3, ngram=5, storage_config=storage)
    with pytest.raises(ValueError, match="basename"):
        NearDupIndex(0.8, storage_config={"type": "redis", "redis": redis_server})


def test_redis_index_is_per_dataset_version_unless_shared(redis_server) -> None:
    """Two dataset versions under one namespace: with scope `version` (the default) the second
    loses nothing to the first's rows and a re-run of a version keeps the same rows; with scope
    `shared` the second is deduplicated against the first."""
    gen = make_trajectories(60, near_dups=20, seed=9)
    first_rows, second_rows = gen.rows[:45], gen.rows[45:]
    alone = deduplicate_samples(samples_of(second_rows), BuildDatasetConfig(), stage="test")

    def run(scope: str, version: str, rows: list[dict[str, Any]]) -> Any:
        cfg = BuildDatasetConfig(near_dup_redis=RedisIndexConfig(
            host=redis_server["host"], port=redis_server["port"], namespace=f"ns-{scope}",
            scope=scope))
        storage = redis_storage_config(cfg.near_dup_redis, "agent", version)
        return deduplicate_samples(samples_of(rows), cfg, stage="test",
                                   storage_config=storage), storage

    v1, storage = run("version", "v1", first_rows)
    assert storage["basename"] == b"ns-version:v1:agent"
    v2, _ = run("version", "v2", second_rows)
    assert v2.stats["indexed_before"] == 0
    assert [s.id for s in v2.kept] == [s.id for s in alone.kept]
    again, _ = run("version", "v1", first_rows)
    assert again.stats["indexed_before"] == len(v1.kept)
    assert [s.id for s in again.kept] == [s.id for s in v1.kept]

    run("shared", "v1", first_rows)
    shared, storage = run("shared", "v2", second_rows)
    assert storage["basename"] == b"ns-shared:agent"
    assert shared.stats["indexed_before"] > 0
    # Planted copies of first-build rows are dropped only when the index is shared.
    across = {r for r in (s["id"] for s in second_rows)
              if gen.group_of[r] in {row["id"] for row in first_rows} and gen.group_of[r] != r}
    assert across, "the generator planted no copy across the two builds"
    assert across <= {r.item_id for r in shared.rejects}
    assert not across & {r.item_id for r in v2.rejects}
    with pytest.raises(ValueError, match="no dataset version"):
        redis_storage_config(RedisIndexConfig(), "agent")
