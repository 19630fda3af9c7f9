"""The train stage on CPU: ZeRO-3 over 2 gloo processes on a published sft_dataset version.

Most tests use a tiny random Llama with a small byte-level BPE tokenizer trained here on the
test conversations (a 49k vocabulary would make every step ~1 s on 2 cores); its chat template is
SmolLM2's ChatML one, so the same template swap as for the embedded model is exercised. One
slow test trains the real embedded SmolLM2-135M. The first DeepSpeed run on a machine compiles
``deepspeed_shm_comm`` (~45 s, cached in ~/.cache/torch_extensions or $TORCH_EXTENSIONS_DIR).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.examples import TrainingDataError, training_examples
from agentune.tasks.train.launcher import TrainingLaunchError
from agentune.tasks.train.stage import (
    hyperparameters,
    last_complete_checkpoint,
    plan_training,
    prepare_launch,
    run_training,
)

from support.tiny_train_model import (
    CONVERSATIONS,
    WEATHER,
    sft_rows,
)
from support.tiny_train_model import train_run_config as run_config


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    store = ArtifactStore(tmp_path / "store")
    store.publish("sft_dataset", sft_rows(), features=SFT_FEATURES)
    return store


# ---- labels: what carries loss (in-process, no DeepSpeed) --------------------------------------


@pytest.fixture(scope="module")
def smollm_vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model's real tokenizer and template on tiny random weights."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from agentune.tasks.llm.embedded_model import resolve_model_path

    folder = tmp_path_factory.mktemp("smollm-vocab")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("embedded"))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _labelled_spans(example: dict[str, Any], tokenizer: Any) -> list[str]:
    """The decoded runs of consecutive tokens whose label is not -100."""
    spans, current = [], []
    for token, label in zip(example["input_ids"], example["labels"]):
        if label != -100:
            assert label == token
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    return spans


def _in_process_trainer(config: RunConfig, store: ArtifactStore) -> Any:
    from agentune.tasks.train.sft_trainer import build_trainer

    plan = plan_training(config, store)
    _, _, job = prepare_launch(plan)
    return build_trainer(job.model_copy(update={"deepspeed_config": None}))


def test_only_assistant_turns_carry_loss(store: ArtifactStore, smollm_vocab_model: Path,
                                         tmp_path: Path) -> None:
    trainer = _in_process_trainer(run_config(store, smollm_vocab_model, tmp_path), store)
    tokenizer = trainer.processing_class
    dataset = trainer.train_dataset
    assert len(dataset) == 2 * len(CONVERSATIONS)
    spans = {tuple(_labelled_spans(ex, tokenizer)) for ex in dataset}
    assert spans == {
        (('<tool_call>\n{"name": "get_weather", "arguments": {"city": "北京"}}\n</tool_call>'
          "<|im_end|>"), "北京今天晴,25度。<|im_end|>"),
        (('Let me search.\n<tool_call>\n{"name": "web_search", "arguments": {"query": '
          '"DeepSpeed news", "top_k": 3}}\n</tool_call><|im_end|>'),
         "DeepSpeed 0.19 was released.<|im_end|>"),
        (('<tool_call>\n{"name": "get_weather", "arguments": {"city": "上海", "unit": "F"}}\n'
          "</tool_call><|im_end|>"), "上海明天有雨,68华氏度。<|im_end|>"),
        ("Hello.<|im_end|>",),
    }
    # The tools block, user turns and tool results are in the input but carry no loss.
    first = tokenizer.decode(dataset[0]["input_ids"])
    assert "<tools>" in first and "<tool_response>" in first


def test_steps_form_trains_on_completions_only(store: ArtifactStore, smollm_vocab_model: Path,
                                               tmp_path: Path) -> None:
    config = run_config(store, smollm_vocab_model, tmp_path, sample_form="steps")
    trainer = _in_process_trainer(config, store)
    tokenizer = trainer.processing_class
    spans = [_labelled_spans(ex, tokenizer) for ex in trainer.train_dataset]
    # The completion is everything after the prompt, so the newline closing the turn is in it.
    assert sorted(s[0] for s in spans) == sorted(
        f" I know it.\nFinal Answer: {c['messages'][-1]['content']}<|im_end|>\n"
        for c in CONVERSATIONS for _ in range(2))
    assert all(len(s) == 1 for s in spans)


def test_bad_rows_are_errors_naming_row_and_field() -> None:
    import pandas as pd

    rows = sft_rows(1)
    rows[0]["messages"] = [{"role": "user", "content": "no answer"}]
    with pytest.raises(TrainingDataError, match=r"sft_dataset@x: row 'r0-0': field 'messages'"):
        training_examples(pd.DataFrame(rows), split="train", form="messages", where="sft_dataset@x")
    rows = sft_rows(1)
    rows[1]["steps"] = [{"step": 1, "prompt": "p", "completion": ""}]
    with pytest.raises(TrainingDataError, match=r"row 'r0-1': field 'steps'\[0\]"):
        training_examples(pd.DataFrame(rows), split="val", form="steps", where="sft_dataset@x")
    rows = sft_rows(1)
    rows[2]["split"] = "dev"
    with pytest.raises(TrainingDataError, match=r"row 'r0-2': field 'split'"):
        training_examples(pd.DataFrame(rows), split="train", form="messages", where="v")


# ---- the multi-process job ---------------------------------------------------------------------


async def test_flow_trains_zero3_publishes_a_reloadable_model_and_reuses_it(
        prefect_api: None, store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentune.flows.train import train

    store.publish("sft_dataset", sft_rows(copies=3), features=SFT_FEATURES)  # now the latest
    config = run_config(store, tiny_model, tmp_path, max_steps=24, eval_steps=12, learning_rate=1e-2)
    out = await train(config=config)
    assert out["stage"] == "train" and not out["reused"]
    model_ref = store.resolve(out["outputs"]["model"])
    manifest = store.manifest(model_ref)
    assert [p["name"] for p in manifest.parents] == ["sft_dataset"]
    stats = manifest.stats
    assert stats["world_size"] == 2 and stats["global_step"] == 24
    # Loss goes down on the repeated tiny set.
    assert stats["final_loss"] < 0.6 * stats["first_loss"]
    assert stats["eval_loss"] is not None and stats["tokens_per_s"] > 0
    metrics = store.read(model_ref)
    assert metrics["loss"].notna().sum() == 24 and metrics["eval_loss"].notna().sum() >= 2

    # The saved model is whole and loads with plain transformers, no DeepSpeed.
    folder = store.file(model_ref, "model")
    assert (folder / "model.safetensors").is_file() and (folder / "chat_template.jinja").is_file()
    assert store.file(model_ref, "loss_curve.png").stat().st_size > 1000
    model = AutoModelForCausalLM.from_pretrained(folder)
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert not torch.equal(model.model.embed_tokens.weight, base.model.embed_tokens.weight)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template(CONVERSATIONS[0]["messages"][:1], tools=[WEATHER],
                                           add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    generated = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]

    card = (folder / "README.md").read_text(encoding="utf-8")
    for expected in (str(tiny_model), str(store.resolve("sft_dataset")), "| learning_rate | 0.01 |",
                     "| world size | 2 |", "eval loss (val split)", "tokens seen", "tokens/s",
                     "wall time", "estimated training cost"):
        assert expected in card
    # Once published, the work dir keeps only the record (job file, log, launches).
    work_dir = Path(stats["work_dir"])
    assert work_dir.parent == tmp_path / "runs" and work_dir.name == stats["run_key"]
    assert not (work_dir / "checkpoints").exists() and not (work_dir / "model").exists()
    assert (work_dir / "train.log").is_file()
    assert [launch["resume_from"] for launch in stats["launches"]] == [None]
    assert (work_dir / "run.lock").read_text() == ""  # released

    async with get_client() as client:
        progress = await client.read_artifacts(
            artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["progress"])))
    assert any(a.data == 100.0 for a in progress)

    again = await train(config=config)
    assert again["reused"] and again["outputs"] == out["outputs"]


async def test_resume_continues_from_the_checkpoint_step(store: ArtifactStore, tiny_model: Path,
                                                         tmp_path: Path) -> None:
    config = run_config(store, tiny_model, tmp_path, max_steps=12, save_steps=3)
    plan = plan_training(config, store)
    first: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def stop_at_first_checkpoint(event: dict[str, Any]) -> None:
        first.append(event)
        if event["event"] == "checkpoint":
            raise Stop  # as if the flow were cancelled: the whole job is killed

    with pytest.raises(Stop):
        await run_training(plan, on_line=lambda line: None, on_progress=stop_at_first_checkpoint)
    checkpoint = last_complete_checkpoint(Path(plan.job.output_dir))
    assert checkpoint is not None
    step = int(checkpoint.name.split("-")[1])
    assert 3 <= step < 12 and not Path(plan.job.result_path).exists()

    # Started again with the same inputs (through the deepspeed launcher this time).
    again = plan_training(config.model_copy(update={"train": config.train.model_copy(
        update={"launcher": "deepspeed"})}), store)
    assert again.work_dir == plan.work_dir
    events: list[dict[str, Any]] = []
    result = await run_training(again, on_line=lambda line: None, on_progress=events.append)
    assert events[0] == {"event": "start", "step": step, "max_steps": 12}
    logged = [e["step"] for e in events if e["event"] == "log"]
    assert logged[0] == step + 1 and logged[-1] == 12
    assert result["resumed_from_step"] == step and result["global_step"] == 12


async def test_a_code_change_between_crash_and_restart_resumes_the_same_checkpoints(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import agentune.tasks.store.artifact_store as artifact_store
    from agentune.tasks.train.stage import launches, publish_model

    config = run_config(store, tiny_model, tmp_path, max_steps=8, save_steps=3)
    plan = plan_training(config, store)
    step = await _stop_at_first_checkpoint(plan)

    # The code changes: every version id changes, the work dir does not.
    monkeypatch.setattr(artifact_store, "code_version", lambda: "edited-code")
    again = plan_training(config, store)
    assert again.version != plan.version and again.work_dir == plan.work_dir
    events: list[dict[str, Any]] = []
    result = await run_training(again, on_line=lambda line: None, on_progress=events.append)
    assert events[0]["step"] == step and result["resumed_from_step"] == step
    record = launches(again)
    assert [r["model_version"] for r in record] == [plan.version, again.version]
    assert record[1]["resume_from"].endswith(f"checkpoint-{step}")
    manifest = publish_model(store, again, result, wall_seconds=1.0, estimate=None)
    assert manifest.version == again.version and manifest.code_version == "edited-code"
    assert [r["resume_from_step"] for r in manifest.stats["launches"]] == [None, step]


async def test_resume_from_names_a_checkpoint_of_another_run(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    from agentune.tasks.train.stage import publish_model

    config = run_config(store, tiny_model, tmp_path, max_steps=8, save_steps=3)
    old = plan_training(config, store)
    step = await _stop_at_first_checkpoint(old)

    # A new dataset version (as when the code that built it changed): a new work dir, which
    # starts from the old run's checkpoint when told to.
    store.publish("sft_dataset", sft_rows(copies=3), features=SFT_FEATURES)
    moved = config.model_copy(update={"train": config.train.model_copy(
        update={"resume_from": str(old.work_dir)})})
    plan = plan_training(moved, store)
    assert plan.work_dir != old.work_dir
    assert plan.resume_checkpoint == old.work_dir / "checkpoints" / f"checkpoint-{step}"
    assert plan.params["train"]["resume_from"]["step"] == step
    assert plan.version != plan_training(config, store).version  # in the model's identity
    events: list[dict[str, Any]] = []
    result = await run_training(plan, on_line=lambda line: None, on_progress=events.append)
    assert events[0]["step"] == step and result["resumed_from_step"] == step
    manifest = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    assert manifest.params["train"]["resume_from"]["checkpoint"] == str(plan.resume_checkpoint)
    card = (store.file(manifest.ref, "model") / "README.md").read_text(encoding="utf-8")
    assert f"checkpoint-{step}" in card

    with pytest.raises(ValueError, match="neither a complete checkpoint-N folder"):
        plan_training(config.model_copy(update={"train": config.train.model_copy(
            update={"resume_from": str(tmp_path)})}), store)


async def _stop_at_first_checkpoint(plan: Any) -> int:
    class Stop(Exception):
        pass

    def stop(event: dict[str, Any]) -> None:
        if event["event"] == "checkpoint":
            raise Stop

    with pytest.raises(Stop):
        await run_training(plan, on_line=lambda line: None, on_progress=stop)
    checkpoint = last_complete_checkpoint(Path(plan.job.output_dir))
    assert checkpoint is not None
    return int(checkpoint.name.split("-")[1])


def test_a_work_dir_lock_is_refused_to_a_second_process_and_a_stale_one_taken_over(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import json
    import os
    import socket
    import subprocess
    import sys

    from agentune.tasks.train.run_lock import TrainingRunLocked, work_dir_lock

    work = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from agentune.tasks.train.run_lock import work_dir_lock\n"
         f"with work_dir_lock(Path({str(work)!r})):\n"
         "    print('held', flush=True)\n    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(TrainingRunLocked) as refused:
            with work_dir_lock(work):
                pass
        message = str(refused.value)
        assert f"PID {holder.pid} on host {socket.gethostname()}, started " in message
        assert "UTC" in message and "work_dir_lock" in message
    finally:
        holder.kill()
        holder.wait()
    # Killed: the kernel released its flock; the file still names it, so the lock is stale.
    assert json.loads((work / "run.lock").read_text())["pid"] == holder.pid
    with caplog.at_level("WARNING", logger="agentune.train"):
        with work_dir_lock(work) as mine:
            assert mine["pid"] == os.getpid() and mine["stale"]["pid"] == holder.pid
    assert f"stale lock of a run that died taken over (PID {holder.pid}" in caplog.text


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.timeout(900)
def test_two_concurrent_train_runs_on_one_config_the_second_is_refused_naming_the_first(
        prefect_api: None, store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml
    from prefect.settings import PREFECT_API_URL

    # Long enough that the first is still training whatever the machine's load: it is stopped
    # (Ctrl-C) once the second has been refused.
    config = run_config(store, tiny_model, tmp_path, max_steps=100_000, save_steps=100_000)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    command = [str(Path(sys.executable).parent / "agentune"), "run", "train", "--config", str(path)]
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    work_dir = tmp_path / "runs" / plan_training(config, store).run_key
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (work_dir / "train.log").is_file() and first.poll() is None:
            assert time.monotonic() < deadline, "the first run never launched"
            time.sleep(0.2)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
        assert first.poll() is None  # the first was training all along
        first.send_signal(signal.SIGINT)
        # Stopping takes the job's SIGTERM grace and the flow's final state sent to the shared
        # Prefect server: seconds on a quiet machine, minutes on a loaded one (CI).
        first.wait(timeout=360)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        # Whatever happens, no trainer of this test outlives it.
        deadline = time.monotonic() + 60
        while _processes_mentioning(str(work_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in _processes_mentioning(str(work_dir)):
            os.kill(pid, signal.SIGKILL)
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith("agentune: error: ") and "another training run" in last, last
    assert f"PID {first.pid} on host " in last and " started 20" in last
    assert (work_dir / "run.lock").read_text() == ""  # the first released it when stopped
    assert store.versions("model") == []


async def test_a_failing_launch_raises_the_jobs_error(store: ArtifactStore, tiny_model: Path,
                                                      tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    plan = plan_training(run_config(store, broken, tmp_path, max_steps=2), store)
    lines: list[str] = []
    with pytest.raises(TrainingLaunchError) as err:
        await run_training(plan, on_line=lines.append, on_progress=lambda e: None)
    message = str(err.value)
    assert "exit code 1" in message and "SafetensorError" in message
    assert "ChildFailedError" not in message.splitlines()[0]  # the rank's error, not torchrun's
    assert any("Traceback" in line for line in lines)  # the log was streamed as it came


@pytest.mark.parametrize("form", ["messages", "steps"])
def test_a_max_length_that_cuts_off_every_trained_token_is_an_error_before_launch(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path, form: str) -> None:
    with pytest.raises(ValueError, match=r"no train example has a token to train on within "
                                         r"train.max_length = 16"):
        plan_training(run_config(store, tiny_model, tmp_path, max_length=16, sample_form=form),
                      store)
    plan = plan_training(run_config(store, tiny_model, tmp_path, sample_form=form), store)
    assert plan.train_tokens.untrainable == 0
    assert hyperparameters(plan)["train examples with nothing to train on"] == \
        f"0 of {plan.train_tokens.sampled} counted"


async def test_flow_stops_before_launch_when_over_budget(prefect_api: None, store: ArtifactStore,
                                                         tiny_model: Path, tmp_path: Path) -> None:
    from agentune.flows.train import train
    from agentune.tasks.train.cost import OverBudgetError

    config = run_config(store, tiny_model, tmp_path, max_steps=2)
    config.train.cost.max_cost = 0.0
    with pytest.raises(OverBudgetError, match="OVER BUDGET"):
        await train(config=config)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
async def test_embedded_smollm2_trains_with_zero3_and_generates(store: ArtifactStore,
                                                                tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentune.tasks.llm.embedded_model import resolve_model_path
    from agentune.tasks.train.stage import publish_model

    config = run_config(store, resolve_model_path("embedded"), tmp_path, precision="auto",
                        max_steps=2, per_device_batch_size=1, learning_rate=1e-5)
    plan = plan_training(config, store)
    assert plan.chat_template_origin == "templates/chatml_training.j2"
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    assert result["global_step"] == 2 and result["world_size"] == 2
    manifest = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    folder = store.file(manifest.ref, "model")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert sum(p.numel() for p in model.parameters()) == plan.model_parameters
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}],
                                           add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    generated = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]
