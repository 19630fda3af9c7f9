"""Launch command lines, hostfiles, progress lines, failure reasons, the DeepSpeed configs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentune.paths import models_dir
from agentune.tasks.train.launcher import (
    LaunchSpec,
    TrainingLaunchError,
    failure_reason,
    hostfile_nodes,
    launch_command,
    launch_env,
    parse_progress,
    run_training_job,
    world_size,
)
from agentune.tasks.train.sft_trainer import CHECKPOINT_COMPLETE, PROGRESS_PREFIX
from agentune.tasks.train.stage import deepspeed_config_path, last_complete_checkpoint


def spec(**kw) -> LaunchSpec:
    return LaunchSpec(**({"launcher": "torchrun", "nproc_per_node": 2, "master_port": 29555,
                          "use_cpu": True, "cpu_threads_per_process": 1} | kw))


def test_torchrun_and_deepspeed_command_lines(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    assert launch_command(spec(), job) == [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", "29555",
        "-m", "agentune.tasks.train.sft_trainer", "--job", str(job)]
    hostfile = tmp_path / "hostfile"
    assert launch_command(spec(launcher="deepspeed", nproc_per_node=8, hostfile=hostfile), job) == [
        sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(hostfile),
        "--num_gpus", "8", "--master_port", "29555", "--module", "agentune.tasks.train.sft_trainer",
        "--job", str(job)]


def test_cpu_jobs_get_one_thread_per_process() -> None:
    env = launch_env(spec(cpu_threads_per_process=3), base={"PATH": "/bin"})
    assert env["OMP_NUM_THREADS"] == "3" and env["PYTHONUNBUFFERED"] == "1"
    assert "OMP_NUM_THREADS" not in launch_env(spec(use_cpu=False), base={})


def test_one_cpu_process_is_one_torchrun_rank_with_every_thread(tmp_path: Path) -> None:
    one = spec(nproc_per_node=1, cpu_threads_per_process=2)
    command = launch_command(one, tmp_path / "job.json")
    assert command[command.index("--nproc_per_node") + 1] == "1"
    assert launch_env(one, base={"OMP_NUM_THREADS": "1"})["OMP_NUM_THREADS"] == "2"


def test_hostfile_sets_the_world_size(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# the cluster\nworker-1 slots=8\n\nworker-2 slots=8  # second\n")
    assert hostfile_nodes(hostfile) == [("worker-1", 8), ("worker-2", 8)]
    assert world_size(8, hostfile) == 16 and world_size(4, None) == 4
    with pytest.raises(ValueError, match="fewer than nproc_per_node=16"):
        world_size(16, hostfile)
    hostfile.write_text("worker-1 slots=8\nworker-2 gpus=8\n")
    with pytest.raises(ValueError, match=r"hostfile:2: expected `HOST slots=N`"):
        hostfile_nodes(hostfile)


def test_progress_lines_are_found_behind_launcher_prefixes() -> None:
    line = "worker-1: " + PROGRESS_PREFIX + json.dumps({"event": "log", "step": 3})
    assert parse_progress(line) == {"event": "log", "step": 3}
    assert parse_progress("{'loss': 1.0}") is None
    assert parse_progress(PROGRESS_PREFIX + "{not json") is None


def test_failure_reason_prefers_the_ranks_exception_over_the_launchers() -> None:
    lines = [
        "[rank1]: safetensors_rust.SafetensorError: Error while deserializing header",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "subprocess.CalledProcessError: Command '[...]' returned non-zero exit status 1.",
    ]
    assert failure_reason(lines) == lines[0]
    assert failure_reason(lines[1:]) == lines[1].strip()
    assert failure_reason(["nothing useful"]) is None


async def test_a_failed_command_raises_with_its_exception_and_tail(tmp_path: Path) -> None:
    script = "import sys; print('working'); print('KeyError: missing', flush=True); sys.exit(3)"
    seen: list[str] = []
    with pytest.raises(TrainingLaunchError) as err:
        await run_training_job([sys.executable, "-c", script], env={}, cwd=tmp_path,
                               log_path=tmp_path / "log", on_line=seen.append,
                               on_progress=lambda e: None)
    assert str(err.value).startswith("training job failed (exit code 3): KeyError: missing")
    assert seen == ["working", "KeyError: missing"]
    assert (tmp_path / "log").read_text().splitlines() == seen


async def test_a_callback_error_kills_the_whole_process_group(tmp_path: Path) -> None:
    import os

    # The child starts a grandchild (as a launcher starts ranks) and reports its pid.
    script = ("import subprocess, sys, time\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"print({PROGRESS_PREFIX!r} + '{{\"event\": \"start\", \"pid\": %d}}' % p.pid, "
              "flush=True)\n"
              "time.sleep(60)\n")
    pids: list[int] = []

    def on_progress(event: dict) -> None:
        pids.append(event["pid"])
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        await run_training_job([sys.executable, "-c", script], env=dict(os.environ),
                               cwd=tmp_path, log_path=tmp_path / "log", on_line=lambda s: None,
                               on_progress=on_progress)
    assert _gone_within(pids[0], seconds=10)


def _gone_within(pid: int, seconds: float) -> bool:
    """The process has exited (a zombie nobody reaped counts as exited)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def test_bundled_deepspeed_configs_are_zero3_and_save_whole_weights() -> None:
    for name in ("zero3", "zero3_offload"):
        path = deepspeed_config_path(name)
        assert path == (models_dir() / "deepspeed" / f"{name}.json").resolve()
        config = json.loads(path.read_text())
        zero = config["zero_optimization"]
        assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
        assert config["train_micro_batch_size_per_gpu"] == "auto"
        assert config["bf16"]["enabled"] == "auto"
    offload = json.loads(deepspeed_config_path("zero3_offload").read_text())["zero_optimization"]
    assert offload["offload_optimizer"]["device"] == "cpu" == offload["offload_param"]["device"]
    with pytest.raises(FileNotFoundError, match="zero3_offload"):
        deepspeed_config_path("zero4")


def test_one_process_configs_are_zero_stage_0_and_1_or_none() -> None:
    for stage in (0, 1):
        config = json.loads(deepspeed_config_path(f"zero{stage}").read_text())
        assert config["zero_optimization"]["stage"] == stage
        assert config["train_micro_batch_size_per_gpu"] == "auto"
    assert deepspeed_config_path("none") is None


def test_half_written_checkpoints_are_not_resumed_from(tmp_path: Path) -> None:
    for step, complete in ((3, True), (6, True), (9, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / CHECKPOINT_COMPLETE).write_text("")
    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-6"
    assert not (tmp_path / "checkpoint-9").exists()
    assert last_complete_checkpoint(tmp_path / "absent") is None
