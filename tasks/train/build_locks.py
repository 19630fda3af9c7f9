"""Build locks that a killed build of a torch extension left behind, removed before a launch.

DeepSpeed builds its C++ ops (``deepspeed_shm_comm`` on CPU processes, its fused optimizers on
GPUs) the first time a training process needs one, with torch's ``cpp_extension.load``: one
folder per extension under the extensions root, and in it a ``lock`` file (torch's
``FileBaton``) that the building process creates exclusively and removes when done, while every
other process waits, polling, for it to go. A build killed before it finished (a cancelled run,
an OOM kill) leaves the file behind, and every later training run waits on it forever.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

# A build in progress holds its lock open (see clear_stale_build_locks); the age is a second
# guard, for a build this process cannot see.
STALE_AFTER_S = 5 * 60
LOCK_FILE = "lock"
log = logging.getLogger("agentune.train")


def extensions_root(env: Mapping[str, str]) -> Path:
    """The folder torch builds extensions in for processes started with ``env``:
    ``$TORCH_EXTENSIONS_DIR``, else torch's default root with the Python and accelerator tag
    (``py311_cpu``, ``py311_cu128``), as ``torch.utils.cpp_extension._get_build_directory``
    names it."""
    configured = env.get("TORCH_EXTENSIONS_DIR")
    if configured is not None:
        return Path(configured)
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if torch.version.hip is not None:
        accelerator = f"rocm{torch.version.hip.replace('.', '')}"
    elif torch.version.cuda is not None:
        accelerator = f"cu{torch.version.cuda.replace('.', '')}"
    else:
        accelerator = "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(get_default_build_root()) / f"{python}_{accelerator}"


def _held_open(path: Path) -> bool | None:
    """Whether a process this one can inspect has ``path`` open (by the /proc/<pid>/fd links,
    Linux); None where there is no /proc to tell."""
    if not Path("/proc/self/fd").is_dir():
        return None
    target = path.stat()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            fds = list(fd_dir.iterdir())
        except OSError:  # the process ended meanwhile, or is another user's
            continue
        for fd in fds:
            try:
                # The link's name first: only a file of that name is stat'ed (a stat follows the
                # link to whatever the process has open).
                if os.readlink(fd).rsplit("/", 1)[-1] != path.name:
                    continue
                found = fd.stat()
            except OSError:
                continue
            if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
                return True
    return False


def clear_stale_build_locks(env: Mapping[str, str]) -> None:
    """Remove each extension's build lock under :func:`extensions_root` that a killed build left.

    ``FileBaton`` writes no PID into the lock, so a lock counts as stale when both hold:

    - it is older than :data:`STALE_AFTER_S` (by its mtime: the file is created empty and never
      written), so a build that has just started is never taken for a dead one; and
    - no live process has it open: the building process keeps the descriptor it created the
      lock with open until the build ends, however long the build takes, and a process that was
      killed holds nothing.

    Where there is no /proc (not Linux) no lock is removed. Processes this one cannot inspect
    (another user's; another container or host sharing the folder) are not seen: a build there
    is protected by the age alone. Only this machine's extensions root is looked at, once per
    launch: a lock a build leaves while the job's ranks wait on it is cleared at the next launch.
    """
    now = time.time()
    for lock in sorted(extensions_root(env).glob(f"*/{LOCK_FILE}")):
        try:
            age = now - lock.stat().st_mtime
            if age < STALE_AFTER_S or _held_open(lock) is not False:
                continue
        except FileNotFoundError:  # the build finished meanwhile
            continue
        lock.unlink(missing_ok=True)
        log.warning("%s: removed a stale torch extension build lock, %.1f min old and open in no "
                    "process (a build killed before it finished left it; every build of the "
                    "extension would have waited on it)", lock, age / 60)
