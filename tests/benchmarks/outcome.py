"""`make outcome`: does the whole loop make the embedded model a better agent on tasks it never saw?

One seeded experiment on CPU (configs/outcome.yaml, which extends the demo config):

- **data, once**: collect_queries -> build_scenarios -> build_templates -> synthesize (every train
  scenario, k attempts in fresh environments, each verified) -> build_dataset;
- **per seed**: train sft -> the config's ``train.method`` from the SFT model (dpo:
  build_preferences, pairs of verified and failed attempts of a scenario, then DPO; grpo: GRPO
  in the environments) -> evaluate base, sft and that final model: closed loop on the held-out
  scenarios of the training environments and on the reserved environment (unseen tools), and a
  fixed BFCL subset scored by bfcl-eval's own checker.

Before anything is reported, no held-out or reserved scenario id and no evaluated BFCL id may be
in a training artifact (trajectories, attempts, sft_dataset, preferences): the run fails
otherwise. It prints one JSON line with every figure and writes the report (table, PNG, config,
command, versions, wall time), by default docs/OUTCOME.md and docs/outcome.png.

The target (issue 18): the final model's held-out pass@1 at least 1.5x the base's and 10 points
above it, the mean over the seeds; reserved and BFCL not below base by more than the spread
measured across the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from agentune.cli import run_flow, synthesis_yield
from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.figures import png_figure
from agentune.tasks.evaluate.report import grouped_bars
from agentune.tasks.store.artifact_store import ArtifactStore

DATA_STAGES = ("collect_queries", "build_scenarios", "build_templates", "synthesize",
               "build_dataset")
MODELS = ("base", "sft", "final")  # final: the dpo or grpo model trained from the sft one
SPLITS = ("heldout", "natural", "reserved")  # natural: written scenarios, with generation on
PACKAGES = ("torch", "transformers", "trl", "deepspeed", "prefect", "datasets", "xgrammar")
TARGET_RATIO, TARGET_POINTS = 1.5, 0.10


@dataclass
class SeedRun:
    """One seed's models and what evaluate measured for them."""

    seed: int
    method: str  # how the final model was trained from the sft one
    versions: dict[str, str]
    closed_loop: list[dict[str, Any]]  # {model, split, cases, pass@1, pass^k, reward}
    bfcl: list[dict[str, Any]]  # {model, bfcl_category, accuracy, correct, n}
    wall_s: dict[str, float] = field(default_factory=dict)
    note: str | None = None  # why the final model is not what the method says, when it is not


def run_stage(stage: str, config: RunConfig, wall: dict[str, float], **extra: Any) -> dict:
    """Run one stage flow in this process (Prefect's ephemeral API, as `agentune run` does)."""
    from agentune.flows import RUNNABLE

    started = time.monotonic()
    result = run_flow(RUNNABLE[stage](config=config, **extra))
    name = stage if stage != "train" else f"train {extra.get('method', config.train.method)}"
    wall[name] = round(time.monotonic() - started, 1)
    print(f"outcome: {name} done in {wall[name]:.0f} s: {json.dumps(result['outputs'])}",
          file=sys.stderr, flush=True)
    return result


def run_seed(config: RunConfig, seed: int) -> SeedRun:
    wall: dict[str, float] = {}
    cfg = config.merged(seed=seed)
    method = cfg.train.method
    if method == "sft":
        raise SystemExit("outcome: train.method is sft; the experiment needs dpo or grpo")
    store = ArtifactStore(config.store.root)
    sft = run_stage("train", cfg, wall, method="sft")["outputs"]["model"]
    versions, note = {"sft": sft}, None
    if method == "dpo":
        pref_cfg = cfg.merged(preferences={"student": {"model": sft}})
        versions["preferences"] = run_stage("build_preferences", pref_cfg,
                                            wall)["outputs"]["preferences"]
        cfg = cfg.merged(train={"preferences": versions["preferences"]})
        if not store.manifest(versions["preferences"]).rows:
            note = (f"seed {seed}: build_preferences found no pair ({versions['preferences']}: "
                    "see its run summary), so no DPO ran: the final model is the SFT model")
    if note is None:
        final = run_stage("train", cfg, wall, method=method, from_model=sft)["outputs"]["model"]
    else:
        print(f"outcome: {note}", file=sys.stderr, flush=True)
        final = sft
    versions["final"] = final
    models = [{"label": "base", "model": cfg.train.base_model},
              {"label": "sft", "model": sft}, {"label": "final", "model": final}]
    evaluated = run_stage("evaluate", cfg.merged(evaluate={"models": models}), wall)
    stats = store.manifest(evaluated["outputs"]["eval_report"]).stats
    versions |= {k: v for k, v in evaluated["outputs"].items()
                 if k == "eval_report" or k.startswith("eval_bfcl")}
    return SeedRun(seed, method, versions, list(stats.get("closed_loop") or []),
                   list(stats.get("bfcl") or []), wall, note)


