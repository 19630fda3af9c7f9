"""The train stage's work as plain functions, in the order the flow runs them.

:func:`plan_training` resolves the model training starts from and the training chat template,
has the method (``methods.METHODS``: ``sft.py``, ``dpo.py``, ``grpo.py``) prepare its train rows
(the sft_dataset, preferences or scenarios version; task weights, replay) and audit them (SFT:
tokens to train on; DPO: lengths TRL would truncate), fixes every "auto" setting for this
machine, counts the tokens the run feeds the model and derives the id of the ``model`` version
the run will publish. The run's work dir (``<train.work_dir>/<run key>``, the key a hash of the
dataset version and the training parameters, not of the code) holds its lock, job file, log,
launch record, checkpoints and the saved model, so a run started again with the same inputs
resumes from its last complete checkpoint, also when the code changed in between (which changes
the model version id). Where the run's own folder has no checkpoint, ``train.resume_from`` names
one to start from.
:func:`estimate_cost` sizes it in GPU-hours and money; :func:`run_training` launches the job
and follows it; :func:`publish_model` writes the model card and loss curve and publishes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from agentune.config import RunConfig
from agentune.config.train import METHOD_READS, NO_DEEPSPEED, TrainConfig, TrainCostConfig
from agentune.paths import models_dir
from agentune.tasks.llm.model_folders import (
    ModelFolder,
    adapter_base,
    is_adapter,
    load_causal_lm,
)
from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    Manifest,
    VersionRef,
    code_version,
    file_fingerprint,
    git_commit,
)
from agentune.tasks.store.inputs import version_params
from agentune.tasks.train.cost import CostEstimate, estimate_training_cost
from agentune.tasks.train.examples import TokenCount, write_examples
from agentune.tasks.train.inputs import starting_model
from agentune.tasks.train.job import TrainJob
from agentune.tasks.train.launcher import (
    LaunchSpec,
    free_port,
    launch_command,
    launch_env,
    run_training_job,
    world_size,
)
from agentune.tasks.train.methods import METHODS
from agentune.tasks.train.model_card import (
    plot_loss_curve,
    plot_signal_curve,
    render_model_card,
)
from agentune.tasks.train.sft_trainer import CHECKPOINT_COMPLETE, RESULT_FILE

MODEL_ARTIFACT = "model"
CHECKPOINTS = "checkpoints"
FINAL_MODEL = "model"
MERGED_MODEL = "merged"
START_MODEL = "start_model"
TRAIN_FILE = "train.jsonl"
VAL_FILE = "val.jsonl"
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
    """The model training starts from (the policy; DPO's and GRPO's reference)."""
    params: dict[str, Any]
    """What decides the trained weights; with the parents, the model version's identity."""
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
    method: str = "sft"
    start: ModelFolder | None = None
    parents: tuple[VersionRef, ...] = ()
    train_examples: tuple[dict[str, Any], ...] = ()
    val_examples_list: tuple[dict[str, Any], ...] = ()
    scenario_rows: tuple[dict[str, Any], ...] = ()
    mix: dict[str, Any] = field(default_factory=dict)
    """Task weights and replay as applied, and the length audit (for the run card)."""
    reward: list[dict[str, Any]] | None = None
    merge_start: bool = False
    """The starting model is an adapter: merged into the work dir before launch."""


def resolve_precision(choice: str, *, cuda: bool) -> str:
    """``bf16`` / ``fp16`` / ``fp32`` by the one precision policy (tasks/llm/precision.py):
    auto is bf16 on GPUs and CPUs that have it natively, fp16 on older GPUs, else fp32; the
    choice and its reason are logged."""
    # Imported here: it pulls in torch, which planning a run (or importing the flow) never needs.
    from agentune.tasks.llm.precision import resolve_precision as llm_precision

    resolved = llm_precision(choice, "cuda" if cuda else "cpu", gpu_fallback="float16")
    resolved.log("training precision")
    return resolved.training_name


def resolve_attention(choice: str) -> str:
    if choice != "auto":
        return choice
    from transformers.utils import is_flash_attn_2_available

    return "flash_attention_2" if is_flash_attn_2_available() else "sdpa"


def resolve_packing(choice: str, attention: str) -> bool:
    if choice == "auto":
        return attention == "flash_attention_2"
    return choice == "on"


