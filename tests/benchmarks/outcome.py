"""`make outcome`: does a teacher's verified data make the embedded model a better agent on tasks
it never saw?

One seeded experiment on CPU (configs/outcome.yaml, which extends the demo config):

- **data, once**: collect_queries -> build_scenarios (generated train / heldout / reserved, the
  written scenarios as ``natural``) -> build_templates -> synthesize (the teacher alone first,
  guided to the ground truth where it fails, every attempt verified) -> build_dataset;
- **reference, once**: evaluate the base student first and, after the seeds, the teacher (the
  ceiling); their greedy answers do not depend on the run seed;
- **per seed**: train sft -> the config's ``train.method`` from the SFT model (dpo:
  build_preferences, then DPO; grpo: GRPO in the environments) -> evaluate sft and that final
  model.

Every evaluation is the closed loop in the messages form on the natural, heldout and reserved
splits, and a fixed BFCL subset scored by bfcl-eval's own checker. Before any seed trains, no
evaluated scenario id or request text and no natural or heldout request may be in a training
artifact or the train split; after the seeds, the preferences are checked too. The run fails on a
leak.

Each figure is reported as the mean and standard deviation over the seeds and a 95% bootstrap
interval over the evaluated items (scenarios, BFCL entries). The target: the final model's
pass@1 on natural and on heldout each at least 1.5x the base's and 10 points above it, with the
two intervals apart; reserved and every BFCL category not below base by more than the spread over
the seeds.

Stages whose outputs are already published for the same inputs are reused (the store's versions),
so a run that was stopped resumes where it was; the wall time each piece took when it was
computed is kept in ``<store>/../outcome_wall.json`` and reported beside whether this run reused
it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from agentune.cli import run_flow
from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.figures import png_figure
from agentune.tasks.environments.scenarios import CALLING_KINDS, DECLINING_KINDS
from agentune.tasks.evaluate.presentation import grouped_bars
from agentune.tasks.store.artifact_store import ArtifactStore

DATA_STAGES = ("collect_queries", "build_scenarios", "build_templates", "synthesize",
               "build_dataset")
REFERENCE = ("base", "teacher")  # evaluated once: neither depends on the run seed
TRAINED = ("sft", "final")  # per seed; final: the dpo or grpo model trained from the sft one
MODELS = ("base", "sft", "final", "teacher")
SPLITS = ("natural", "heldout", "reserved")  # natural: the written scenarios of train environments
LIFT_SPLITS = ("natural", "heldout")
FAMILIES = {"calling": CALLING_KINDS - {"missing_info"}, "declining": DECLINING_KINDS,
            "missing_info": frozenset({"missing_info"})}
"""The kinds grouped by what a right answer does: call tools, call none, or ask first."""
STRETCH = ("simple_python", "multiple")
PACKAGES = ("torch", "transformers", "trl", "deepspeed", "prefect", "datasets", "xgrammar")
TARGET_RATIO, TARGET_POINTS, STRETCH_POINTS = 1.5, 0.10, 0.10
TARGET_HOURS = 2.0  # a run from an empty store and cache
BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED = 2000, 0


@dataclass
class Timing:
    """One stage run: how long it took now, whether it reused published outputs, and the wall
    time measured when those outputs were computed (the ledger's)."""

    stage: str
    seconds: float
    reused: bool
    computed_s: float | None

    def text(self) -> str:
        if not self.reused:
            return f"{self.stage} {self.seconds:.0f} s"
        cold = f"{self.computed_s:.0f} s when computed" if self.computed_s else "not timed"
        return f"{self.stage} reused ({cold})"

    @property
    def computing_s(self) -> float | None:
        """How long computing the outputs took: now, or when they were computed (None: not
        timed)."""
        return self.seconds if not self.reused else self.computed_s


def computing_time(timings: Sequence[Timing]) -> tuple[float, list[str]]:
    """The seconds computing every piece took (a run from an empty store, summed) and the
    pieces that were not timed."""
    return (sum(t.computing_s or 0.0 for t in timings),
            [t.stage for t in timings if t.computing_s is None])


def time_verdict(total_s: float, untimed: Sequence[str]) -> str:
    """The time target's verdict: over it is missed even with pieces untimed; under it is met
    only when every piece was timed."""
    if total_s > TARGET_HOURS * 3600:
        return "**missed**"
    return "not known" if untimed else "met"


class Ledger:
    """Wall times of computed stage outputs, by output versions, kept beside the store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, float] = (json.loads(path.read_text(encoding="utf-8"))
                                          if path.is_file() else {})

    @staticmethod
    def key(stage: str, outputs: Mapping[str, str]) -> str:
        return stage + " " + " ".join(sorted(outputs.values()))

    def record(self, key: str, seconds: float) -> None:
        if self.path.is_file():  # what another run recorded meanwhile is kept
            self.entries = json.loads(self.path.read_text(encoding="utf-8")) | self.entries
        self.entries[key] = seconds
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.entries, indent=1, sort_keys=True), encoding="utf-8")


@dataclass
class Evaluation:
    """One evaluate run: per-item outcomes of each model it evaluated."""

    closed_loop: dict[str, dict[str, dict[str, float]]]  # label -> split -> scenario -> pass
    bfcl: dict[str, dict[str, dict[str, float]]]  # label -> category -> entry id -> correct
    versions: dict[str, str]


@dataclass
class SeedRun:
    """One seed's models, what evaluate measured for them, and how long each stage took."""

    seed: int
    method: str  # how the final model was trained from the sft one
    versions: dict[str, str]
    evaluation: Evaluation
    timings: list[Timing] = field(default_factory=list)
    pairs: int = 0
    note: str | None = None  # why the final model is not what the method says, when it is not


def resident_gib() -> float | None:
    """This process's resident size in GiB (None where /proc is not there). Every stage runs in
    this process for hours: the figure on each ``outcome:`` line shows whether anything piles up."""
    statm = Path("/proc/self/statm")
    if not statm.exists():
        return None
    return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


class Runner:
    """Runs stage flows in this process (Prefect's ephemeral API, as `agentune run` does) and
    keeps their timings."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def __call__(self, stage: str, config: RunConfig, timings: list[Timing], *,
                 label: str | None = None, **extra: Any) -> dict:
        from agentune.flows import RUNNABLE

        started = time.monotonic()
        result = run_flow(RUNNABLE[stage](config=config, **extra))
        seconds = round(time.monotonic() - started, 1)
        name = label or (stage if stage != "train"
                         else f"train {extra.get('method', config.train.method)}")
        key = Ledger.key(name, result["outputs"])
        reused = bool(result.get("reused"))
        if not reused:
            self.ledger.record(key, seconds)
        timings.append(Timing(name, seconds, reused, self.ledger.entries.get(key)))
        resident = resident_gib()
        print(f"outcome: {timings[-1].text()}: {json.dumps(result['outputs'])}"
              + (f" (resident {resident:.1f} GiB)" if resident is not None else ""),
              file=sys.stderr, flush=True)
        return result


def read_evaluation(store: ArtifactStore, outputs: Mapping[str, str], label: str) -> Evaluation:
    """Per-item outcomes from an evaluate run's ``eval_rollouts`` (the first trial of each
    scenario and template group: pass@1), by split and by ``split:family`` (:data:`FAMILIES`),
    and ``eval_bfcl`` versions. Its ``eval_report`` is named for ``label`` (the models it
    evaluated), as the other outputs already are."""
    loop: dict[str, dict[str, dict[str, float]]] = {}
    bfcl: dict[str, dict[str, dict[str, float]]] = {}
    for key, version in outputs.items():
        if key.startswith("eval_rollouts:"):
            frame = store.read(version)
            first = frame.sort_values("trial").groupby(["scenario_id", "group"]).head(1)
            for row in first.itertuples():
                item, passed = f"{row.scenario_id}/{row.group}", float(bool(row.passed))
                groups = [row.split, *(f"{row.split}:{family}" for family, kinds
                                       in FAMILIES.items() if getattr(row, "kind", "") in kinds)]
                for group in groups:
                    loop.setdefault(row.model, {}).setdefault(group, {})[item] = passed
        elif key.startswith("eval_bfcl:"):
            frame = store.read(version)
            for row in frame.itertuples():
                bfcl.setdefault(row.model, {}).setdefault(row.category, {})[row.id] = float(
                    bool(row.correct))
    kept = {(f"{k}:{label}" if k == "eval_report" else k): v for k, v in outputs.items()
            if k.startswith("eval_")}
    return Evaluation(loop, bfcl, kept)


def evaluate(run: Runner, config: RunConfig, models: Sequence[Mapping[str, str]],
             timings: list[Timing], *, bfcl: bool = True) -> Evaluation:
    """One evaluate run of ``models`` (BFCL too when ``bfcl`` and the config has it on)."""
    cfg = config.merged(evaluate={"models": list(models)} | ({} if bfcl else
                                                            {"bfcl": {"enabled": False}}))
    labels = " and ".join(m["label"] for m in models)
    result = run("evaluate", cfg, timings,
                 label=f"evaluate {labels}" + ("" if bfcl else " (closed loop)"))
    return read_evaluation(ArtifactStore(config.store.root), result["outputs"], labels)


def merge(*evaluations: Evaluation) -> Evaluation:
    """Evaluations of different models as one."""
    out = Evaluation({}, {}, {})
    for e in evaluations:
        out.closed_loop |= e.closed_loop
        out.bfcl |= e.bfcl
        out.versions |= e.versions
    return out


def run_seed(run: Runner, config: RunConfig, seed: int, bfcl_for: Sequence[str]) -> SeedRun:
    timings: list[Timing] = []
    cfg = config.merged(seed=seed)
    method = cfg.train.method
    if method == "sft":
        raise SystemExit("outcome: train.method is sft; the experiment needs dpo or grpo")
    store = ArtifactStore(config.store.root)
    sft = run("train", cfg, timings, method="sft")["outputs"]["model"]
    versions, note, pairs = {"sft": sft}, None, 0
    if method == "dpo":
        pref_cfg = cfg.merged(preferences={"student": {"model": sft}})
        versions["preferences"] = run("build_preferences", pref_cfg,
                                      timings)["outputs"]["preferences"]
        cfg = cfg.merged(train={"preferences": versions["preferences"]})
        pairs = store.manifest(versions["preferences"]).rows
        if not pairs:
            note = (f"seed {seed}: build_preferences found no pair ({versions['preferences']}: "
                    "see its run summary), so no DPO ran: the final model is the SFT model")
    if note is None:
        final = run("train", cfg, timings, method=method, from_model=sft)["outputs"]["model"]
    else:
        print(f"outcome: {note}", file=sys.stderr, flush=True)
        final = sft
    versions["final"] = final
    evaluation = merge(*(
        evaluate(run, cfg, [{"label": label, "model": versions[label]}], timings,
                 bfcl=label in bfcl_for) for label in TRAINED))
    versions |= evaluation.versions
    return SeedRun(seed, method, versions, evaluation, timings, pairs, note)


# ---- leaks ---------------------------------------------------------------------------------

def strings(value: Any) -> Iterator[str]:
    """Every string inside a cell (nested lists, arrays and mappings included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, (list, tuple, np.ndarray)):
        for item in value:
            yield from strings(item)


