"""Issue 18 on a GPU: the outcome experiment's training path at Qwen2.5-0.5B's shape, timed.

A Qwen2 model of the requested shape (default Qwen2.5-0.5B's: hidden 896, 24 layers, 14 heads,
2 KV heads, intermediate 4864, tied embeddings, Qwen's 151,936-row vocabulary, so parameters
and logits cost what Qwen2.5-0.5B's do) is built with RANDOM weights from a fixed seed (no hub
download is possible there), with the embedded SmolLM2-135M's tokenizer and chat template (its
ids are the first 49,152 rows). Its quality numbers (losses, rewards) mean nothing; its times
and memory do.

It is then trained the way the train flow (flows/train.py) trains, without Prefect: the train
stage's own functions (``plan_training`` -> ``estimate_cost`` -> ``run_training`` under the run's
``work_dir_lock`` -> ``publish_model``) with configs/outcome.yaml and its launcher (torchrun, one
process per GPU, DeepSpeed ZeRO-3): SFT on the store's ``sft_dataset``, DPO on its
``preferences`` from the SFT model, and, when time is left, a few GRPO steps in the environments
from the SFT model. Per stage it records wall time, steps, tokens/s, peak GPU memory (NVML) and
the cost estimator's prediction for the same run (``estimate_cost``: 6 x parameters x planned
tokens at the calibrated MFU) beside what was measured: ``train_s`` is the job's own
``trainer.train()`` time (the final checkpoint included), ``steady_*`` the first to the last
logged step; then greedy generation throughput of the SFT model. It prints one JSON line with
every figure and writes it to ``$OUT/gpu_outcome.json`` (after every stage, so a run cut short
keeps what it measured), with each stage's train.log beside it.

    python tests/benchmarks/gpu_outcome.py --store STORE [--tokenizer FOLDER] [--shape tiny]

``--store`` is an artifact store root holding ``sft_dataset`` and ``preferences`` (and
``scenarios`` for GRPO) versions; the versions are copied into the work folder, the store is
not written. ``--tokenizer`` is a folder with the tokenizer files (default: the embedded
model's). ``--shape tiny`` (2 layers, hidden 64) runs it all on CPU in a few minutes. It is a
benchmark script, not a test: nothing collects it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # agentune is importable only once ensure_agentune ran
    from agentune.config import RunConfig
    from agentune.tasks.store.artifact_store import ArtifactStore

ROOT = Path(__file__).resolve().parents[2]
# GPU images often ship JAX, and datasets imports it when it is there; a JAX that initialises its
# GPU backend takes 75 % of the card (seen on an H200: 105 of 140 GiB held by this process, and
# GRPO's job then ran out of memory). Nothing here needs JAX on the GPU.
for _name, _value in (("USE_JAX", "0"), ("JAX_PLATFORMS", "cpu"),
                      ("XLA_PYTHON_CLIENT_PREALLOCATE", "false")):
    os.environ.setdefault(_name, _value)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936},
    "qwen2.5-1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936},
    # vocab_size None: the tokenizer's own.
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": None},
}
PACKAGES = ("torch", "transformers", "trl", "datasets", "deepspeed", "accelerate", "peft",
            "pydantic", "numpy", "pyarrow", "huggingface_hub", "tokenizers")
NO_SAVE = 1_000_000  # save_steps / eval_steps past the run: no checkpoint or eval mid-run


def ensure_agentune(links: Path) -> str:
    """Make ``agentune`` importable from this checkout where it is not installed (the GPU
    machine): a folder of links laid out as the installed package (pyproject's package-dir:
    flows/, tasks/ and templates/ inside agentune/), first on sys.path, and on PYTHONPATH for
    the training job's processes. The links resolve into the checkout, so agentune.paths finds
    the project root (models/deepspeed, the code version) as in an editable install.
    PYTHONSAFEPATH keeps the launcher's ``python -m`` from putting the working directory (the
    checkout, whose bare agentune/ folder has no tasks/) before them."""
    if importlib.util.find_spec("agentune") is not None:
        if importlib.util.find_spec("agentune.tasks") is not None:
            return "installed"
        sys.modules.pop("agentune", None)  # the bare agentune/ folder, found through the cwd
    package = links / "agentune"
    package.mkdir(parents=True)
    for entry in (ROOT / "agentune").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for sub in ("flows", "tasks", "templates"):
        (package / sub).symlink_to(ROOT / sub)
    sys.path.insert(0, str(links))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(links), os.environ.get("PYTHONPATH")) if p)
    os.environ["PYTHONSAFEPATH"] = "1"
    return f"linked from {links}"


class MemoryPeak:
    """Peak GPU memory in use on the first GPU while the block runs (NVML, every 0.2 s): what
    the training job's processes hold, CUDA context and allocator cache included."""

    def __init__(self) -> None:
        self.baseline_mib: float | None = None
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MemoryPeak:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML or no GPU: nothing to read
            return self

        def used() -> float:
            return pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20

        self.baseline_mib = self.peak_mib = used()

        def poll() -> None:
            while not self._stop.wait(0.2):
                self.peak_mib = max(self.peak_mib or 0.0, used())

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def figures(self) -> dict[str, float | None]:
        if self.peak_mib is None or self.baseline_mib is None:
            return {"peak_gpu_mem_mib": None, "peak_gpu_mem_delta_mib": None}
        return {"peak_gpu_mem_mib": round(self.peak_mib),
                "peak_gpu_mem_delta_mib": round(self.peak_mib - self.baseline_mib)}


