"""The trained model's card (README.md in the model folder) and its loss curve (PNG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentune.tasks.common.figures import png_figure


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_model_card(*, model_version: str, base_model: str, base_model_path: str,
                      dataset_version: str, hyperparameters: Mapping[str, Any],
                      result: Mapping[str, Any], wall_seconds: float,
                      cost_estimate: str | None, engine: str,
                      method: str = "supervised fine-tuning (TRL SFTTrainer)",
                      lora: bool = False, merged: bool = False) -> str:
    """Markdown: what was trained from what, with which settings, and how it went."""
    results = {
        "world size (processes)": result["world_size"],
        "device": result["device"],
        "optimizer steps": result["global_step"],
        "epochs": result["epoch"],
        "resumed from step": result["resumed_from_step"],
        "train loss (first logged)": result["first_loss"],
        "train loss (last logged)": result["final_loss"],
        "train loss (mean over this launch)": result["train_loss_mean"],
        "eval loss (val split)": result["eval_loss"],
        "tokens seen (non-padding, all launches)": result["tokens_seen"],
        "tokens/s (this launch)": result["tokens_per_s"],
        "training time, s (this launch)": result["train_seconds"],
        "wall time, s (launch to saved model)": wall_seconds,
    }
    if result.get("signal"):
        results[f"{result['signal']} (first logged)"] = result.get("first_signal")
        results[f"{result['signal']} (last logged)"] = result.get("final_signal")
    how = ("LoRA adapters (peft)" if lora else "Full-parameter") + f" {method}, {engine},"
    if lora and not merged:
        load = ["from peft import AutoPeftModelForCausalLM",
                "model = AutoPeftModelForCausalLM.from_pretrained(path)  # adapter on its base",
                "model = model.merge_and_unload()  # optional: plain weights, full speed"]
        intro = (f"{how} of a tool-using agent by the Meta-Agent Tuning recipe. This folder "
                 "holds the adapter; its base model is named in adapter_config.json:")
    else:
        load = ["from transformers import AutoModelForCausalLM",
                "model = AutoModelForCausalLM.from_pretrained(path)"]
        intro = (f"{how} of a tool-using agent by the Meta-Agent Tuning recipe"
                 + (" (the adapter merged into its base; the adapter itself is the version's "
                    "`adapter` file)" if merged else "") + ". Load it with plain transformers:")
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        f"tags: [agentune, {result.get('method') or 'sft'}, tool-use, agent]",
        "---",
        "",
        f"# agentune model `{model_version}`",
        "",
        intro,
        "",
        "```python",
        "from transformers import AutoTokenizer",
        *load,
        "tokenizer = AutoTokenizer.from_pretrained(path)  # its chat template renders tools",
        "```",
        "",
        "## Inputs",
        "",
        f"- base model: `{base_model}`"
        + (f" (`{base_model_path}`)" if base_model_path != base_model else ""),
        f"- dataset: `{dataset_version}`",
        "",
        "## Hyperparameters",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {_number(v)} |" for k, v in hyperparameters.items()),
        "",
        "## Results",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {k} | {_number(v)} |" for k, v in results.items()),
        "",
        "![loss curve](../loss_curve.png)",
    ]
    if result.get("signal"):
        lines += ["", "![reward curve](../reward_curve.png)"]
    if cost_estimate:
        lines += ["", "## Cost estimate made before launch", "", cost_estimate]
    return "\n".join(lines) + "\n"


def plot_loss_curve(log_history: Sequence[Mapping[str, Any]], path: Path, *, title: str) -> Path:
    """Train loss per step, and eval loss where the val split was evaluated."""
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e and "step" in e]
    evals = [(e["step"], e["eval_loss"]) for e in log_history if "eval_loss" in e and "step" in e]
    with png_figure(path, title=title, xlabel="optimizer step", ylabel="loss") as ax:
        if train:
            ax.plot(*zip(*train), label="train loss", marker="." if len(train) < 50 else None)
        if evals:
            ax.plot(*zip(*evals), label="eval loss (val)", marker="o")
        if train or evals:
            ax.legend()
    return path


SIGNAL_LABEL = {"reward": "mean rollout reward (GRPO)",
                "rewards/margins": "chosen - rejected reward margin (DPO)"}


def plot_signal_curve(log_history: Sequence[Mapping[str, Any]], signal: str, path: Path, *,
                      title: str) -> Path:
    """What the method optimises, per logged step: GRPO's mean reward, DPO's reward margin."""
    points = [(e["step"], e[signal]) for e in log_history if signal in e and "step" in e]
    label = SIGNAL_LABEL.get(signal, signal)
    with png_figure(path, title=title, xlabel="optimizer step", ylabel=label) as ax:
        if points:
            ax.plot(*zip(*points), marker="." if len(points) < 50 else None, label=label,
                    color="#dd8452")
            ax.legend()
    return path
