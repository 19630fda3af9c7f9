"""The train stage's work as plain functions, in the order the flow runs them.

:func:`plan_training` resolves the inputs (the sft_dataset version, the base model, the training
chat template), fixes every "auto" setting for this machine, counts the tokens an epoch feeds
the model and derives the id of the ``model`` version the run will publish. The run's work dir
(``<train.work_dir>/<run key>``, the key a hash of the dataset version and the training
parameters, not of the code) holds its lock, job file, log, launch record, checkpoints and the
saved model, so a run started again with the same inputs resumes from its last complete
checkpoint, also when the code changed in between (which changes the model version id). Where
the run's own folder has no checkpoint, ``train.resume_from`` names one to start from.
:func:`estimate_cost` sizes it in GPU-hours and money; :func:`run_training` launches the job
and follows it; :func:`publish_model` writes the model card and loss curve and publishes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from agentune.config import RunConfig
from agentune.config.train import TrainConfig, TrainCostConfig
from agentune.paths import models_dir
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    Manifest,
    VersionRef,
    code_version,
    file_fingerprint,
    git_commit,
)
from agentune.tasks.train.cost import CostEstimate, estimate_training_cost
from agentune.tasks.train.examples import TokenCount, count_tokens, training_examples
from agentune.tasks.train.launcher import (
    LaunchSpec,
    free_port,
    launch_command,
    launch_env,
    run_training_job,
    world_size,
)
from agentune.tasks.train.model_card import plot_loss_curve, render_model_card
from agentune.tasks.train.sft_trainer import (
    CHECKPOINT_COMPLETE,
    RESULT_FILE,
    TrainJob,
    cpu_has_bf16,
)

DATASET_ARTIFACT = "sft_dataset"
MODEL_ARTIFACT = "model"
CHECKPOINTS = "checkpoints"
FINAL_MODEL = "model"
LAUNCHES = "launches.jsonl"

METRIC_SCHEMA = pa.schema([
    ("step", pa.int64()), ("epoch", pa.float64()), ("loss", pa.float64()),
    ("eval_loss", pa.float64()), ("learning_rate", pa.float64()), ("grad_norm", pa.float64()),
    ("tokens_seen", pa.int64()),
])


@dataclass(frozen=True)
class TrainingPlan:
    dataset: VersionRef
    base_model: Path
    params: dict[str, Any]
    """What decides the trained weights; with the dataset, the model version's identity."""
    version: str
    run_key: str
    """The work dir's name: the dataset version and ``params`` hashed, without the code version."""
    work_dir: Path
    resume_checkpoint: Path | None
    """``train.resume_from`` resolved: where a run with no checkpoint of its own starts."""
    job: TrainJob
    launch: LaunchSpec
    world_size: int
    chat_template: str
    chat_template_origin: str
    train_tokens: TokenCount
    val_examples: int
    model_parameters: int
    planned_tokens: int
    """Tokens the whole run feeds the model (all epochs, or max_steps' worth)."""
    settings: TrainConfig


def resolve_precision(choice: str, *, cuda: bool) -> str:
    """auto: bf16 on GPUs and CPUs that have it natively; fp16 on older GPUs; else fp32."""
    if choice != "auto":
        return choice
    if cuda:
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if cpu_has_bf16() else "fp32"


def resolve_attention(choice: str) -> str:
    if choice != "auto":
        return choice
    from transformers.utils import is_flash_attn_2_available

    return "flash_attention_2" if is_flash_attn_2_available() else "sdpa"


def resolve_packing(choice: str, attention: str) -> bool:
    if choice == "auto":
        return attention == "flash_attention_2"
    return choice == "on"