def build_shaped_model(folder: Path, shape: str, tokenizer_dir: Path, seed: int) -> dict[str, Any]:
    """A Qwen2 model of ``shape`` with random weights (seeded), saved in bf16 with the
    tokenizer and chat template of ``tokenizer_dir``."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    dims = dict(SHAPES[shape])
    dims["vocab_size"] = dims["vocab_size"] or len(tokenizer)
    config = Qwen2Config(
        **dims, tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1_000_000.0,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"shape": shape, "architecture": "Qwen2ForCausalLM", "random_init": True,
            "seed": seed, **dims, "tie_word_embeddings": True,
            "parameters": sum(p.numel() for p in model.parameters()),
            "tokenizer": str(tokenizer_dir), "tokenizer_vocab": len(tokenizer),
            "build_s": round(time.perf_counter() - started, 1)}


def gpu_type(config_type: str) -> str:
    """The cost estimator's name for the GPU here (H100, H200, A100, ...), else the config's."""
    import torch

    from agentune.tasks.train.cost import GPU_PEAK_TFLOPS

    if not torch.cuda.is_available():
        return config_type
    # "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    words = torch.cuda.get_device_name(0).upper().replace("-", " ").split()
    return next((kind for kind in GPU_PEAK_TFLOPS if kind in words), config_type)


def copy_inputs(store: Path, target: Path) -> list[str]:
    """The store's training inputs (sft_dataset, preferences, scenarios) copied, links kept."""
    from agentune.tasks.train.inputs import DATA_ARTIFACT

    copied = []
    for name in sorted(set(DATA_ARTIFACT.values())):
        if (store / name).is_dir():
            shutil.copytree(store / name, target / name, symlinks=True)
            copied.append(name)
    return copied


