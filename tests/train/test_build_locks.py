"""A torch extension build lock that a killed build left is removed before a launch; the lock of
a build in progress (a fresh one, or an old one a live process holds open) is kept."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentune.tasks.train.build_locks import STALE_AFTER_S, extensions_root
from agentune.tasks.train.launcher import run_training_job


def _age(lock: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(lock, (then, then))
    return lock


def _lock(root: Path, extension: str, age_s: float) -> Path:
    lock = root / extension / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    return _age(lock, age_s)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(),
                    reason="open files are read from /proc (Linux)")
async def test_a_launch_removes_a_stale_build_lock_and_keeps_live_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(root))
    building = root / "fused_adam" / "lock"
    building.parent.mkdir(parents=True)
    # A long build in progress: torch's FileBaton holds the lock it created open.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom torch.utils.file_baton import FileBaton\n"
         "baton = FileBaton(sys.argv[1])\nprint(baton.try_acquire(), flush=True)\n"
         "time.sleep(120)", str(building)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "True\n"
        _age(building, STALE_AFTER_S + 60)
        stale = _lock(root, "deepspeed_shm_comm", STALE_AFTER_S + 60)
        fresh = _lock(root, "cpu_adam", 5)
        with caplog.at_level("WARNING", logger="agentune.train"):
            await run_training_job([sys.executable, "-c", "pass"], env=dict(os.environ),
                                   cwd=tmp_path, log_path=tmp_path / "log",
                                   on_line=lambda line: None, on_progress=lambda e: None)
    finally:
        holder.kill()
        holder.wait()
    assert not stale.exists() and fresh.exists() and building.exists()
    assert re.search(f"{re.escape(str(stale))}: removed a stale torch extension build lock, "
                     r"6\.\d min old", caplog.text), caplog.text
    assert str(fresh) not in caplog.text and str(building) not in caplog.text


def test_the_default_extensions_root_is_torchs(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.cpp_extension import _get_build_directory

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # torch makes the folder it names
    built_in = Path(_get_build_directory("deepspeed_shm_comm", verbose=False))
    assert extensions_root(os.environ) == built_in.parent
