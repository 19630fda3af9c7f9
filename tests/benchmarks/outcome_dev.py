"""The dev set behind configs/outcome.yaml's training recipe: the generated TRAIN split only.

`make outcome`'s figures are on splits that nothing may be tuned on (natural, heldout, reserved,
BFCL). Its learning rates and epochs were chosen here instead, on the closed loop over a seeded
spread of 48 scenarios of the train split (most of them never synthesized, so never trained on),
with the same store, ledger and stage flows as the experiment, so a variant that the config
then names is reused by `make outcome` rather than trained again:

    python tests/benchmarks/outcome_dev.py train '{"epochs": 2, "learning_rate": 2e-4}'
    python tests/benchmarks/outcome_dev.py prefs model@SFT '{}'
    python tests/benchmarks/outcome_dev.py dpo model@SFT preferences@P '{"dpo": {"learning_rate": 1e-5}}'
    python tests/benchmarks/outcome_dev.py eval sft=model@SFT dpo=model@DPO

The JSON arguments are overrides of the config's ``train`` section (seed 0). ``eval`` prints one
JSON line: pass@1 per model, overall and by kind.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from outcome import Ledger, Runner, Timing

from agentune.config import load_config
from agentune.tasks.store.artifact_store import ArtifactStore

DEV_SCENARIOS = 48


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/outcome.yaml")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="an SFT variant of the base model")
    train.add_argument("overrides", type=json.loads)
    prefs = commands.add_parser("prefs", help="preference pairs with an SFT model as the student")
    prefs.add_argument("sft")
    prefs.add_argument("overrides", type=json.loads)
    dpo = commands.add_parser("dpo", help="a DPO variant from an SFT model")
    dpo.add_argument("sft")
    dpo.add_argument("preferences")
    dpo.add_argument("overrides", type=json.loads)
    evaluate = commands.add_parser("eval", help="the closed loop on the dev scenarios")
    evaluate.add_argument("models", nargs="+", metavar="LABEL=MODEL")
    args = parser.parse_args()

    config = load_config(args.config).merged(seed=0)
    run = Runner(Ledger(Path(config.store.root).parent / "outcome_wall.json"))
    timings: list[Timing] = []
    if args.command == "train":
        cfg = config.merged(train=args.overrides)
        print(run("train", cfg, timings, method="sft")["outputs"]["model"])
    elif args.command == "prefs":
        cfg = config.merged(train=args.overrides, preferences={"student": {"model": args.sft}})
        print(run("build_preferences", cfg, timings)["outputs"]["preferences"])
    elif args.command == "dpo":
        cfg = config.merged(train={"preferences": args.preferences, **args.overrides})
        print(run("train", cfg, timings, method="dpo", from_model=args.sft)["outputs"]["model"])
    else:
        models = [dict(zip(("label", "model"), m.split("=", 1), strict=True)) for m in args.models]
        cfg = config.merged(evaluate={
            "models": models, "bfcl": {"enabled": False},
            "closed_loop": {"splits": ["train"], "max_scenarios": DEV_SCENARIOS}})
        outputs = run("evaluate", cfg, timings, label="dev")["outputs"]
        store = ArtifactStore(config.store.root)
        figures = {}
        for key, version in outputs.items():
            if key.startswith("eval_rollouts:"):
                frame = store.read(version)
                first = frame[frame.trial == 0]
                for model, rows in first.groupby("model"):
                    figures[model] = {"pass@1": round(100 * rows.passed.mean(), 1),
                                      "by_kind": (100 * rows.groupby("kind").passed.mean())
                                      .round(1).to_dict(), "scenarios": len(rows)}
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