def id_values(frame: Any) -> set[str]:
    """Every value of the columns that hold ids (``id``, ``scenario_id``, ``query_id`` ...)."""
    out: set[str] = set()
    for column in frame.columns:
        if column == "id" or column.endswith("_id"):
            out |= {str(v) for v in frame[column].dropna()}
    return out


def leaks(store: ArtifactStore, training: Sequence[str], scenarios: str,
          bfcl: Sequence[str]) -> list[str]:
    """Evaluated ids (held-out and reserved scenarios, BFCL entries) found in a training
    artifact, as ``artifact@version: id`` lines; empty when the evaluation is clean."""
    table = store.read(scenarios)
    evaluated = {str(i) for i in table.loc[table["split"].isin(SPLITS), "id"]}
    for version in bfcl:
        evaluated |= {str(i) for i in store.read(version)["id"]}
    found = []
    for version in training:
        for leaked in sorted(id_values(store.read(version)) & evaluated):
            found.append(f"{version}: {leaked}")
    return found


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def figures(runs: Sequence[SeedRun]) -> dict[str, Any]:
    """Mean and spread (sample standard deviation over the seeds) of every figure, and the
    verdict against the target."""
    def series(rows_of: str, key: str, group: str, model: str, name: str) -> list[float]:
        values = []
        for run in runs:
            row = next((r for r in getattr(run, rows_of)
                        if r["model"] == model and r[key] == group), None)
            if row is not None and row[name] is not None:
                values.append(float(row[name]))
        return values

    out: dict[str, Any] = {"seeds": [r.seed for r in runs]}
    categories = dict.fromkeys(r["bfcl_category"] for run in runs for r in run.bfcl)
    for model in MODELS:
        for split in SPLITS:
            values = series("closed_loop", "split", split, model, "pass@1")
            out[f"{model}/{split}/pass@1"] = _summary(values)
        for category in categories:
            values = series("bfcl", "bfcl_category", category, model, "accuracy")
            out[f"{model}/bfcl/{category}"] = _summary(values)
    base, final = out["base/heldout/pass@1"], out["final/heldout/pass@1"]
    checks = {"heldout x1.5 and +10 points": (
        final["mean"] is not None and base["mean"] is not None
        and final["mean"] >= TARGET_RATIO * base["mean"]
        and final["mean"] >= base["mean"] + TARGET_POINTS)}
    for key in [k for k in out if k.startswith("base/") and k != "base/heldout/pass@1"]:
        b, f = out[key], out["final/" + key.split("/", 1)[1]]
        if b["mean"] is not None and f["mean"] is not None:
            noise = max(b["spread"], f["spread"])
            checks[f"{key.split('/', 1)[1]} not below base by more than the spread"] = (
                f["mean"] >= b["mean"] - noise)
    out["checks"] = checks
    out["target_met"] = all(checks.values())
    return out


def _summary(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"mean": None, "spread": None, "per_seed": []}
    return {"mean": round(statistics.fmean(values), 4), "spread": round(_spread(values), 4),
            "per_seed": [round(v, 4) for v in values]}


def plot(result: Mapping[str, Any], path: Path) -> Path:
    groups = [k.split("/", 1)[1] for k in result if k.startswith("base/")]
    series = {model: [100 * (result[f"{model}/{g}"]["mean"] or 0.0) for g in groups]
              for model in MODELS}
    with png_figure(path, size=(max(7.0, 1.4 * len(groups) + 2), 4.2)) as ax:
        grouped_bars(ax, groups, series, label_format=".0f", ylabel="x100 (mean over seeds)",
                     title="outcome: closed-loop pass@1 and BFCL accuracy", rotation=20)
        ax.set_ylim(0, 110)
    return path