def deepspeed_config_path(name: str) -> Path:
    """A config named in models/deepspeed (``zero3``), or a path to a DeepSpeed JSON file."""
    bundled = models_dir() / "deepspeed" / f"{name}.json"
    path = bundled if bundled.is_file() else Path(name)
    if not path.is_file():
        known = sorted(p.stem for p in (models_dir() / "deepspeed").glob("*.json"))
        raise FileNotFoundError(f"deepspeed config {name!r}: not a file, nor one of {known}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(config, dict) or "zero_optimization" not in config:
        raise ValueError(f"{path}: a DeepSpeed config needs a `zero_optimization` section")
    return path.resolve()


def count_parameters(model_path: Path) -> int:
    """Parameters of a model from its config alone (built on the meta device: no weights read;
    tied input and output embeddings count once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return sum(p.numel() for p in model.parameters())


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_examples(store: ArtifactStore, settings: TrainConfig
                   ) -> tuple[VersionRef, list[dict[str, Any]], list[dict[str, Any]]]:
    """The dataset version and its train and val examples in the configured form."""
    dataset = store.resolve(settings.dataset or DATASET_ARTIFACT)
    if dataset.name != DATASET_ARTIFACT:
        raise ValueError(f"train.dataset {settings.dataset!r}: expected an {DATASET_ARTIFACT} "
                         f"version, got {dataset}")
    frame = store.read(dataset)
    where = str(dataset)
    train = training_examples(frame, split="train", form=settings.sample_form, where=where)
    val = training_examples(frame, split="val", form=settings.sample_form, where=where)
    if not train:
        raise ValueError(f"{where}: the train split is empty")
    return dataset, train, val


def _require_trainable_tokens(tokens: TokenCount, settings: TrainConfig, where: str) -> None:
    """Every row training on nothing would fail TRL mid-launch, or learn nothing: stop before."""
    if tokens.untrainable != tokens.sampled:
        return
    part = "assistant turns" if settings.sample_form == "messages" else "completions"
    raise ValueError(
        f"{where}: no train example has a token to train on within train.max_length = "
        f"{settings.max_length} (their {part} start later): raise train.max_length, or "
        f"rebuild the dataset with dataset.max_length = {settings.max_length}, which drops "
        "such rows as recorded rejects")


def _planned_tokens(settings: TrainConfig, tokens: TokenCount, *, packing: bool,
                    procs: int) -> int:
    """Tokens the run will train on: by max_steps when set, else by epochs."""
    if settings.max_steps is None:
        return round(settings.epochs * tokens.tokens)
    sequences_per_step = settings.per_device_batch_size * settings.gradient_accumulation_steps * procs
    per_sequence = settings.max_length if packing else tokens.mean_tokens
    return round(settings.max_steps * sequences_per_step * per_sequence)


def resolve_resume_checkpoint(spec: str) -> Path:
    """``train.resume_from``: a complete ``checkpoint-N`` folder, or a run folder (or its
    ``checkpoints`` folder), whose last complete checkpoint is taken."""
    path = Path(spec).resolve()
    if (path / CHECKPOINT_COMPLETE).is_file():
        return path
    for folder in (path / CHECKPOINTS, path):
        found = last_complete_checkpoint(folder, clean=False) if folder.is_dir() else None
        if found is not None:
            return found
    if path.name.startswith("checkpoint-") and path.is_dir():
        raise ValueError(f"train.resume_from {spec!r}: the checkpoint is incomplete (no "
                         f"{CHECKPOINT_COMPLETE} marker: its save was interrupted)")
    raise ValueError(f"train.resume_from {spec!r}: neither a complete checkpoint-N folder nor a "
                     "run folder holding one")


def _resume_record(checkpoint: Path) -> dict[str, Any]:
    state = checkpoint / "trainer_state.json"
    return {"checkpoint": str(checkpoint), "step": _step_of(checkpoint),
            "trainer_state_sha256": file_fingerprint(state) if state.is_file() else None}


def run_key(dataset: VersionRef, params: Mapping[str, Any]) -> str:
    """The work dir's name: what decides the weights, without the code version (so a code edit
    between a crash and its restart resumes the same checkpoints)."""
    blob = json.dumps({"dataset": str(dataset), "params": params}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def plan_training(config: RunConfig, store: ArtifactStore) -> TrainingPlan:
    """Everything about the run that can be known before launching it."""
    import torch
    from transformers import AutoTokenizer

    from agentune.tasks.common.chat_audit import training_chat_template

    settings = config.train
    dataset, train, val = _read_examples(store, settings)
    base_model = resolve_model_path(settings.base_model).resolve()
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    override = settings.chat_template or config.dataset.chat_template
    try:
        template, origin = training_chat_template(tokenizer, override)
    except ValueError as exc:
        raise ValueError(f"{base_model}: {exc} (or train.chat_template)") from None
    tokens = count_tokens(tokenizer, train, chat_template=template,
                          max_length=settings.max_length, seed=config.seed)
    _require_trainable_tokens(tokens, settings, str(dataset))

    cuda = torch.cuda.is_available()
    precision = resolve_precision(settings.precision, cuda=cuda)
    attention = resolve_attention(settings.attention)
    packing = resolve_packing(settings.packing, attention)
    hostfile = Path(settings.hostfile).resolve() if settings.hostfile else None
    procs = world_size(settings.nproc_per_node, hostfile)
    if cuda and hostfile is None and settings.nproc_per_node > torch.cuda.device_count():
        raise ValueError(f"train.nproc_per_node={settings.nproc_per_node}: this machine has "
                         f"{torch.cuda.device_count()} GPU(s)")
    ds_config = deepspeed_config_path(settings.deepspeed)

    params: dict[str, Any] = {
        "base_model": {"name": settings.base_model, "sha256": file_fingerprint(base_model)},
        "chat_template_sha256": _sha256_text(template),
        "deepspeed_sha256": file_fingerprint(ds_config),
        "world_size": procs,
        "precision": precision,
        "attention": attention,
        "packing": packing,
        "seed": config.seed,
        **settings.model_dump(include={
            "sample_form", "max_length", "epochs", "max_steps", "learning_rate", "lr_scheduler",
            "warmup_ratio", "weight_decay", "max_grad_norm", "per_device_batch_size",
            "gradient_accumulation_steps",
        }),
    }
    resume_checkpoint = None
    if settings.resume_from is not None:
        resume_checkpoint = resolve_resume_checkpoint(settings.resume_from)
        params["resume_from"] = _resume_record(resume_checkpoint)
    version = store.version_id(MODEL_ARTIFACT, parents=[dataset], params=params)
    key = run_key(dataset, params)
    work_dir = (Path(settings.work_dir) / key).resolve()
    job = TrainJob(
        store_root=str(store.root.resolve()),
        dataset=str(dataset),
        sample_form=settings.sample_form,
        base_model=str(base_model),
        chat_template=str(work_dir / "chat_template.jinja"),
        output_dir=str(work_dir / CHECKPOINTS),
        final_dir=str(work_dir / FINAL_MODEL),
        result_path=str(work_dir / RESULT_FILE),
        deepspeed_config=str(ds_config),
        precision=precision,  # type: ignore[arg-type]
        attention=attention,  # type: ignore[arg-type]
        packing=packing,
        seed=config.seed,
        **settings.model_dump(include={
            "max_length", "epochs", "max_steps", "learning_rate", "lr_scheduler",
            "warmup_ratio", "weight_decay", "max_grad_norm", "per_device_batch_size",
            "gradient_accumulation_steps", "gradient_checkpointing", "logging_steps",
            "eval_steps", "save_steps", "save_total_limit",
        }),
    )
    launch = LaunchSpec(
        launcher=settings.launcher, nproc_per_node=settings.nproc_per_node,
        master_port=settings.master_port or free_port(), use_cpu=not cuda,
        cpu_threads_per_process=settings.cpu_threads_per_process, hostfile=hostfile,
    )
    return TrainingPlan(
        dataset=dataset, base_model=base_model, params=params, version=version, run_key=key,
        work_dir=work_dir, resume_checkpoint=resume_checkpoint, job=job, launch=launch, world_size=procs, chat_template=template,
        chat_template_origin=origin, train_tokens=tokens, val_examples=len(val),
        model_parameters=count_parameters(base_model),
        planned_tokens=_planned_tokens(settings, tokens, packing=packing, procs=procs),
        settings=settings,
    )


def estimate_cost(plan: TrainingPlan, cost: TrainCostConfig) -> CostEstimate:
    return estimate_training_cost(
        params=plan.model_parameters, tokens=plan.planned_tokens, gpu_type=cost.gpu_type,
        gpu_count=cost.gpu_count or plan.world_size, price_per_gpu_hour=cost.price_per_gpu_hour,
        currency=cost.currency, mfu=cost.mfu, max_cost=cost.max_cost,
    )


def _step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def last_complete_checkpoint(output_dir: Path, *, clean: bool = True) -> Path | None:
    """The newest checkpoint every rank finished writing; folders a killed save left half
    written are removed when ``clean`` (resuming from one would fail, and the Trainer's rotation
    counts them)."""
    if not output_dir.is_dir():
        return None
    found = [p for p in output_dir.glob("checkpoint-*")
             if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()]
    complete = [p for p in found if (p / CHECKPOINT_COMPLETE).is_file()]
    if clean:
        for partial in set(found) - set(complete):
            shutil.rmtree(partial)
    return max(complete, key=_step_of) if complete else None


def finished_result(plan: TrainingPlan) -> dict[str, Any] | None:
    """The result of a launch that completed (model saved) but was not published yet."""
    path = Path(plan.job.result_path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def prepare_launch(plan: TrainingPlan) -> tuple[list[str], dict[str, str], TrainJob]:
    """Write the job file (resuming from the last complete checkpoint, the run's own, else
    ``train.resume_from``'s) and the launch record; the launch command."""
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    Path(plan.job.chat_template).write_text(plan.chat_template, encoding="utf-8")
    resume = last_complete_checkpoint(Path(plan.job.output_dir)) or plan.resume_checkpoint
    job = plan.job.model_copy(update={"resume_from": str(resume) if resume else None})
    job_path = plan.work_dir / "job.json"
    job_path.write_text(job.model_dump_json(indent=2), encoding="utf-8")
    launch = {"model_version": plan.version, "code_version": code_version(),
              "git_commit": git_commit(), "started_at": time.time(),
              "resume_from": job.resume_from,
              "resume_from_step": _step_of(resume) if resume else None}
    with (plan.work_dir / LAUNCHES).open("a", encoding="utf-8") as record:
        record.write(json.dumps(launch) + "\n")
    return launch_command(plan.launch, job_path), launch_env(plan.launch), job


def launches(plan: TrainingPlan) -> list[dict[str, Any]]:
    """Every launch of the run so far (code version, resumed from which checkpoint)."""
    path = plan.work_dir / LAUNCHES
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


ProgressHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


async def run_training(plan: TrainingPlan, *, on_line: Callable[[str], None],
                       on_progress: ProgressHandler) -> dict[str, Any]:
    """Launch the job (unless a previous launch already finished it) and return its result."""
    done = finished_result(plan)
    if done is not None:
        return done
    command, env, _ = prepare_launch(plan)
    await run_training_job(command, env=env, cwd=Path.cwd(), log_path=plan.work_dir / "train.log",
                           on_line=on_line, on_progress=on_progress)
    result = finished_result(plan)
    if result is None:
        raise RuntimeError(f"{plan.job.result_path}: the training job exited cleanly but wrote "
                           "no result (see train.log beside it)")
    return result


def metric_rows(log_history: list[Mapping[str, Any]]) -> pa.Table:
    """One row per logged step: train loss, eval loss, learning rate, tokens seen."""
    rows = [{
        "step": entry.get("step"), "epoch": entry.get("epoch"), "loss": entry.get("loss"),
        "eval_loss": entry.get("eval_loss"), "learning_rate": entry.get("learning_rate"),
        "grad_norm": entry.get("grad_norm"), "tokens_seen": entry.get("num_input_tokens_seen"),
    } for entry in log_history if "loss" in entry or "eval_loss" in entry]
    return pa.Table.from_pylist(rows, schema=METRIC_SCHEMA)


def hyperparameters(plan: TrainingPlan) -> dict[str, Any]:
    """Every setting of the run, for the model card."""
    job, launch = plan.job, plan.launch
    return {
        "sample form": job.sample_form,
        "loss on": "assistant turns" if job.sample_form == "messages" else "completions",
        "chat template": plan.chat_template_origin,
        **{name: getattr(job, name) for name in (
            "max_length", "epochs", "max_steps", "learning_rate", "lr_scheduler", "warmup_ratio",
            "weight_decay", "max_grad_norm", "per_device_batch_size",
            "gradient_accumulation_steps", "gradient_checkpointing", "precision", "attention",
            "packing", "eval_steps", "save_steps", "seed")},
        "global batch (sequences)": job.per_device_batch_size * job.gradient_accumulation_steps
        * plan.world_size,
        "world size": plan.world_size,
        "launcher": launch.launcher,
        "processes per node": launch.nproc_per_node,
        "deepspeed config": Path(job.deepspeed_config or "-").name,
        "optimizer": "AdamW",
        "parameters": plan.model_parameters,
        "train examples": plan.train_tokens.examples,
        "val examples": plan.val_examples,
        "train tokens per epoch": plan.train_tokens.tokens,
        # Rows whose trained part lies beyond max_length: kept, but they add nothing to the loss.
        "train examples with nothing to train on": (
            f"{plan.train_tokens.untrainable} of {plan.train_tokens.sampled} counted"),
        **({"started from (train.resume_from)": f"{plan.resume_checkpoint} (step "
            f"{_step_of(plan.resume_checkpoint)})"} if plan.resume_checkpoint else {}),
    }


def summary_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    keys = ("global_step", "world_size", "first_loss", "final_loss", "eval_loss", "tokens_seen",
            "tokens_per_s", "train_seconds", "resumed_from_step")
    return [{"metric": k, "value": result.get(k)} for k in keys]


def publish_model(store: ArtifactStore, plan: TrainingPlan, result: Mapping[str, Any], *,
                  wall_seconds: float, estimate: CostEstimate | None) -> Manifest:
    """Card and loss curve into the model folder; publish it; then drop the checkpoints and the
    work dir's copy of the model unless ``keep_checkpoints``."""
    final = Path(plan.job.final_dir)
    card = render_model_card(
        model_version=f"{MODEL_ARTIFACT}@{plan.version}", base_model=plan.settings.base_model,
        base_model_path=str(plan.base_model), dataset_version=str(plan.dataset),
        hyperparameters=hyperparameters(plan), result=result, wall_seconds=wall_seconds,
        cost_estimate=estimate.summary() if estimate else None,
    )
    (final / "README.md").write_text(card, encoding="utf-8")
    curve = plot_loss_curve(result["log_history"], plan.work_dir / "loss_curve.png",
                            title=f"{MODEL_ARTIFACT}@{plan.version} on {plan.dataset}")
    stats = {key: result.get(key) for key in (
        "global_step", "world_size", "first_loss", "final_loss", "eval_loss", "tokens_seen",
        "tokens_per_s", "train_seconds", "resumed_from_step", "device")}
    stats |= {"wall_seconds": wall_seconds, "summary": summary_rows(result),
              "cost_estimate": estimate.as_dict() if estimate else None,
              # Lineage of the weights: the work dir, and each launch's code version and the
              # checkpoint it started from (a restart after a code change shows here).
              "work_dir": str(plan.work_dir), "run_key": plan.run_key,
              "launches": launches(plan)}
    manifest = store.publish(
        MODEL_ARTIFACT, metric_rows(result["log_history"]), parents=[plan.dataset],
        params=plan.params, stats=stats, files={"model": final, "loss_curve.png": curve},
        description=f"{plan.settings.base_model} fine-tuned on {plan.dataset} "
        f"(full-parameter SFT, DeepSpeed ZeRO-3, {plan.world_size} processes)",
    )
    if manifest.version != plan.version:
        raise RuntimeError(f"published {manifest.ref}, but the run planned {plan.version}: a "
                           "re-run would not find this version")
    if not plan.settings.keep_checkpoints:
        # The store holds the model now; the log and job file stay for the record.
        shutil.rmtree(plan.job.output_dir, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        Path(plan.job.result_path).unlink(missing_ok=True)
    return manifest
