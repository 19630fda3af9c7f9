"""The versioned artifact store: ids, atomic publish, checksums, JSON columns, aliases, gc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import pandas as pd
import pytest
from datasets import Features, Json, List, Value

from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    ChecksumError,
    StoreError,
    VersionRef,
    file_fingerprint,
)

TRAJECTORY_FEATURES = Features(
    {"id": Value("string"), "messages": List(Json()), "tools": List(Json()), "args": Json()}
)


def trajectory_rows() -> list[dict]:
    """Tool-call arguments with different keys per row: Arrow alone would merge them into one
    struct padded with nulls (the FACTS Parquet pitfall)."""
    return [
        {
            "id": "t1",
            "messages": [
                {"role": "user", "content": "北京天气怎么样?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "北京"}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "晴, 25°C"},
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}}],
            "args": {"city": "北京"},
        },
        {
            "id": "t2",
            "messages": [
                {"role": "assistant", "tool_calls": [
                    {"id": "c2", "type": "function",
                     "function": {"name": "calculator", "arguments": {"expression": "2+2", "precision": 3}}}]},
            ],
            "tools": [],
            "args": {"expression": "2+2", "precision": 3},
        },
    ]


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def test_version_id_is_deterministic_and_depends_on_every_input(store: ArtifactStore) -> None:
    a, b = VersionRef("queries", "aaaa"), VersionRef("tools", "bbbb")
    base = store.version_id("templates", parents=[a, b], params={"k": 1, "x": [1, 2]})
    assert base == store.version_id("templates", parents=[b, a], params={"x": [1, 2], "k": 1})
    assert base != store.version_id("templates", parents=[a], params={"k": 1, "x": [1, 2]})
    assert base != store.version_id("templates", parents=[a, b], params={"k": 2, "x": [1, 2]})
    assert base != store.version_id("templates", parents=[a, b], params={"k": 1, "x": [1, 2]},
                                    code="other-code")
    assert base != store.version_id("judgements", parents=[a, b], params={"k": 1, "x": [1, 2]})


def test_publish_is_found_again_and_not_rewritten(store: ArtifactStore) -> None:
    df = pd.DataFrame({"id": ["q1", "q2"], "text": ["hello", "你好"]})
    first = store.publish("queries", df, params={"seed": 0}, stats={"kept": 2})
    assert store.find("queries", params={"seed": 0}) == first
    assert store.find("queries", params={"seed": 1}) is None
    again = store.publish("queries", df, params={"seed": 0})
    assert again.created_at == first.created_at  # the existing version, untouched
    assert first.rows == 2 and first.columns == ["id", "text"]
    assert first.stats == {"kept": 2}
    assert first.git_commit and first.code_version
    assert set(first.files) == {"part-00000.parquet"}
    assert store.resolve("queries") == first.ref == store.resolve(f"queries@{first.version}")


def test_manifest_records_lineage_schema_and_checksums(store: ArtifactStore) -> None:
    parent = store.publish("queries", [{"id": "q1"}], params={})
    child = store.publish("templates", [{"id": "t1", "score": 7.5}], parents=[parent.ref],
                          params={"epsilon": 0.5}, description="kept templates")
    raw = json.loads((store.version_dir(child.ref) / "__meta__" / "manifest.json").read_text())
    assert raw["parents"] == [{"name": "queries", "version": parent.version}]
    assert raw["params"] == {"epsilon": 0.5}
    assert "score: double" in raw["arrow_schema"]
    assert len(raw["files"]["part-00000.parquet"]["sha256"]) == 64
    for key in ("name", "version", "created_at", "rows", "code_version", "git_commit", "stats"):
        assert key in raw


def test_unknown_parent_is_refused(store: ArtifactStore) -> None:
    with pytest.raises(StoreError, match="parent queries@nope"):
        store.publish("templates", [{"id": 1}], parents=[VersionRef("queries", "nope")])


def test_json_columns_round_trip_through_pandas_datasets_and_store(store: ArtifactStore) -> None:
    rows = trajectory_rows()
    m = store.publish("trajectories", rows, features=TRAJECTORY_FEATURES)
    vdir = store.version_dir(m.ref)

    # The store's own reader decodes the Json columns back to the original objects.
    back = store.read("trajectories")
    assert back["messages"][1][0]["tool_calls"][0]["function"]["arguments"] == {
        "expression": "2+2", "precision": 3}
    assert back["args"][0] == {"city": "北京"}  # no "expression": None merged in
    assert back["messages"][0][0]["content"] == "北京天气怎么样?"

    # pandas reads the version folder as it is (Json values arrive as JSON text).
    plain = pd.read_parquet(vdir)
    assert list(plain["id"]) == ["t1", "t2"]
    assert json.loads(plain["args"][1]) == {"expression": "2+2", "precision": 3}

    # datasets reads it too, and decodes the Json feature.
    ds = datasets.load_dataset("parquet", data_dir=str(vdir), split="train")
    assert ds[0]["args"] == {"city": "北京"}
    assert ds[1]["messages"][0]["tool_calls"][0]["function"]["arguments"]["precision"] == 3


def test_an_empty_table_keeps_its_columns(store: ArtifactStore) -> None:
    m = store.publish("rejects", [], features=Features({"reason": Value("string"), "detail": Json()}))
    assert m.rows == 0 and m.columns == ["reason", "detail"]
    assert list(store.read("rejects").columns) == ["reason", "detail"]
    assert len(pd.read_parquet(store.version_dir(m.ref))) == 0
    # An empty DataFrame too, with a list of JSON values (its object columns read as doubles).
    features = Features({"id": Value("string"), "chosen": [Json()]})
    m = store.publish("pairs", pd.DataFrame(columns=["id", "chosen"]), features=features)
    assert m.rows == 0 and list(store.read(m.ref).columns) == ["id", "chosen"]


def test_payload_files_and_readers_coexist(store: ArtifactStore, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    card = tmp_path / "README.md"
    card.write_text("# card")
    m = store.publish("sft_dataset", [{"a": 1}], files={"model": model, "README.md": card})
    assert "__files__/model/model.safetensors" in m.files
    assert store.file("sft_dataset", "README.md").read_text() == "# card"
    # Payload under __files__ does not confuse either Parquet reader.
    assert len(pd.read_parquet(store.version_dir(m.ref))) == 1
    vdir = str(store.version_dir(m.ref))
    assert len(datasets.load_dataset("parquet", data_dir=vdir, split="train")) == 1
    only_files = store.publish("model", None, files={"model": model})
    assert only_files.rows is None
    with pytest.raises(StoreError, match="holds no table"):
        store.read("model")


def test_checksum_mismatch_is_refused_naming_the_file(store: ArtifactStore) -> None:
    m = store.publish("queries", pd.DataFrame({"text": ["a"] * 100}))
    part = store.version_dir(m.ref) / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="part-00000.parquet: sha256 mismatch"):
        store.read("queries")
    with pytest.raises(ChecksumError, match="part-00000.parquet"):
        store.verify(m.ref)


def test_missing_and_extra_files_fail_verification(store: ArtifactStore) -> None:
    m = store.publish("queries", [{"x": 1}])
    vdir = store.version_dir(m.ref)
    (vdir / "part-00001.parquet").write_bytes(b"junk")
    with pytest.raises(ChecksumError, match="part-00001.parquet: not in the manifest"):
        store.verify("queries")
    (vdir / "part-00001.parquet").unlink()
    (vdir / "part-00000.parquet").unlink()
    with pytest.raises(ChecksumError, match="part-00000.parquet: missing"):
        store.verify("queries")


def test_latest_alias_moves_and_pandas_reads_through_it(store: ArtifactStore) -> None:
    old = store.publish("queries", [{"v": 1}], params={"n": 1})
    new = store.publish("queries", [{"v": 2}], params={"n": 2})
    assert store.resolve("queries") == new.ref
    assert store.aliases("queries") == {"latest": new.version}
    assert pd.read_parquet(store.root / "queries" / "latest")["v"].tolist() == [2]
    store.set_alias(old.ref, "golden")
    assert store.resolve("queries@golden") == old.ref
    with pytest.raises(StoreError, match="no published version queries@missing"):
        store.resolve("queries@missing")


def test_gc_keeps_aliases_and_their_lineage(store: ArtifactStore) -> None:
    q_old = store.publish("queries", [{"v": 1}], params={"n": 1})
    q_new = store.publish("queries", [{"v": 2}], params={"n": 2})
    t_old = store.publish("templates", [{"t": 1}], parents=[q_old.ref], params={"n": 1})
    t_new = store.publish("templates", [{"t": 2}], parents=[q_new.ref], params={"n": 2})
    store.set_alias(t_old.ref, "golden")  # keeps t_old, and q_old through lineage
    orphan = store.publish("queries", [{"v": 3}], params={"n": 3}, aliases=())
    (store.root / "queries" / ".tmp-deadbeef-1234").mkdir()
    doomed = store.gc(dry_run=True)
    assert store.version_dir(orphan.ref) in doomed
    assert store.exists(orphan.ref)  # dry run removes nothing
    removed = store.gc()
    assert set(removed) == set(doomed)
    assert not store.exists(orphan.ref)
    for kept in (q_old, q_new, t_old, t_new):
        assert store.exists(kept.ref)
    assert not (store.root / "queries" / ".tmp-deadbeef-1234").exists()


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import pyarrow.parquet as pq
    from agentune.tasks.store.artifact_store import ArtifactStore

    real_write = pq.write_table
    def slow_write(table, path, **kw):
        real_write(table, path, **kw)
        print("WROTE", path, flush=True)
        time.sleep(60)  # killed here, mid-publish
    pq.write_table = slow_write
    ArtifactStore(sys.argv[1]).publish("queries", [{"text": "x"}] * 10, params={"run": 1})
    """
)


