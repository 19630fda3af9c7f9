"""Starting the training job as its own multi-process job and following it to the end.

The job runs under ``torchrun`` (one node) or DeepSpeed's launcher (one node, or many from a
hostfile), in its own process group so that cancelling the flow, or any failure while following
it, takes every rank down with it. Its output is read line by line: progress lines (see
``sft_trainer.PROGRESS_PREFIX``) go to ``on_progress``, the rest to ``on_line`` (the flow log),
and all of it to the run's log file. A non-zero exit raises :class:`TrainingLaunchError` naming
the exception the job died of.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import signal
import socket
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentune.tasks.train.build_locks import clear_stale_build_locks
from agentune.tasks.train.sft_trainer import PROGRESS_PREFIX

TRAINER_MODULE = "agentune.tasks.train.sft_trainer"
# The last lines kept for the error message of a failed launch.
TAIL_LINES = 40
# A Python exception line as a traceback ends it ("ValueError: ...", "torch.OutOfMemoryError: ...").
_EXCEPTION_LINE = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt))(?::\s.*)?$")
# The launchers' own wrapper exceptions restate the child's failure less precisely.
_LAUNCHER_EXCEPTIONS = ("ChildFailedError", "CalledProcessError")


class TrainingLaunchError(RuntimeError):
    """The training job exited with an error; the message carries its exception and log tail."""


@dataclass(frozen=True)
class LaunchSpec:
    launcher: Literal["torchrun", "deepspeed"]
    nproc_per_node: int
    master_port: int
    use_cpu: bool
    cpu_threads_per_process: int
    hostfile: Path | None = None


def hostfile_nodes(path: Path) -> list[tuple[str, int]]:
    """(host, slots) per line of a DeepSpeed hostfile (``worker-1 slots=8``; # comments)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: hostfile not found") from None
    nodes = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"(\S+)\s+slots=(\d+)", line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected `HOST slots=N`, got {raw!r}")
        nodes.append((match.group(1), int(match.group(2))))
    if not nodes:
        raise ValueError(f"{path}: the hostfile lists no host")
    return nodes


def world_size(nproc_per_node: int, hostfile: Path | None) -> int:
    """Processes in the job: ``nproc_per_node`` on every node of the hostfile (or on this one)."""
    if hostfile is None:
        return nproc_per_node
    nodes = hostfile_nodes(hostfile)
    short = [host for host, slots in nodes if slots < nproc_per_node]
    if short:
        raise ValueError(f"{hostfile}: {', '.join(short)} have fewer than nproc_per_node="
                         f"{nproc_per_node} slots")
    return nproc_per_node * len(nodes)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_command(spec: LaunchSpec, job_path: Path) -> list[str]:
    """The launcher command line; launchers are started with this interpreter, so the job runs
    in the same environment as the flow."""
    job_args = ["--job", str(job_path)]
    if spec.launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                "--nproc_per_node", str(spec.nproc_per_node), "--master_addr", "127.0.0.1",
                "--master_port", str(spec.master_port), "-m", TRAINER_MODULE, *job_args]
    hostfile = ["--hostfile", str(spec.hostfile)] if spec.hostfile is not None else []
    return [sys.executable, "-m", "deepspeed.launcher.runner", *hostfile,
            "--num_gpus", str(spec.nproc_per_node), "--master_port", str(spec.master_port),
            "--module", TRAINER_MODULE, *job_args]


def launch_env(spec: LaunchSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"  # progress lines must arrive as they are printed
    env["TOKENIZERS_PARALLELISM"] = "false"
    if spec.use_cpu:
        # FACTS: without it, 2 processes on 2 cores run ~5x slower (threads oversubscribe).
        env["OMP_NUM_THREADS"] = str(spec.cpu_threads_per_process)
    return env


def parse_progress(line: str) -> dict[str, Any] | None:
    """The event of a progress line (launchers may prefix lines with a rank or host)."""
    at = line.find(PROGRESS_PREFIX)
    if at < 0:
        return None
    try:
        event = json.loads(line[at + len(PROGRESS_PREFIX):])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def failure_reason(lines: list[str]) -> str | None:
    """The exception the job died of: the first one a rank raised, not the launcher's wrapper."""
    found = [m for m in (_EXCEPTION_LINE.match(line) for line in lines) if m]
    real = [m for m in found if not m.group(1).endswith(_LAUNCHER_EXCEPTIONS)]
    chosen = real or found
    return chosen[0].group(0).strip() if chosen else None


async def _terminate(proc: asyncio.subprocess.Process, grace_s: float = 15.0) -> None:
    """SIGTERM the job's process group (launcher and every rank), SIGKILL what outlives grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
            return
        except TimeoutError:
            continue


async def run_training_job(command: list[str], *, env: Mapping[str, str], cwd: Path,
                           log_path: Path, on_line: Callable[[str], None],
                           on_progress: Callable[[dict[str, Any]], Awaitable[None] | None],
                           ) -> None:
    """Run the launcher to completion, streaming its output; raise on a non-zero exit.

    ``on_progress`` may be a coroutine function (a Prefect artifact update is one).

    If a callback raises or the caller is cancelled, the whole job is stopped before the
    exception propagates (checkpoints already written stay, for the next run to resume from).
    A torch extension build lock a killed job left behind is removed first (``build_locks``):
    the ranks would wait on it forever.
    """
    clear_stale_build_locks(env)
    proc = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, env=dict(env), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True, limit=1 << 24,
    )
    assert proc.stdout is not None
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    exceptions: list[str] = []
    try:
        with log_path.open("a", encoding="utf-8") as log:
            while raw := await proc.stdout.readline():
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                log.write(line + "\n")
                event = parse_progress(line)
                if event is not None:
                    handled = on_progress(event)
                    if inspect.isawaitable(handled):
                        await handled
                    continue
                on_line(line)
                tail.append(line)
                if _EXCEPTION_LINE.match(line):
                    exceptions.append(line)
        code = await proc.wait()
    except BaseException:
        await _terminate(proc)
        raise
    if code != 0:
        reason = failure_reason(exceptions) or f"exit code {code}"
        raise TrainingLaunchError(
            f"training job failed (exit code {code}): {reason}\n"
            f"command: {' '.join(command)}\nlog: {log_path}\n--- last lines ---\n" + "\n".join(tail)
        )