def id_values(frame: Any) -> set[str]:
    """Every value of the columns that hold ids (``id``, ``scenario_id``, ``query_id`` ...)."""
    out: set[str] = set()
    for column in frame.columns:
        if column == "id" or column.endswith("_id"):
            out |= {str(v) for v in frame[column].dropna()}
    return out


def _norm(text: str) -> str:
    return " ".join(text.split())


def bfcl_ids(store: ArtifactStore, *evaluations: Evaluation) -> set[str]:
    """The BFCL entry ids the evaluations scored."""
    return {str(i) for e in evaluations for k, v in e.versions.items()
            if k.startswith("eval_bfcl") for i in store.read(v)["id"]}


def leaks(store: ArtifactStore, training: Sequence[str], scenarios: str,
          bfcl: Collection[str] = ()) -> list[str]:
    """What an evaluation would have seen in training, as ``where: what`` lines (empty when
    clean): an evaluated scenario id (natural, heldout, reserved) or BFCL id in a training
    artifact; an evaluated request text inside any of its strings; a natural or heldout request
    that is also a train scenario's request."""
    table = store.read(scenarios)
    evaluated = table[table["split"].isin(SPLITS)]
    ids = {str(i) for i in evaluated["id"]} | set(bfcl)
    requests = {_norm(r): str(i) for r, i in zip(evaluated["request"], evaluated["id"])}
    found = []
    train = table[table["split"] == "train"]
    unseen = {_norm(r): str(i) for r, i, s in zip(evaluated["request"], evaluated["id"],
                                                   evaluated["split"]) if s in LIFT_SPLITS}
    for request, scenario_id in zip(train["request"], train["id"]):
        if _norm(request) in unseen:
            found.append(f"{scenarios} train {scenario_id}: the request of "
                         f"{unseen[_norm(request)]}")
    for version in training:
        frame = store.read(version)
        for leaked in sorted(id_values(frame) & ids):
            found.append(f"{version}: id {leaked}")
        text = "\n".join(_norm(s) for column in frame.columns for cell in frame[column]
                         for s in strings(cell))
        for request, scenario_id in requests.items():
            if request and request in text:
                found.append(f"{version}: the request of {scenario_id}")
    return found