def test_killed_writer_leaves_no_visible_version(store: ArtifactStore, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(store.root)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("WROTE"), line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert store.versions() == []
    with pytest.raises(StoreError):
        store.resolve("queries")
    assert store.find("queries", params={"run": 1}) is None
    leftovers = store.gc()
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".tmp-")
    # The same publish now succeeds, and is complete.
    m = store.publish("queries", [{"text": "x"}] * 10, params={"run": 1})
    assert store.verify(m.ref).rows == 10


def test_file_fingerprint_tracks_content(tmp_path: Path) -> None:
    f = tmp_path / "seed.jsonl"
    f.write_text('{"text": "a"}\n')
    before = file_fingerprint(f)
    f.write_text('{"text": "b"}\n')
    assert file_fingerprint(f) != before
    assert file_fingerprint(tmp_path) == file_fingerprint(tmp_path)
    with pytest.raises(StoreError, match="input not found"):
        file_fingerprint(tmp_path / "missing")


def test_many_rows_are_split_into_parts(store: ArtifactStore, monkeypatch) -> None:
    monkeypatch.setattr("agentune.tasks.store.artifact_store.ROWS_PER_PART", 40)
    m = store.publish("queries", pd.DataFrame({"i": range(100)}))
    assert sorted(f for f in m.files if f.endswith(".parquet")) == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert store.read("queries")["i"].tolist() == list(range(100))
    assert len(pd.read_parquet(store.version_dir(m.ref))) == 100