def train_stage(label: str, config: RunConfig, store: ArtifactStore, *, method: str,
                from_model: str | None, out: Path) -> dict[str, Any]:
    """One train flow run without Prefect: plan, estimate, launch under the run lock, publish;
    its figures."""
    from agentune.tasks.train.cost import GPU_PEAK_TFLOPS
    from agentune.tasks.train.run_lock import work_dir_lock
    from agentune.tasks.train.stage import (
        estimate_cost,
        plan_training,
        publish_model,
        run_training,
    )

    started = time.perf_counter()
    plan = plan_training(config, store, method=method, from_model=from_model)
    plan_s = time.perf_counter() - started
    cost = estimate_cost(plan, config.train.cost)
    print(f"[{label}] {cost.summary()}", flush=True)

    def on_line(line: str) -> None:
        print(f"[{label}] {line}", flush=True)

    logged: list[tuple[float, int, float]] = []  # (arrival, step, tokens so far) per logged step

    def on_progress(event: dict[str, Any]) -> None:
        if event.get("event") == "log":
            # SFT counts input tokens; TRL's DPO and GRPO log num_tokens instead.
            tokens = event.get("tokens_seen") or (event.get("metrics") or {}).get("num_tokens")
            logged.append((time.perf_counter(), int(event["step"]), float(tokens or 0)))
        if event.get("event") in ("log", "eval", "done"):
            shown = {k: event.get(k) for k in ("step", "max_steps", "loss", "eval_loss",
                                                "tokens_per_s") if event.get(k) is not None}
            print(f"[{label}] {event['event']} {json.dumps(shown)}", flush=True)

    with work_dir_lock(plan.work_dir), MemoryPeak() as memory:
        launched = time.perf_counter()
        result = asyncio.run(run_training(plan, on_line=on_line, on_progress=on_progress))
        wall = time.perf_counter() - launched
    published = time.perf_counter()
    manifest = publish_model(store, plan, result, wall_seconds=wall, estimate=cost)
    publish_s = time.perf_counter() - published
    log = plan.work_dir / "train.log"
    if log.is_file():
        shutil.copy(log, out / f"{label}_train.log")

    train_s = float(result.get("train_seconds") or 0.0)
    peak = GPU_PEAK_TFLOPS[cost.gpu_type] * 1e12 * cost.gpu_count
    # The estimator's own count: 6 x parameters x the tokens it was told the run trains on.
    measured_mfu = (6.0 * plan.model_parameters * plan.planned_tokens / (train_s * peak)
                    if train_s > 0 else None)
    # Steady state: from the first logged step to the last (no start-up, warm-up step, final
    # checkpoint or evaluation).
    steady: dict[str, Any] = {"steady_step_s": None, "steady_tokens_per_s": None,
                              "steady_mfu": None}
    if len(logged) >= 2 and logged[-1][1] > logged[0][1]:
        (t0, s0, n0), (t1, s1, n1) = logged[0], logged[-1]
        rate = (n1 - n0) / (t1 - t0)
        steady = {"steady_step_s": _sig((t1 - t0) / (s1 - s0)),
                  "steady_tokens_per_s": _round(rate),
                  "steady_mfu": _sig(6.0 * plan.model_parameters * rate / peak)}
    return {
        "model": str(manifest.ref), "from": from_model or str(plan.base_model),
        "dataset": str(plan.dataset), "launcher": plan.launch.launcher,
        "world_size": plan.world_size, "deepspeed": Path(plan.job.deepspeed_config or "-").name,
        "precision": plan.job.precision, "attention": plan.job.attention,
        "packing": plan.job.packing, "max_length": plan.job.max_length,
        "global_batch": plan.job.per_device_batch_size * plan.job.gradient_accumulation_steps
        * plan.world_size,
        "train_examples": plan.train_tokens.examples, "planned_tokens": plan.planned_tokens,
        "steps": result.get("global_step"), "max_steps": result.get("max_steps"),
        "plan_s": round(plan_s, 1), "launch_wall_s": round(wall, 1),
        "train_s": round(train_s, 1), "publish_s": round(publish_s, 1),
        "tokens_seen": result.get("tokens_this_run"),
        "logged_tokens": logged[-1][2] if logged else None,
        "tokens_per_s": _round(result.get("tokens_per_s")),
        "planned_tokens_per_s": _round(plan.planned_tokens / train_s if train_s else None),
        "first_loss": _round(result.get("first_loss"), 4),
        "final_loss": _round(result.get("final_loss"), 4),
        "eval_loss": _round(result.get("eval_loss"), 4),
        "signal": result.get("signal"), "first_signal": _round(result.get("first_signal"), 4),
        "final_signal": _round(result.get("final_signal"), 4),
        "device": result.get("device"), **memory.figures(),
        "estimate": {"gpu_type": cost.gpu_type, "gpu_count": cost.gpu_count,
                     "mfu": round(cost.mfu, 4), "seconds": _sig(cost.hours * 3600),
                     "summary": cost.summary()},
        "measured_mfu": _sig(measured_mfu), **steady,
        "predicted_over_measured": _sig(cost.hours * 3600 / train_s if train_s else None),
    }


def _round(value: Any, digits: int = 1) -> Any:
    return round(value, digits) if isinstance(value, (int, float)) else value