def markdown(result: Mapping[str, Any], runs: Sequence[SeedRun], *, data: Mapping[str, str],
             command: str, config_text: str, png: str, wall_s: float,
             environment: Mapping[str, str]) -> str:
    def cell(key: str) -> str:
        f = result[key]
        if f["mean"] is None:
            return "-"
        return f"{100 * f['mean']:.1f} ± {100 * f['spread']:.1f}"

    groups = [k.split("/", 1)[1] for k in result if k.startswith("base/")]
    lines = ["# The outcome, measured", "",
             f"Produced by `{command}` in {wall_s / 60:.1f} min on "
             f"{environment['machine']}; seeds {', '.join(map(str, result['seeds']))}. "
             "Figures are x100, mean ± standard deviation over the seeds. Closed loop: pass@1 "
             "of the model acting in the environments, scored by the verifier; BFCL: accuracy "
             "by bfcl-eval's own checker.", "",
             "| figure | " + " | ".join(MODELS) + " |", "|---|" + "---|" * len(MODELS)]
    lines += [f"| {g} | " + " | ".join(cell(f"{m}/{g}") for m in MODELS) + " |" for g in groups]
    lines += ["", f"![outcome]({png})", "", "## Target", ""]
    lines += [f"- {name}: {'met' if ok else '**missed**'}" for name, ok in result["checks"].items()]
    lines += ["", "## Per seed", "", "| seed | final method | sft | preferences | final | "
              "wall time |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.seed} | {r.method} | `{r.versions['sft']}` | "
              f"{'`' + r.versions['preferences'] + '`' if 'preferences' in r.versions else '-'} | "
              f"`{r.versions['final']}` | "
              + ", ".join(f"{k} {v:.0f} s" for k, v in r.wall_s.items()) + " |" for r in runs]
    notes = [f"- {r.note}" for r in runs if r.note]
    lines += ["", *notes] if notes else []
    lines += ["", "## Data", "", "| stage | wall time | outputs |", "|---|---|---|"]
    lines += [f"| {stage} | {data['wall'][stage]:.0f} s | {data['outputs'][stage]} |"
              for stage in DATA_STAGES]
    lines += ["", f"Synthesis: {data['synthesis']}."]
    lines += ["", "No held-out or reserved scenario id and no evaluated BFCL id is in "
              "trajectories, attempts, sft_dataset or preferences (checked before this report "
              "was written).", "", "## Versions", ""]
    lines += [f"- {k}: {v}" for k, v in environment.items()]
    lines += ["", "## Config", "", "```yaml", config_text.rstrip(), "```", ""]
    return "\n".join(lines)


def environment() -> dict[str, str]:
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True).stdout.strip()
    return {"machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU used",
            "python": platform.python_version(), "agentune commit": commit or "unknown",
            **{name: version(name) for name in PACKAGES}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/outcome.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--report", default="docs/OUTCOME.md")
    args = parser.parse_args(argv)
    started = time.monotonic()
    config = load_config(args.config)
    data_wall: dict[str, float] = {}
    done = {stage: run_stage(stage, config, data_wall) for stage in DATA_STAGES}
    outputs = {stage: result["outputs"] for stage, result in done.items()}
    synthesis_summary = done["synthesize"]["summary"]
    runs = [run_seed(config, seed) for seed in args.seeds]
    store = ArtifactStore(config.store.root)
    training = [outputs["synthesize"]["trajectories"], outputs["synthesize"]["attempts"],
                outputs["build_dataset"]["sft_dataset"],
                *(r.versions["preferences"] for r in runs if "preferences" in r.versions)]
    bfcl = sorted({v for r in runs for k, v in r.versions.items() if k.startswith("eval_bfcl")})
    found = leaks(store, training, outputs["build_scenarios"]["scenarios"], bfcl)
    if found:
        raise SystemExit("outcome: evaluated ids in training artifacts:\n" + "\n".join(found))
    result = figures(runs)
    wall_s = time.monotonic() - started
    report = Path(args.report)
    png = plot(result, report.with_name("outcome.png"))
    command = " ".join(["python tests/benchmarks/outcome.py",
                        *(sys.argv[1:] if argv is None else argv)])
    report.write_text(markdown(
        result, runs, data={"wall": data_wall, "synthesis": synthesis_yield(synthesis_summary),
                            "outputs": {s: ", ".join(f"`{v}`" for v in o.values())
                                        for s, o in outputs.items()}},
        command=command, config_text=Path(args.config).read_text(encoding="utf-8"),
        png=png.name, wall_s=wall_s, environment=environment()), encoding="utf-8")
    print(json.dumps({"benchmark": "outcome", "wall_s": round(wall_s, 1), **result,
                      "versions": {r.seed: r.versions for r in runs}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
