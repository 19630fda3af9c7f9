"""The evaluate stage's closed loop timed under the local engine's settings: how fast a model's
closed-loop evaluation can go on this machine, and whether the answers stay the same.

Each setting runs the evaluate stage alone (closed loop only: BFCL, held-out and KAgentBench off),
in a process of its own (model load, and for vLLM the server's start, included), on a hard-linked
copy of the config's store without its evaluation outputs (so nothing is reused), for one model,
on the first ``--scenarios`` scenarios of ``--splits`` (the stage's own spread). A setting is
``NAME=ENGINE:BATCH:CONCURRENCY``: the local engine (``transformers``, in process; ``vllm``, a
vLLM server of its own, ``make vllm``), the prompts generated together (transformers) and the
trials' requests in flight at once. The first setting is the reference: ``speedup`` is its wall
time over each one's, ``same_verdicts`` the share of scenarios whose verdict equals its.

It needs a store a run of the config filled (the scenarios and tools: ``make outcome``'s data
phase, or tests/benchmarks/outcome_dev.py data) and quiet cores: the figures are wall seconds.

    .venv/bin/python tests/benchmarks/closed_loop_settings.py --config configs/outcome.yaml \\
        --splits train --scenarios 48 today=transformers:8:16 wide=transformers:32:64

It prints one JSON line: per setting its wall seconds, seconds a scenario, pass@1, the share of
verdicts equal to the reference's and the speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from agentune.config import load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.store.artifact_store import ArtifactStore

OUTPUTS = ("eval_rollouts", "eval_report")
"""What the evaluate stage publishes: left out of the copied store, so the stage runs."""


def _setting(text: str) -> tuple[str, dict[str, Any]]:
    name, _, spec = text.partition("=")
    engine, batch, concurrency = spec.split(":")
    if engine not in ("transformers", "vllm") or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: NAME=transformers|vllm:BATCH:CONCURRENCY")
    return name, {"engine": engine, "batch_size": int(batch),
                  "max_concurrency": int(concurrency)}


def _link_store(source: Path, target: Path) -> None:
    """``source`` hard-linked into ``target``, less the evaluation outputs (aliases kept)."""
    shutil.copytree(source, target, symlinks=True, copy_function=os.link,
                    ignore=lambda folder, names: [n for n in names if n in OUTPUTS]
                    if Path(folder) == source else [])


def _timed(name: str, setting: dict[str, Any], args: argparse.Namespace,
           work: Path) -> dict[str, Any]:
    config = load_config(args.config)
    store = work / "artifacts"
    _link_store(Path(config.store.root), store)
    model = {"label": name, "model": args.model, "batch_size": setting["batch_size"],
             "max_concurrency": setting["max_concurrency"]}
    settings = config.merged(
        store={"root": str(store)}, llm={"cache_dir": str(work / "cache"),
                                         "local_engine": setting["engine"]},
        evaluate={"models": [model], "bfcl": {"enabled": False},
                  "closed_loop": {"splits": args.splits, "max_scenarios": args.scenarios}})
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(settings.model_dump(mode="json")), encoding="utf-8")
    start = time.perf_counter()
    with (args.logs / f"{name}.log").open("w", encoding="utf-8") as log:
        subprocess.run([sys.executable, "-m", "agentune.cli", "run", "evaluate", "--config",
                        str(path)], cwd=PROJECT_ROOT, check=True,
                       stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    rollouts = ArtifactStore(store).read("eval_rollouts")
    first = rollouts[(rollouts.trial == 0) & (rollouts.form == rollouts.form.iloc[0])]
    return {"seconds": round(seconds, 1), "scenarios": len(first),
            "s_per_scenario": round(seconds / max(1, len(first)), 2),
            "pass@1": round(100 * first.passed.mean(), 1),
            "verdicts": dict(zip(first.scenario_id, first.passed.astype(bool), strict=True)),
            **setting}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "outcome.yaml"))
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--splits", nargs="+", default=["train"])
    parser.add_argument("--scenarios", type=int, default=48)
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()),
                        help="where each setting's stage log is written (NAME.log)")
    parser.add_argument("settings", nargs="+", type=_setting, metavar="NAME=ENGINE:BATCH:CONC")
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    for name, setting in args.settings:
        with tempfile.TemporaryDirectory(prefix=f"agentune-loop-{name}-") as work:
            runs[name] = _timed(name, setting, args, Path(work))
        print(json.dumps({name: {k: v for k, v in runs[name].items() if k != "verdicts"}}),
              file=sys.stderr, flush=True)
    first = next(iter(runs.values()))
    verdicts, seconds = first["verdicts"], first["seconds"]
    for run in runs.values():
        same = [run["verdicts"].get(s) == v for s, v in verdicts.items()]
        run["same_verdicts"] = round(sum(same) / len(same), 3)
        run["speedup"] = round(seconds / run["seconds"], 2)
        del run["verdicts"]
    print(json.dumps({"benchmark": "closed_loop_settings", "config": args.config,
                      "model": args.model, "splits": args.splits, "settings": runs}), flush=True)


if __name__ == "__main__":
    main()