def deepspeed_config_path(name: str) -> Path | None:
    """A config named in models/deepspeed (``zero3``), or a path to a DeepSpeed JSON file;
    None for ``none`` (no DeepSpeed)."""
    if name == NO_DEEPSPEED:
        return None
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


def engine_text(deepspeed_config: str | None) -> str:
    """How the job trains, for the version's description: ``DeepSpeed ZeRO-3`` or ``no
    DeepSpeed``."""
    if deepspeed_config is None:
        return "no DeepSpeed"
    config = json.loads(Path(deepspeed_config).read_text(encoding="utf-8"))
    return f"DeepSpeed ZeRO-{config['zero_optimization'].get('stage', 0)}"


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


def _planned_tokens(settings: TrainConfig, tokens: TokenCount, *, packing: bool,
                    procs: int, epochs: float, max_steps: int | None) -> int:
    """Tokens the run will train on: by max_steps when set, else by epochs."""
    if max_steps is None:
        return round(epochs * tokens.tokens)
    sequences_per_step = settings.per_device_batch_size * settings.gradient_accumulation_steps * procs
    per_sequence = settings.max_length if packing else tokens.mean_tokens
    return round(max_steps * sequences_per_step * per_sequence)


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


def plan_training(config: RunConfig, store: ArtifactStore, *, method: str | None = None,
                  from_model: str | None = None) -> TrainingPlan:
    """Everything about the run that can be known before launching it. ``method`` and
    ``from_model`` override train.method and train.from_model (the pipeline's second run)."""
    import torch
    from transformers import AutoTokenizer

    from agentune.tasks.common.chat_audit import training_chat_template

    settings = config.train
    spec = METHODS[method or settings.method]
    start = starting_model(config, store, from_model)
    adapter = is_adapter(start.path)
    weights = adapter_base(start.path) if adapter else start.path
    tokenizer = AutoTokenizer.from_pretrained(start.path)
    override = settings.chat_template or config.dataset.chat_template
    try:
        template, origin = training_chat_template(tokenizer, override)
    except ValueError as exc:
        raise ValueError(f"{start.path}: {exc} (or train.chat_template)") from None

    prepared = spec.prepare(config, store, start, tokenizer, template)
    data, tokens = prepared.data, prepared.tokens
    mix: dict[str, Any] = {}
    if data.weighting:
        mix["task weights"] = data.weighting
    if data.replay:
        mix["replay"] = data.replay
    mix |= prepared.notes

    cuda = torch.cuda.is_available()
    precision = resolve_precision(settings.precision, cuda=cuda)
    attention = resolve_attention(settings.attention)
    packing = resolve_packing(settings.packing, attention) if spec.packs else False
    hostfile = Path(settings.hostfile).resolve() if settings.hostfile else None
    procs = world_size(settings.nproc_per_node, hostfile)
    if cuda and hostfile is None and settings.nproc_per_node > torch.cuda.device_count():
        raise ValueError(f"train.nproc_per_node={settings.nproc_per_node}: this machine has "
                         f"{torch.cuda.device_count()} GPU(s)")
    spec.check_world(settings, procs)
    ds_config = deepspeed_config_path(settings.deepspeed)
    schedule = spec.schedule(settings)

    resume_checkpoint = None
    if settings.resume_from is not None:
        resume_checkpoint = resolve_resume_checkpoint(settings.resume_from)
    # What the method reads of the run config (METHOD_READS), each field the plan resolves as it
    # resolved it: the model it starts from, this machine's precision and world size, the
    # method's schedule and settings, the replay where rows were replayed (grpo trains on
    # prompts: never), the checkpoint a resumed run continues.
    resolved: dict[str, Any] = {
        "train.method": spec.name,
        "train.chat_template": _sha256_text(template),  # the template trained with
        "train.base_model": {"name": start.name, **start.identity},
        "train.from_model": str(start.version) if start.version else None,
        "train.precision": precision,
        "train.attention": attention,
        "train.packing": packing,
        "train.nproc_per_node": procs,
        "train.deepspeed": file_fingerprint(ds_config) if ds_config else None,
        "train.replay": settings.replay.model_dump(mode="json")
        if settings.replay and data.replay is not None else None,
        "train.resume_from": _resume_record(resume_checkpoint) if resume_checkpoint else None,
        "train.dpo": None, "train.grpo": None,
        **{f"train.{name}": value for name, value in schedule.items()},
        **prepared.params,
    }
    params = version_params(config, METHOD_READS[spec.name], resolved)
    parents = [data.dataset, *([start.version] if start.version else []),
               *data.replay_sources]
    version = store.version_id(MODEL_ARTIFACT, parents=parents, params=params)
    # The run key: the data, the starting model and replayed versions, and the settings.
    key = run_key(data.dataset, {**params, "parents": sorted(str(p) for p in parents)})
    work_dir = (Path(settings.work_dir) / key).resolve()
    merge_start = adapter
    base_model = work_dir / START_MODEL if merge_start else start.path
    lora = settings.lora
    job = TrainJob(
        method=spec.name,
        store_root=str(store.root.resolve()),
        dataset=str(data.dataset),
        sample_form=settings.sample_form,
        base_model=str(base_model),
        chat_template=str(work_dir / "chat_template.jinja"),
        output_dir=str(work_dir / CHECKPOINTS),
        final_dir=str(work_dir / FINAL_MODEL),
        result_path=str(work_dir / RESULT_FILE),
        train_file=str(work_dir / TRAIN_FILE),
        val_file=str(work_dir / VAL_FILE) if data.val else None,
        deepspeed_config=str(ds_config) if ds_config else None,
        lora=lora,
        **spec.job_fields(config, work_dir),
        precision=precision,  # type: ignore[arg-type]
        attention=attention,  # type: ignore[arg-type]
        packing=packing,
        seed=config.seed,
        **schedule,
        **settings.model_dump(include={
            "max_length", "lr_scheduler", "warmup_ratio", "weight_decay", "max_grad_norm",
            "per_device_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
            "logging_steps", "eval_steps", "save_steps", "save_total_limit",
        }),
    )
    launch = LaunchSpec(
        launcher=settings.launcher, nproc_per_node=settings.nproc_per_node,
        master_port=settings.master_port or free_port(), use_cpu=not cuda,
        cpu_threads_per_process=settings.cpu_threads_per_process, hostfile=hostfile,
    )
    planned = _planned_tokens(settings, tokens, packing=packing, procs=procs,
                              epochs=schedule["epochs"], max_steps=schedule["max_steps"])
    return TrainingPlan(
        dataset=data.dataset, base_model=start.path, params=params, version=version,
        run_key=key, work_dir=work_dir, resume_checkpoint=resume_checkpoint, job=job, launch=launch, world_size=procs, chat_template=template,
        chat_template_origin=origin, train_tokens=tokens, val_examples=len(data.val),
        model_parameters=count_parameters(weights), planned_tokens=planned,
        settings=settings, method=spec.name, start=start, parents=tuple(parents),
        train_examples=tuple(data.train), val_examples_list=tuple(data.val),
        scenario_rows=tuple(data.scenario_rows), mix=mix, reward=prepared.reward,
        merge_start=merge_start,
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
    if plan.job.train_file is not None:
        write_examples(plan.train_examples, plan.job.train_file)
    if plan.job.val_file is not None:
        write_examples(plan.val_examples_list, plan.job.val_file)
    if plan.job.grpo is not None:
        scenarios = Path(plan.job.grpo.scenarios_file)
        tmp = scenarios.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(plan.scenario_rows), ensure_ascii=False, default=str),
                       encoding="utf-8")
        tmp.replace(scenarios)
    if plan.merge_start and not (Path(plan.job.base_model) / "config.json").is_file():
        # Training continues from full weights: the starting adapter merged into its base.
        merge_adapter(plan.base_model, Path(plan.job.base_model))
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
    job, launch, spec = plan.job, plan.launch, METHODS[plan.method]
    method: dict[str, Any] = {"method": plan.method,
                              "starts from": plan.start.name if plan.start else str(plan.base_model),
                              "parameters trained": "LoRA adapters" if job.lora else "all"}
    if job.lora:
        method |= {f"lora {k}": v for k, v in job.lora.model_dump().items()}
    method |= spec.card(job)
    if plan.reward:
        method["reward"] = ", ".join(f"{t['name']} x{t['weight']} ({t['version']})"
                                     for t in plan.reward)
    for name, report in plan.mix.items():
        method[name] = json.dumps(report, ensure_ascii=False, default=str)
    return {
        **method,
        "sample form": job.sample_form,
        "loss on": spec.loss_on(job),
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
        "deepspeed config": Path(job.deepspeed_config or NO_DEEPSPEED).name,
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
    keys = ("method", "global_step", "world_size", "first_loss", "final_loss", "eval_loss",
            "tokens_seen", "tokens_per_s", "train_seconds", "resumed_from_step")
    rows = [{"metric": k, "value": result.get(k)} for k in keys]
    if result.get("signal"):
        rows += [{"metric": f"{result['signal']} (first logged)", "value": result.get("first_signal")},
                 {"metric": f"{result['signal']} (last logged)", "value": result.get("final_signal")}]
    return rows


def merge_adapter(adapter: Path, target: Path) -> Path:
    """An adapter folder merged into its base: full weights, tokenizer and chat template."""
    from transformers import AutoTokenizer

    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = load_causal_lm(adapter)
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(adapter).save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.replace(target)
    return target


def publish_model(store: ArtifactStore, plan: TrainingPlan, result: Mapping[str, Any], *,
                  wall_seconds: float, estimate: CostEstimate | None) -> Manifest:
    """Card and loss curve into the model folder; publish it; then drop the checkpoints and the
    work dir's copy of the model unless ``keep_checkpoints``."""
    final = Path(plan.job.final_dir)
    lora = plan.job.lora is not None
    merged = Path(plan.work_dir) / MERGED_MODEL
    merge = lora and plan.settings.lora is not None and plan.settings.lora.merge
    if merge and not (merged / "config.json").is_file():
        merge_adapter(final, merged)
    engine = engine_text(plan.job.deepspeed_config)
    card = render_model_card(
        model_version=f"{MODEL_ARTIFACT}@{plan.version}",
        base_model=plan.start.name if plan.start else plan.settings.base_model,
        base_model_path=str(plan.base_model), dataset_version=str(plan.dataset),
        hyperparameters=hyperparameters(plan), result=result, wall_seconds=wall_seconds,
        cost_estimate=estimate.summary() if estimate else None,
        engine=engine, method=METHODS[plan.method].text,
        lora=lora, merged=merge,
    )
    for folder in (final, merged) if merge else (final,):
        (folder / "README.md").write_text(card, encoding="utf-8")
    curve = plot_loss_curve(result["log_history"], plan.work_dir / "loss_curve.png",
                            title=f"{MODEL_ARTIFACT}@{plan.version} on {plan.dataset}")
    files = {"model": merged if merge else final, "loss_curve.png": curve}
    if merge:
        files["adapter"] = final
    if result.get("signal"):
        files["reward_curve.png"] = plot_signal_curve(
            result["log_history"], result["signal"], plan.work_dir / "reward_curve.png",
            title=f"{MODEL_ARTIFACT}@{plan.version} ({plan.method})")
    stats = {key: result.get(key) for key in (
        "method", "global_step", "world_size", "first_loss", "final_loss", "eval_loss",
        "tokens_seen", "tokens_per_s", "train_seconds", "resumed_from_step", "device",
        "signal", "first_signal", "final_signal")}
    stats |= {"wall_seconds": wall_seconds, "summary": summary_rows(result),
              "cost_estimate": estimate.as_dict() if estimate else None,
              "lora": {"adapter": lora, "merged": merge}, "mix": plan.mix,
              "lineage": {"method": plan.method, "reward": plan.reward,
                          "parent_model": plan.params["train"]["base_model"]},
              # Lineage of the weights: the work dir, and each launch's code version and the
              # checkpoint it started from (a restart after a code change shows here).
              "work_dir": str(plan.work_dir), "run_key": plan.run_key,
              "launches": launches(plan)}
    how = "LoRA" if lora else "full-parameter"
    manifest = store.publish(
        MODEL_ARTIFACT, metric_rows(result["log_history"]), parents=list(plan.parents),
        params=plan.params, stats=stats, files=files,
        description=f"{stats['lineage']['parent_model']['name']} trained by {plan.method} on "
        f"{plan.dataset} ({how}, {engine}, "
        f"{plan.world_size} process{'es' if plan.world_size > 1 else ''})"
        + (": `model` holds the merged weights, `adapter` the adapter" if merge else
           ": `model` holds the adapter (loads on its base)" if lora else ""),
    )
    if manifest.version != plan.version:
        raise RuntimeError(f"published {manifest.ref}, but the run planned {plan.version}: a "
                           "re-run would not find this version")
    if not plan.settings.keep_checkpoints:
        # The store holds the model now; the log and job file stay for the record.
        shutil.rmtree(plan.job.output_dir, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        shutil.rmtree(merged, ignore_errors=True)
        Path(plan.job.result_path).unlink(missing_ok=True)
    return manifest