def test_concurrent_publishers_of_the_same_version_agree(store: ArtifactStore) -> None:
    from concurrent.futures import ThreadPoolExecutor

    rows = [{"text": str(i)} for i in range(1000)]
    with ThreadPoolExecutor(4) as pool:
        manifests = list(pool.map(lambda _: store.publish("queries", rows), range(4)))
    assert len({m.version for m in manifests}) == 1
    assert len(store.versions("queries")) == 1
    store.verify("queries")


def test_pandas_reads_chinese_trajectories_as_characters(store: ArtifactStore) -> None:
    import random

    from agentune.tasks.common.schemas import TRAJECTORY_FEATURES as STAGE_FEATURES

    from support.trajectories import trajectory_row

    row = trajectory_row(random.Random(0), row_id="zh-1", set_id="s", lang="zh",
                         task_type="single_tool", template_source="meta_agent")
    row["messages"][-1]["score"] = 0.123456789123  # datasets alone keeps 10 digits
    store.publish("trajectories", [row], features=STAGE_FEATURES)

    # Plain pandas, no agentune and no datasets: JSON text with the characters as characters.
    plain = pd.read_parquet(store.root / "trajectories" / "latest")
    texts = list(plain["messages"][0])
    assert row["query"] in texts[1] and "\\u" not in "".join(texts)
    # The README's one-liner turns the column into Python objects.
    plain["messages"] = plain["messages"].map(lambda ms: [json.loads(m) for m in ms])
    assert plain["messages"][0] == row["messages"]

    # Still the datasets Json() feature, round-tripping exactly through the store and datasets.
    back = store.read("trajectories")
    assert list(back["messages"][0]) == row["messages"]
    assert list(back["tools"][0]) == row["tools"]
    ds = datasets.load_dataset("parquet", data_dir=str(store.root / "trajectories" / "latest"),
                               split="train")
    assert ds[0]["messages"] == row["messages"]


def test_json_text_is_readable_and_decodes_as_datasets_decodes() -> None:
    from datasets.utils.json import ujson_loads

    from agentune.tasks.store.artifact_store import json_text

    assert json_text({"城市": "北京"}) == '{"城市": "北京"}'
    assert json_text('{"a": 1}') == '{"a": 1}'  # text that is JSON stands for its value
    assert json_text("晴") == '"晴"'
    assert ujson_loads(json_text({"x": float("nan"), "y": [1.5, float("inf")]})) == {
        "x": None, "y": [1.5, None]}  # as datasets' own encoder writes them
