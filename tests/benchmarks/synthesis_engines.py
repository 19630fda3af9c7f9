"""The demo's synthesize stage timed with the local provider as it was before its speed-up and as
it is: how much of tests/benchmarks/test_local_generation.py's gain a real stage sees.

Each engine runs the synthesize stage alone, in a process of its own (model load included), on
a copy of the config's store without the synthesis outputs (so nothing is reused) with an empty
response cache, on the first ``--scenarios`` train scenarios of the plan. ``before`` is the
``LocalProvider`` read from git at the local generation benchmark's baseline commit. It needs the
upstream versions a run of the config published (``make demo`` for configs/demo.yaml), and quiet
cores: the figures are wall seconds.

    .venv/bin/python tests/benchmarks/synthesis_engines.py --config configs/demo.yaml --scenarios 16

It prints one JSON line: seconds and verified trajectories per engine, and the speed-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from agentune.config import load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.store.artifact_store import ArtifactStore

OUTPUTS = ("trajectories", "attempts", "rejects")
"""What synthesize publishes: left out of the copied store, so the stage runs."""


def _run_stage(engine: str, config: str) -> int:
    """In the child process: the synthesize stage with ``engine``'s local provider."""
    sys.path.insert(0, str(PROJECT_ROOT / "tests"))
    import agentune.tasks.llm.gateway as gateway
    from agentune.cli import main

    if engine == "before":
        from benchmarks.test_local_generation import baseline_provider_class

        before = baseline_provider_class()
        built = gateway._build_provider
        gateway._build_provider = lambda role, local_engine, models: (
            before(role) if role.provider == "local" else built(role, local_engine, models))
    return main(["run", "synthesize", "--config", config])


def _timed(engine: str, source: Path, scenarios: int, work: Path) -> dict[str, float | int]:
    config = load_config(source)
    store = work / "artifacts"
    shutil.copytree(config.store.root, store, symlinks=True,  # `latest` stays an alias
                    ignore=lambda folder, names: [n for n in names if n in OUTPUTS]
                    if Path(folder) == Path(config.store.root) else [])
    settings = config.merged(store={"root": str(store)}, llm={"cache_dir": str(work / "cache")},
                             synthesis={"work_dir": str(work / "synthesis"),
                                        "max_scenarios": scenarios})
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(settings.model_dump(mode="json")), encoding="utf-8")
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--stage", engine, str(path)], cwd=PROJECT_ROOT,
                   check=True)
    seconds = time.perf_counter() - start
    verified = len(ArtifactStore(store).read("trajectories"))
    return {"seconds": round(seconds, 1), "verified": verified}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "demo.yaml"))
    parser.add_argument("--scenarios", type=int, default=16)
    parser.add_argument("--stage", nargs=2, metavar=("ENGINE", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        sys.exit(_run_stage(*args.stage))
    timed = {}
    for engine in ("before", "after"):
        with tempfile.TemporaryDirectory(prefix=f"agentune-synth-{engine}-") as work:
            timed[engine] = _timed(engine, Path(args.config), args.scenarios, Path(work))
    line = {"benchmark": "synthesis_engines", "config": args.config,
            "scenarios": args.scenarios, **timed,
            "after/before speed": round(timed["before"]["seconds"] / timed["after"]["seconds"], 2)}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