def _sig(value: float | None) -> float | None:
    """Three significant digits (the tiny CPU run's figures are far below 0.1)."""
    return None if value is None else float(f"{value:.3g}")


def generation_throughput(model_dir: Path, prompt: list[dict[str, Any]], new_tokens: int,
                          batches: tuple[int, ...] = (1, 8)) -> dict[str, Any]:
    """Greedy ``generate`` tokens/s of a model folder on the GPU (CPU where there is none),
    ``new_tokens`` forced for every sequence."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16 if device == "cuda" else torch.float32,
        attn_implementation="sdpa").to(device).eval()
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    figures: dict[str, Any] = {"device": device, "new_tokens": new_tokens}
    for size in batches:
        batch = tokenizer([text] * size, return_tensors="pt", padding=True).to(device)
        settings = dict(do_sample=False, pad_token_id=tokenizer.pad_token_id)
        with torch.inference_mode():
            model.generate(**batch, max_new_tokens=4, **settings)  # warm-up
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           **settings)
            if device == "cuda":
                torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        figures[f"batch_{size}"] = {"prompt_tokens": int(batch["input_ids"].shape[1]),
                                    "seconds": round(seconds, 2),
                                    "tokens_per_s": round(size * new_tokens / seconds, 1)}
    return figures


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch_cuda": torch.version.cuda,
                            "cuda": torch.cuda.is_available(), "cpus": os.cpu_count()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info |= {"gpu": props.name, "gpu_count": torch.cuda.device_count(),
                 "gpu_mem_gib": round(props.total_memory / 2**30, 1)}
    return info


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True,
                        help="artifact store root with sft_dataset and preferences (and "
                        "scenarios) versions; read only")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer folder (default: the embedded model's)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "outcome.yaml")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--dpo-steps", type=int, default=20)
    parser.add_argument("--grpo-steps", type=int, default=2, help="0: no GRPO")
    parser.add_argument("--grpo-generations", type=int, default=4)
    parser.add_argument("--grpo-max-tokens", type=int, default=256,
                        help="train.grpo.max_total_response_length")
    parser.add_argument("--gen-tokens", type=int, default=128,
                        help="generation throughput: tokens per sequence (0: skip)")
    parser.add_argument("--launcher", choices=("torchrun", "deepspeed"), default="torchrun")
    parser.add_argument("--sandbox", choices=("auto", "bubblewrap", "unsafe_local"),
                        default="auto", help="the Python tool's sandbox in GRPO's environments "
                        "(auto: the config's where bwrap is installed, else unsafe_local)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="wall budget: GRPO is skipped when less than --grpo-reserve-s is "
                        "left after DPO, generation when less than 30 s")
    parser.add_argument("--grpo-reserve-s", type=float, default=150.0)
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: a temp)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the JSON and logs go (default: $OUT, else <work>/out)")
    return parser.parse_args(argv)


def gpu_config(config: RunConfig, args: argparse.Namespace, base: Path, work: Path
               ) -> tuple[RunConfig, dict[str, Any]]:
    """configs/outcome.yaml set for this machine and this short run; the settings changed."""
    import torch

    cuda = torch.cuda.is_available()
    procs = torch.cuda.device_count() if cuda else 1
    train = config.train
    sandbox = args.sandbox
    if sandbox == "auto":
        # GRPO's environments set up the Python tool's sandbox; without bwrap it is refused.
        sandbox = (config.environments.tools.sandbox.mode if shutil.which("bwrap")
                   else "unsafe_local")
    overrides: dict[str, Any] = {"seed": args.seed, "train": {
        "base_model": str(base), "launcher": args.launcher, "nproc_per_node": procs,
        "max_steps": args.sft_steps, "eval_steps": NO_SAVE, "save_steps": NO_SAVE,
        "work_dir": str(work / "runs"), "keep_checkpoints": False,
        "precision": "bf16" if cuda else train.precision,
        "cost": {"gpu_type": gpu_type(train.cost.gpu_type), "gpu_count": procs},
        # A pair longer than max_length is left out (and reported in the run card) rather than
        # failing the run.
        "dpo": {"max_steps": args.dpo_steps, "overlength": "drop"},
        "grpo": {"max_steps": max(args.grpo_steps, 1), "num_generations": args.grpo_generations,
                 "max_total_response_length": args.grpo_max_tokens, "max_tool_calls": 2},
    }, "environments": {"tools": {"sandbox": {"mode": sandbox}}}}
    return config.merged(**overrides), overrides


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    work = (args.work or Path(tempfile.mkdtemp(prefix="agentune-gpu-outcome-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = (args.out or Path(os.environ.get("OUT") or work / "out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    source_store = args.store.resolve()
    tokenizer_arg = args.tokenizer.resolve() if args.tokenizer else None
    config_path = args.config.resolve()
    os.chdir(ROOT)  # the configs' relative paths (data/demo/...) are the checkout's
    figures: dict[str, Any] = {
        "what": f"agentune's train stage (SFT, DPO, GRPO) on a RANDOM-INIT {args.shape}-shaped "
                "Qwen2 model: losses and rewards mean nothing, times and memory do",
        "agentune": ensure_agentune(work / "links"), "config": str(args.config),
        "store": str(source_store), "stages": {}}
    stages: dict[str, Any] = figures["stages"]

    def save() -> str:
        """The figures so far into gpu_outcome.json (a run cut short keeps what it measured)."""
        figures["wall_s"] = round(time.perf_counter() - started, 1)
        line = json.dumps(figures, default=str)
        (out / "gpu_outcome.json").write_text(line + "\n", encoding="utf-8")
        return line

    def run(label: str, cfg: RunConfig, store: ArtifactStore, method: str,
            from_model: str | None) -> str | None:
        try:
            stages[label] = train_stage(label, cfg, store, method=method, from_model=from_model,
                                        out=out)
            print(json.dumps({label: stages[label]}), flush=True)
            return str(stages[label]["model"])
        except Exception as exc:  # the next stages still run and the figures are written
            traceback.print_exc()
            stages[label] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            return None
        finally:
            save()

    try:
        from agentune.config import load_config
        from agentune.tasks.llm.embedded_model import resolve_model_path
        from agentune.tasks.store.artifact_store import ArtifactStore

        figures |= {"versions": versions(), "device": device_info()}
        print(json.dumps({"preflight": figures}), flush=True)
        figures["inputs"] = copy_inputs(source_store, work / "store")
        store = ArtifactStore(work / "store")
        base = work / f"{args.shape}-random"
        figures["model"] = build_shaped_model(
            base, args.shape, tokenizer_arg or resolve_model_path("embedded"), args.seed)
        print(json.dumps({"model": figures["model"]}), flush=True)
        config, figures["overrides"] = gpu_config(load_config(config_path), args, base, work)
        save()

        sft = run("sft", config, store, "sft", None)
        if sft is not None:
            run("dpo", config, store, "dpo", sft)
            left = args.budget_s - (time.perf_counter() - started)
            if args.grpo_steps <= 0:
                stages["grpo"] = {"skipped": "--grpo-steps 0"}
            elif left < args.grpo_reserve_s:
                stages["grpo"] = {"skipped": f"{left:.0f} s of the budget left"}
            else:
                # The batch of rollouts (per-device batch x accumulation x processes) must be a
                # multiple of the group size.
                procs = config.train.nproc_per_node
                grpo = config.merged(train={"gradient_accumulation_steps": max(
                    1, args.grpo_generations // procs)})
                run("grpo", grpo, store, "grpo", sft)
            left = args.budget_s - (time.perf_counter() - started)
            if args.gen_tokens > 0 and left > 30:
                try:
                    row = store.read("sft_dataset").iloc[0]
                    prompt = [dict(m) for m in row["messages"]
                              if m["role"] in ("system", "user")][:2]
                    figures["generation"] = generation_throughput(
                        store.file(sft, "model"), prompt, args.gen_tokens)
                except Exception as exc:
                    traceback.print_exc()
                    figures["generation"] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
        figures["prefect_imported"] = any(m.split(".")[0] == "prefect" for m in sys.modules)
    except Exception as exc:
        traceback.print_exc()
        figures["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        print(save(), flush=True)
        if args.work is None and not out.is_relative_to(work):
            shutil.rmtree(work, ignore_errors=True)  # the models: GBs at the real shape
    failed = "error" in figures or any("error" in s for s in stages.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
