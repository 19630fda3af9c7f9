"""Large files' digests are remembered while the file is unchanged on disk, and only then."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from agentune.tasks.store import file_hashes
from agentune.tasks.store.file_hashes import sha256_file


@pytest.fixture
def reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Files read in full, with a 1 KiB threshold and the memo under tmp_path."""
    monkeypatch.setenv("AGENTUNE_HASH_MEMO", str(tmp_path / "memo" / "hashes.sqlite"))
    monkeypatch.setattr(file_hashes, "MEMO_MIN_BYTES", 1024)
    seen: list[Path] = []
    read = file_hashes.read_digest

    def counting(path: Path) -> str:
        seen.append(path)
        return read(path)

    monkeypatch.setattr(file_hashes, "read_digest", counting)
    return seen


def test_an_unchanged_large_file_is_read_once(tmp_path: Path, reads: list[Path]) -> None:
    big = tmp_path / "model.safetensors"
    big.write_bytes(b"w" * 4096)
    expected = hashlib.sha256(b"w" * 4096).hexdigest()
    assert sha256_file(big) == sha256_file(big) == expected
    assert reads == [big]
    assert sha256_file(big, rehash=True) == expected and reads == [big, big]


def test_a_rewritten_file_is_read_again_even_with_its_mtime_put_back(
        tmp_path: Path, reads: list[Path]) -> None:
    big = tmp_path / "model.safetensors"
    big.write_bytes(b"a" * 4096)
    sha256_file(big)
    before = big.stat()
    big.write_bytes(b"b" * 4096)  # same size
    os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns))  # ctime still moves
    assert sha256_file(big) == hashlib.sha256(b"b" * 4096).hexdigest()
    assert reads == [big, big]


def test_small_files_are_always_read_and_never_remembered(tmp_path: Path,
                                                          reads: list[Path]) -> None:
    small = tmp_path / "config.json"
    small.write_text("{}")
    sha256_file(small)
    sha256_file(small)
    assert reads == [small, small]
    memo = Path(os.environ["AGENTUNE_HASH_MEMO"])
    assert not memo.exists() or sqlite3.connect(memo).execute(
        "SELECT COUNT(*) FROM digests").fetchone()[0] == 0


def test_an_unusable_memo_only_costs_the_full_read(tmp_path: Path, reads: list[Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the memo's folder should be")
    monkeypatch.setenv("AGENTUNE_HASH_MEMO", str(blocker / "hashes.sqlite"))
    big = tmp_path / "model.safetensors"
    big.write_bytes(b"z" * 4096)
    assert sha256_file(big) == sha256_file(big) == hashlib.sha256(b"z" * 4096).hexdigest()
    assert reads == [big, big]
