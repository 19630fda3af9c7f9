"""The dev set behind configs/outcome.yaml's training recipe: a generated `dev` split.

`make outcome`'s figures are on splits that nothing may be tuned on (natural, heldout, reserved,
BFCL). Its recipe is chosen here instead, on the closed loop over the `dev` split: scenarios
generated for this purpose only (`scenarios.generate.dev`, merged in by this script), in worlds of
their own seed stream and phrasing families that neither train nor heldout uses, so dev is to
the training data what heldout is: new worlds AND new sentence structures. Train gives dev one of
its phrasing families per recipe and language here (it keeps at least one); `make outcome`, which
asks for no dev split, trains on every family heldout does not own. The same store, ledger and
stage flows as the experiment:

    python tests/benchmarks/outcome_dev.py data '{}'              # the data phase; sft_dataset
    python tests/benchmarks/outcome_dev.py data '{"augment": {"orders": 0, "no_call_share": 0,
        "general_tools": 0}}'                                       # the same rows, none derived
    python tests/benchmarks/outcome_dev.py train '{"epochs": 2}' --dataset sft_dataset@V
    python tests/benchmarks/outcome_dev.py prefs model@SFT '{}'
    python tests/benchmarks/outcome_dev.py dpo model@SFT preferences@P '{"dpo": {"learning_rate": 1e-5}}'
    python tests/benchmarks/outcome_dev.py eval base=embedded sft=model@SFT dpo=model@DPO
    python tests/benchmarks/outcome_dev.py eval --needed last sft=model@SFT   # position test
    python tests/benchmarks/outcome_dev.py eval --split train sft=model@SFT   # the old dev set

``data``'s JSON is an override of the config's ``dataset`` section, ``train``'s and ``dpo``'s of
its ``train`` section (seed 0). ``eval`` prints one JSON line: pass@1 per model, overall, by kind
and over the calling and the declining kinds, on the dev split (``--split train``: the train
split's scenarios the teacher was never asked, the dev set the current recipe was chosen on; it
shares the training's worlds and phrasing families and over-predicted heldout: 32.6 there
against 17.0); scenarios the teacher attempted are left out and counted (none on dev).
``--needed first|last`` moves the tools each scenario's ground truth calls to the front or the
end of its offer (the position test: compare the calling kinds' pass@1 of the two).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from outcome import DATA_STAGES, FAMILIES, Ledger, Runner, Timing

from agentune.config import load_config
from agentune.tasks.store.artifact_store import ArtifactStore

DEV_SCENARIOS = 60
"""Dev scenarios generated over the training environments, and evaluated (a spread over kinds)."""


def pass_at_1(rows) -> dict:
    """pass@1 (first trials) overall, by kind, and over the calling and the declining kinds."""
    def rate(part) -> float | None:
        return round(100 * part.passed.mean(), 1) if len(part) else None

    return {"pass@1": rate(rows), "scenarios": len(rows),
            "calling": rate(rows[rows.kind.isin(FAMILIES["calling"])]),
            "declining": rate(rows[rows.kind.isin(FAMILIES["declining"])]),
            "by_kind": {k: rate(part) for k, part in rows.groupby("kind")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/outcome.yaml")
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("data", help="the data phase, build_dataset under overrides")
    data.add_argument("overrides", type=json.loads)
    train = commands.add_parser("train", help="an SFT variant of the base model")
    train.add_argument("overrides", type=json.loads)
    train.add_argument("--dataset", help="the sft_dataset version (default: the latest)")
    prefs = commands.add_parser("prefs", help="preference pairs with an SFT model as the student")
    prefs.add_argument("sft")
    prefs.add_argument("overrides", type=json.loads)
    dpo = commands.add_parser("dpo", help="a DPO variant from an SFT model")
    dpo.add_argument("sft")
    dpo.add_argument("preferences")
    dpo.add_argument("overrides", type=json.loads)
    evaluate = commands.add_parser("eval", help="the closed loop on the dev scenarios")
    evaluate.add_argument("models", nargs="+", metavar="LABEL=MODEL")
    evaluate.add_argument("--needed", choices=("catalog", "first", "last"), default="catalog",
                          help="where each scenario's needed tools stand in its offer")
    evaluate.add_argument("--split", choices=("dev", "train"), default="dev",
                          help="dev: the generated dev split; train: the train split's "
                          "scenarios never synthesized (the old dev set)")
    args = parser.parse_args()

    config = load_config(args.config).merged(seed=0, scenarios={"generate": {"dev": DEV_SCENARIOS}})
    run = Runner(Ledger(Path(config.store.root).parent / "outcome_wall.json"))
    timings: list[Timing] = []
    if args.command == "data":
        cfg = config.merged(dataset=args.overrides)
        outputs = {stage: run(stage, cfg, timings)["outputs"] for stage in DATA_STAGES}
        print(outputs["build_dataset"]["sft_dataset"])
    elif args.command == "train":
        cfg = config.merged(train=args.overrides | (
            {"dataset": args.dataset} if args.dataset else {}))
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
            "closed_loop": {"splits": [args.split], "max_scenarios": DEV_SCENARIOS,
                            "needed_tools": args.needed}})
        outputs = run("evaluate", cfg, timings, label=f"{args.split} ({args.needed})")["outputs"]
        store = ArtifactStore(config.store.root)
        # Only scenarios the teacher was never asked (so never trained on); none is, before the
        # data phase has synthesized anything.
        synthesized = (set(store.read(store.resolve("attempts")).scenario_id)
                       if "attempts" in store.names() else set())
        figures, left_out = {}, set()
        for key, version in outputs.items():
            if key.startswith("eval_rollouts:"):
                frame = store.read(version)
                first = frame[frame.trial == 0]
                left_out |= set(first.scenario_id) & synthesized
                for model, rows in first[~first.scenario_id.isin(synthesized)].groupby("model"):
                    figures[model] = pass_at_1(rows)
        print(json.dumps({"benchmark": "outcome_dev", "split": args.split,
                          "needed_tools": args.needed,
                          "synthesized_left_out": len(left_out), "models": figures}))


if __name__ == "__main__":
    main()
