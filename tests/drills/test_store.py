"""Fault drill: a corrupted Parquet file in a published version.

A part truncated, bytes flipped, a part deleted, the manifest edited (rows, params, a checksum,
made unreadable), a part replaced by junk with the manifest "fixed" to match: `agentune verify`
exits non-zero naming the file (and still checks the other versions), `store.read` refuses it
naming the file, and the next stage run from the CLI stops with that message and publishes
nothing. (tests/store/test_artifact_store.py covers the single flipped byte, the missing and the extra file.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from agentune.cli import main
from agentune.tasks.common.schemas import QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.store.artifact_store import (
    MANIFEST,
    ArtifactStore,
    StoreError,
    VersionRef,
    sha256_file,
)


def query_rows(n: int) -> list[dict]:
    return [{"id": f"q{i}", "text": f"What is {i} times {i + 1}?", "lang": "en",
             "set_id": f"set-{i // 5}", "source": "seed", "parent_ids": [], "scenario": "maths",
             "tool_ids": ["calculator"], "pii_placeholders": [], "likely_tool_ids": ["calculator"],
             "tool_hints": None} for i in range(n)]


TOOL_ROWS = [{"id": "calculator", "name": "calculator", "description": "Evaluate arithmetic.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                             "required": ["expression"]}}]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    """`queries` in three Parquet parts, and an intact `tools` version beside it."""
    monkeypatch.setattr("agentune.tasks.store.artifact_store.ROWS_PER_PART", 20)
    store = ArtifactStore(tmp_path / "store")
    store.publish("queries", query_rows(50), features=QUERY_FEATURES, params={"n": 50})
    store.publish("tools", TOOL_ROWS, features=TOOL_FEATURES)
    return store


def part(store: ArtifactStore, i: int = 1) -> Path:
    return store.version_dir(store.resolve("queries")) / f"part-{i:05d}.parquet"


def manifest_path(store: ArtifactStore) -> Path:
    return store.version_dir(store.resolve("queries")) / MANIFEST


def edit_manifest(store: ArtifactStore, change: Callable[[dict], None]) -> Path:
    path = manifest_path(store)
    data = json.loads(path.read_text("utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), "utf-8")
    return path


def truncate(store: ArtifactStore) -> tuple[Path, str]:
    path = part(store)
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2])
    return path, f"{size // 2} bytes, the manifest recorded {size} (truncated"


def flip_bytes(store: ArtifactStore) -> tuple[Path, str]:
    path = part(store, 0)
    data = bytearray(path.read_bytes())
    for i in range(100, 110):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return path, "sha256 mismatch"


def delete_part(store: ArtifactStore) -> tuple[Path, str]:
    path = part(store, 2)
    path.unlink()
    return path, "missing"


def edit_rows(store: ArtifactStore) -> tuple[Path, str]:
    path = edit_manifest(store, lambda m: m.update(rows=40))
    return path, "records 40 rows, the Parquet parts hold 50"


def edit_params(store: ArtifactStore) -> tuple[Path, str]:
    path = edit_manifest(store, lambda m: m["params"].update(n=51))
    return path, "edited: its name, parents, params and code version hash to queries@"


def edit_checksum(store: ArtifactStore) -> tuple[Path, str]:
    edit_manifest(store, lambda m: m["files"]["part-00001.parquet"].update(sha256="0" * 64))
    return part(store), "sha256 mismatch"


def break_manifest(store: ArtifactStore) -> tuple[Path, str]:
    path = manifest_path(store)
    path.write_text(path.read_text("utf-8")[:-40], "utf-8")
    return path, "unreadable manifest"


def junk_with_matching_manifest(store: ArtifactStore) -> tuple[Path, str]:
    """Someone "repairs" the checksums after a part went bad: the footer check still refuses."""
    path = part(store)
    path.write_bytes(b"PAR1 not really parquet")

    def fix(m: dict) -> None:
        m["files"]["part-00001.parquet"] = {"sha256": sha256_file(path),
                                            "bytes": path.stat().st_size}
    edit_manifest(store, fix)
    return path, "not a readable Parquet file"


CORRUPTIONS = [truncate, flip_bytes, delete_part, edit_rows, edit_params, edit_checksum,
               break_manifest, junk_with_matching_manifest]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__)
def test_verify_and_read_refuse_naming_the_file(store: ArtifactStore, corrupt, capsys) -> None:
    assert main(["verify", "--store", str(store.root)]) == 0
    capsys.readouterr()
    path, problem = corrupt(store)

    # The CLI checks every version, reports the bad one naming the file, exits non-zero.
    assert main(["verify", "--store", str(store.root)]) == 1
    captured = capsys.readouterr()
    assert f"{path}: " in captured.err and problem in captured.err
    assert "ok      tools@" in captured.out
    assert main(["verify", "queries", "--store", str(store.root)]) == 1
    assert f"{path}: " in capsys.readouterr().err

    with pytest.raises(StoreError) as info:
        store.read("queries")
    assert f"{path}: " in str(info.value) and problem in str(info.value)
    assert len(store.read("tools")) == 1  # the intact version still reads


def test_reading_without_verification_still_names_the_broken_part(store: ArtifactStore) -> None:
    path, _ = truncate(store)
    with pytest.raises(StoreError, match=f"^{path}: cannot read the table"):
        store.read_arrow("queries", verify=False)


def test_a_deleted_version_behind_the_alias_is_refused(store: ArtifactStore, capsys) -> None:
    vdir = store.version_dir(store.resolve("queries"))
    (vdir / MANIFEST).unlink()
    with pytest.raises(StoreError, match=f"{vdir}: no published version queries@"):
        store.read("queries")
    assert main(["show", "queries", "--store", str(store.root)]) == 2
    assert str(vdir) in capsys.readouterr().err


@pytest.mark.parametrize("corrupt", [truncate, edit_rows], ids=lambda f: f.__name__)
def test_the_next_stage_refuses_a_corrupted_input(prefect_api, store: ArtifactStore,
                                                  tmp_path: Path, corrupt, capsys) -> None:
    """build_templates reads `queries` before any teacher call: it stops with the file named,
    and publishes nothing."""
    path, problem = corrupt(store)
    before = store.published()
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"store": {"root": str(store.root)},
                                      "llm": {"cache_dir": str(tmp_path / "cache")}}), "utf-8")
    assert main(["run", "build_templates", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("agentune: error: queries@") and f"{path}: " in last and problem in last
    assert store.published() == before
    assert not any(p.name.startswith(".tmp-") for p in store.root.rglob("*"))


def test_a_clean_store_verifies_and_reads(store: ArtifactStore, capsys) -> None:
    """The guard the drills rely on: an untouched store passes every check."""
    assert main(["verify", "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.count("ok      ") == 2
    assert len(store.read("queries")) == 50
    assert store.published() == sorted(
        [VersionRef("queries", store.resolve("queries").version),
         VersionRef("tools", store.resolve("tools").version)])