def check_leaks(store: ArtifactStore, training: Sequence[str], scenarios: str,
                bfcl: Collection[str] = ()) -> None:
    found = leaks(store, training, scenarios, bfcl)
    if found:
        raise SystemExit("outcome: evaluated items in training:\n" + "\n".join(found))


# ---- figures -------------------------------------------------------------------------------

def bootstrap(vectors: Sequence[Sequence[float]], *, samples: int = BOOTSTRAP_SAMPLES,
              seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% percentile interval of the mean over seeds of the mean over items, items resampled
    with replacement (the same draw for every seed's vector: one evaluation set)."""
    matrix = np.asarray(vectors, dtype=float)  # seeds x items
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, matrix.shape[1], size=(samples, matrix.shape[1]))
    means = matrix[:, draws].mean(axis=2).mean(axis=0)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(float(low), 4), round(float(high), 4)


def summary(per_seed: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """Mean, spread (sample sd over seeds) and bootstrap interval of one figure, from each
    seed's per-item outcomes (one mapping for a model evaluated once)."""
    if not per_seed or not per_seed[0]:
        return {"mean": None, "spread": None, "ci95": None, "n": 0, "per_seed": []}
    items = sorted(per_seed[0])
    if any(sorted(outcomes) != items for outcomes in per_seed):
        raise SystemExit("outcome: the seeds were evaluated on different items")
    vectors = [[outcomes[i] for i in items] for outcomes in per_seed]
    values = [statistics.fmean(v) for v in vectors]
    return {"mean": round(statistics.fmean(values), 4),
            "spread": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
            "ci95": bootstrap(vectors), "n": len(items),
            "per_seed": [round(v, 4) for v in values]}


def figures(reference: Evaluation, runs: Sequence[SeedRun]) -> dict[str, Any]:
    """Every figure of every model, and the verdict against the target."""
    def per_seed(model: str, kind: str, group: str) -> list[Mapping[str, float]]:
        sources = [reference] if model in REFERENCE else [r.evaluation for r in runs]
        return [getattr(e, kind).get(model, {}).get(group, {}) for e in sources]

    categories = list(dict.fromkeys(c for m in reference.bfcl.values() for c in m))
    out: dict[str, Any] = {"seeds": [r.seed for r in runs]}
    for model in MODELS:
        for split in SPLITS:
            out[f"{model}/{split}/pass@1"] = summary(per_seed(model, "closed_loop", split))
            for family in FAMILIES:
                out.setdefault("families", {})[f"{model}/{split}/{family}"] = summary(
                    per_seed(model, "closed_loop", f"{split}:{family}"))
        for category in categories:
            out[f"{model}/bfcl/{category}"] = summary(per_seed(model, "bfcl", category))
    checks: dict[str, bool] = {}
    for split in LIFT_SPLITS:
        base, final = out[f"base/{split}/pass@1"], out[f"final/{split}/pass@1"]
        checks[f"{split} x{TARGET_RATIO} and +{TARGET_POINTS * 100:.0f} points, intervals "
               "apart"] = (
            final["mean"] is not None and base["mean"] is not None
            and final["mean"] >= TARGET_RATIO * base["mean"]
            and final["mean"] >= base["mean"] + TARGET_POINTS
            and final["ci95"][0] > base["ci95"][1])
    guarded = ["reserved/pass@1", *(f"bfcl/{c}" for c in categories)]
    for figure in guarded:
        base, final = out[f"base/{figure}"], out[f"final/{figure}"]
        if base["mean"] is not None and final["mean"] is not None:
            checks[f"{figure} not below base by more than the seed spread"] = (
                final["mean"] >= base["mean"] - final["spread"])
    stretch = {}
    for category in [c for c in STRETCH if c in categories]:
        base, final = out[f"base/bfcl/{category}"], out[f"final/bfcl/{category}"]
        stretch[f"bfcl/{category} +{STRETCH_POINTS * 100:.0f} points"] = (
            final["mean"] is not None and final["mean"] >= base["mean"] + STRETCH_POINTS)
    out["checks"], out["stretch"] = checks, stretch
    out["target_met"] = all(checks.values())
    return out


def data_figures(store: ArtifactStore, outputs: Mapping[str, Mapping[str, str]],
                 config: RunConfig) -> dict[str, Any]:
    """What the data phase made: the teacher's unguided pass@1 and pass@k by kind, the verified
    trajectories and their guided share, the training rows by source."""
    attempts = store.read(outputs["synthesize"]["attempts"])
    trajectories = store.read(outputs["synthesize"]["trajectories"])
    dataset = store.read(outputs["build_dataset"]["sft_dataset"])
    scenarios = store.read(outputs["build_scenarios"]["scenarios"])
    unguided = attempts[~attempts["guided"].astype(bool)]

    def pass_at(rows: Any) -> dict[str, Any]:
        per_scenario = rows.sort_values("attempt").groupby("scenario_id")["passed"]
        return {"scenarios": int(per_scenario.ngroups),
                "pass@1": round(float(per_scenario.first().astype(bool).mean()), 4),
                "pass@k": round(float(per_scenario.any().mean()), 4)}

    by_kind = {str(kind): pass_at(rows) for kind, rows in sorted(unguided.groupby("kind"))}
    if len(unguided):
        by_kind["all"] = pass_at(unguided)
    agent = trajectories[trajectories["source"] != "judged_instance"]
    guided = int(agent["guided"].astype(bool).sum())
    calls = int((agent["n_tool_calls"] > 0).sum())
    sources = Counter(dataset["source"])
    rows = dataset.reindex(columns=["source", "kind", "derivation"])
    no_kind = rows["kind"].isna() | (rows["kind"] == "")
    rows["kind"] = rows["kind"].mask(no_kind, rows["source"])  # general rows have none
    counts = rows.fillna({"derivation": "none"}).groupby(["kind", "derivation"]).size()
    rows_by_kind: dict[str, dict[str, int]] = {}
    for (kind, derivation), n in counts.items():
        rows_by_kind.setdefault(str(kind), {})[str(derivation)] = int(n)
    return {"teacher": config.llm.teacher.model,
            "k_unguided": config.synthesis.attempts - config.synthesis.guided_attempts,
            "unguided_by_kind": by_kind, "attempts": int(len(attempts)),
            "guided_attempts": int(attempts["guided"].astype(bool).sum()),
            "guided_passed": int(attempts.loc[attempts["guided"].astype(bool), "passed"].sum()),
            "trajectories": int(len(agent)), "guided_trajectories": guided,
            "guided_share": round(guided / len(agent), 4) if len(agent) else None,
            "calling_tools": calls,
            "sft_rows": {k: int(v) for k, v in sources.items()},
            "sft_rows_by_kind": rows_by_kind,
            "generated_train": int((scenarios["split"] == "train").sum()),
            "evaluated": {s: int((scenarios["split"] == s).sum()) for s in SPLITS}}


# ---- report --------------------------------------------------------------------------------

def cuts(config: RunConfig, bfcl_for: Sequence[str], generated_train: int) -> list[str]:
    """What the config sizes down to fit the time, each with its value (from the config run)."""
    synthesis, train, loop = config.synthesis, config.train, config.evaluate.closed_loop
    student = config.preferences.student
    out = [f"synthesis: {synthesis.max_scenarios or 'all'} of the {generated_train} generated "
           f"train scenarios, {synthesis.attempts} attempt(s) each "
           f"({synthesis.guided_attempts} guided)",
           f"SFT: {train.max_steps} steps" if train.max_steps else f"SFT: {train.epochs:g} epoch(s)",
           f"DPO: {train.dpo.max_steps} steps" if train.dpo.max_steps
           else f"DPO: {train.dpo.epochs or train.epochs:g} epoch(s)",
           f"closed loop: {loop.trials} trial(s) a scenario, at most {loop.max_steps} model "
           f"turns of {loop.max_tokens} tokens"
           + (f", {loop.max_scenarios} scenarios a split" if loop.max_scenarios else ""),
           (f"BFCL: {', '.join(bfcl_for)} only, {config.evaluate.bfcl.max_per_category} "
            "entries a category") if bfcl_for else "BFCL: not run"]
    if student.enabled:
        out.insert(3, f"the SFT student's own rollouts: {student.samples} samples of "
                      f"{student.max_scenarios or 'every'} train scenario(s)")
    return out


def plot(result: Mapping[str, Any], path: Path) -> Path:
    groups = [k.split("/", 1)[1] for k in result if k.startswith("base/")]
    def value(model: str, group: str) -> float:
        mean = result[f"{model}/{group}"]["mean"]
        return math.nan if mean is None else 100 * mean  # not measured: no bar

    series = {model: [value(model, g) for g in groups] for model in MODELS}
    with png_figure(path, size=(max(7.0, 1.6 * len(groups) + 2), 4.2)) as ax:
        grouped_bars(ax, groups, series, label_format=".0f", ylabel="x100 (mean over seeds)",
                     title="outcome: closed-loop pass@1 and BFCL accuracy", rotation=20)
        for text in ax.texts:
            if text.get_text() == "nan":
                text.set_text("")
        ax.set_ylim(0, 110)
        ax.legend(fontsize=7)
    return path


def markdown(result: Mapping[str, Any], reference: Sequence[Timing], runs: Sequence[SeedRun],
             *, data: Mapping[str, Any], data_timings: Sequence[Timing], cut: Sequence[str],
             outputs: Mapping[str, Mapping[str, str]], command: str, config_text: str, png: str,
             wall_s: float, environment: Mapping[str, str]) -> str:
    def cell(f: Mapping[str, Any] | None) -> str:
        if f is None or f["mean"] is None:
            return "-"
        spread = f" ± {100 * f['spread']:.1f}" if f["per_seed"] and len(f["per_seed"]) > 1 \
            else ""
        low, high = f["ci95"]
        return f"{100 * f['mean']:.1f}{spread} [{100 * low:.1f}, {100 * high:.1f}]"

    groups = [k.split("/", 1)[1] for k in result if k.startswith("base/")]
    sizes = {g: result[f"base/{g}"]["n"] for g in groups}
    lines = ["# The outcome, measured", "",
             f"Produced by `{command}`, this invocation {wall_s / 60:.1f} min on "
             f"{environment['machine']}; seeds {', '.join(map(str, result['seeds']))}. "
             "Figures are x100: the mean ± standard deviation over the seeds (base and teacher "
             "are evaluated once: their greedy answers do not depend on the seed) and, in "
             "brackets, a 95% bootstrap interval over the evaluated items. Closed loop: pass@1 "
             "of the model acting in the environments in the messages form, scored by the "
             "verifier; BFCL: accuracy by bfcl-eval's own checker (fc mode, the same chat "
             "template).", "",
             "| figure (items) | " + " | ".join(MODELS) + " |", "|---|" + "---|" * len(MODELS)]
    lines += [f"| {g} ({sizes[g]}) | " + " | ".join(cell(result[f"{m}/{g}"]) for m in MODELS) + " |"
              for g in groups]
    families = result.get("families", {})
    lines += ["", "Closed-loop pass@1 by what a right answer does: calling kinds (single_call, "
              "parallel_calls, multi_step), declining kinds (irrelevant, no_tool) and "
              "missing_info (ask first); items in brackets.", "",
              "| split | family | " + " | ".join(MODELS) + " |", "|---|---|" + "---|" * len(MODELS)]
    for split in SPLITS:
        for family in FAMILIES:
            size = families.get(f"base/{split}/{family}", {}).get("n", 0)
            lines.append(f"| {split} | {family} ({size}) | " + " | ".join(
                cell(families.get(f"{m}/{split}/{family}")) for m in MODELS) + " |")
    lines += ["", f"![outcome]({png})", "", "## Target", ""]
    lines += [f"- {name}: {'met' if ok else '**missed**'}" for name, ok in result["checks"].items()]
    lines += [f"- stretch, {name}: {'met' if ok else 'missed'}"
              for name, ok in result["stretch"].items()]
    total, untimed = computing_time([*data_timings, *reference,
                                     *(t for r in runs for t in r.timings)])
    lines += ["", "## Time", "", f"Computing every piece, summed (a run from an empty store): "
              f"{total / 3600:.2f} h against the target of {TARGET_HOURS:.0f} h: "
              f"{time_verdict(total, untimed)}"
              + (f"; not timed (not in the sum): {', '.join(untimed)}" if untimed else "")
              + ". A piece's time is its wall time in the invocation that computed it; the "
              "stages' response cache is not told apart (a piece computed after an earlier run "
              "filled the cache reads as faster than cold)."]
    lines += ["", "## Data (once)", "", "| stage | wall time | outputs |", "|---|---|---|"]
    lines += [f"| {t.stage} | {t.text().split(' ', 1)[1]} | "
              + ", ".join(f"`{v}`" for v in outputs[t.stage].values()) + " |" for t in data_timings]
    kinds = data["unguided_by_kind"]
    lines += ["", f"Teacher `{data['teacher']}`, {data['k_unguided']} unguided attempt(s) per "
              f"scenario, then guided where they fail; {data['attempts']} attempts, "
              f"{data['guided_attempts']} of them guided ({data['guided_passed']} passed).", "",
              "| kind | scenarios | unguided pass@1 | unguided pass@k |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['scenarios']} | {100 * (v['pass@1'] or 0):.1f} | "
              f"{100 * (v['pass@k'] or 0):.1f} |" for k, v in kinds.items()]
    lines += ["", f"Verified trajectories: {data['trajectories']}, {data['guided_trajectories']} "
              f"guided ({100 * (data['guided_share'] or 0):.0f}%), {data['calling_tools']} "
              f"calling tools. SFT rows: "
              + ", ".join(f"{k} {v}" for k, v in sorted(data["sft_rows"].items()))
              + f". Generated train scenarios: {data['generated_train']}; evaluated: "
              + ", ".join(f"{k} {v}" for k, v in data["evaluated"].items()) + "."]
    by_kind = data.get("sft_rows_by_kind") or {}
    derivations = sorted({d for cells in by_kind.values() for d in cells})
    if by_kind:
        lines += ["", "SFT rows by kind (general rows under `general`) and derivation (`none`: "
                  "as verified):", "", "| kind | " + " | ".join(derivations) + " | all |",
                  "|---|" + "---|" * (len(derivations) + 1)]
        lines += [f"| {kind} | " + " | ".join(str(cells.get(d, 0)) for d in derivations)
                  + f" | {sum(cells.values())} |" for kind, cells in by_kind.items()]
    lines += ["", "## What was cut to fit the time", ""] + [f"- {c}" for c in cut]
    lines += ["", "## Reference models (once)", "",
              ", ".join(t.text() for t in reference) + "."]
    lines += ["", "## Per seed", "", "| seed | final method | sft | preferences (pairs) | final "
              "| wall time |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.seed} | {r.method} | `{r.versions['sft']}` | "
              + (f"`{r.versions['preferences']}` ({r.pairs})" if "preferences" in r.versions
                 else "-")
              + f" | `{r.versions['final']}` | " + ", ".join(t.text() for t in r.timings) + " |"
              for r in runs]
    notes = [f"- {r.note}" for r in runs if r.note]
    if runs:
        notes.append(f"- `model@latest` in the outcome store is seed {runs[0].seed}'s final model "
                     f"(`{runs[0].versions['final']}`): other evaluation sets are run against it.")
    lines += ["", *notes] if notes else []
    lines += ["", "No evaluated scenario id or request text and no evaluated BFCL id is in "
              "trajectories, attempts, sft_dataset or preferences, and no natural or heldout "
              "request is a train scenario's (checked before this report was written).", "",
              "## Versions", ""]
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
    parser.add_argument("--bfcl-for", nargs="+", choices=MODELS, default=["base", "final"],
                        help="models BFCL is run for (the others: closed loop only)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    config = load_config(args.config)
    store = ArtifactStore(config.store.root)
    run = Runner(Ledger(Path(config.store.root).parent / "outcome_wall.json"))
    data_timings: list[Timing] = []
    outputs = {stage: run(stage, config, data_timings)["outputs"] for stage in DATA_STAGES}
    scenarios = outputs["build_scenarios"]["scenarios"]
    training = [outputs["synthesize"]["trajectories"], outputs["synthesize"]["attempts"],
                outputs["build_dataset"]["sft_dataset"]]
    reference_timings: list[Timing] = []
    base = evaluate(run, config, [{"label": "base", "model": config.train.base_model}],
                    reference_timings, bfcl="base" in args.bfcl_for)
    checked = bfcl_ids(store, base)  # the fixed BFCL subset, when base ran it
    check_leaks(store, training, scenarios, checked)  # before any seed trains on them
    runs = [run_seed(run, config, seed, args.bfcl_for) for seed in args.seeds]
    # The teacher last: the slowest evaluation, and the only one no target depends on.
    teacher = evaluate(run, config, [{"label": "teacher", "model": config.llm.teacher.model}],
                       reference_timings, bfcl="teacher" in args.bfcl_for)
    reference = merge(base, teacher)
    bfcl = bfcl_ids(store, reference, *(r.evaluation for r in runs))
    preferences = [r.versions["preferences"] for r in runs if "preferences" in r.versions]
    # The data artifacts again only where BFCL ids turned up that the first check lacked.
    check_leaks(store, [*(training if bfcl - checked else []), *preferences], scenarios, bfcl)
    result = figures(reference, runs)
    # Other evaluation sets are run against `model@latest`: the first seed's final model, even
    # when a later seed's was published after it (or a version was reused, not published).
    store.set_alias(store.resolve(runs[0].versions["final"]), "latest")
    data = data_figures(store, outputs, config)
    wall_s = time.monotonic() - started
    report = Path(args.report)
    png = plot(result, report.with_name("outcome.png"))
    command = " ".join(["python tests/benchmarks/outcome.py",
                        *(sys.argv[1:] if argv is None else argv)])
    report.write_text(markdown(
        result, reference_timings, runs, data=data, data_timings=data_timings,
        cut=cuts(config, args.bfcl_for, data["generated_train"]), outputs=outputs,
        command=command, config_text=Path(args.config).read_text(encoding="utf-8"),
        png=png.name, wall_s=wall_s, environment=environment()), encoding="utf-8")
    print(json.dumps({"benchmark": "outcome", "wall_s": round(wall_s, 1), **result,
                      "data": data, "versions": {r.seed: r.versions for r in runs}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
