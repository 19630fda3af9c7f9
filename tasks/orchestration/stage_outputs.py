"""Publishing a stage's outputs, and reusing them when the same inputs were already published.

A stage's outputs share one set of parents and parameters, so their version ids are known before
any work is done: when every output already exists the stage returns them without recomputing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import Features

from agentune.tasks.orchestration import reporting
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest, VersionRef


@dataclass
class Output:
    """One table a stage publishes."""

    rows: Sequence[Mapping[str, Any]]
    features: Features | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


def existing_outputs(store: ArtifactStore, names: Sequence[str], *, parents: Sequence[VersionRef],
                     params: Mapping[str, Any]) -> dict[str, Manifest] | None:
    """The published versions of all ``names`` for these inputs, or None if any is missing."""
    found = {name: store.find(name, parents=parents, params=params) for name in names}
    if any(m is None for m in found.values()):
        return None
    for manifest in found.values():
        store.set_alias(manifest.ref, "latest")
    return found  # type: ignore[return-value]


def reused_result(stage: str, store: ArtifactStore, names: Sequence[str], *,
                  parents: Sequence[VersionRef], params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The stage's result when all its outputs are already published for these inputs (the run
    summary is the first output's), else None: the stage then has work to do."""
    found = existing_outputs(store, names, parents=parents, params=params)
    if found is None:
        return None
    summary = found[names[0]].stats.get("summary", [])
    return stage_result(stage, found, reused=True, summary=summary, usage=[], store=store)


def publish_outputs(store: ArtifactStore, outputs: Mapping[str, Output], *,
                    parents: Sequence[VersionRef], params: Mapping[str, Any]) -> dict[str, Manifest]:
    return {
        name: store.publish(name, out.rows, parents=parents, params=params, stats=out.stats,
                            features=out.features, description=out.description)
        for name, out in outputs.items()
    }


def stage_result(stage: str, manifests: Mapping[str, Manifest], *, reused: bool,
                 summary: Sequence[Mapping[str, Any]], usage: Sequence[Mapping[str, Any]],
                 store: ArtifactStore) -> dict[str, Any]:
    """What a stage flow returns, and the run summary it leaves in the Prefect UI."""
    outputs = {name: str(m.ref) for name, m in manifests.items()}
    # The versions this run read: every output of a stage shares its parents.
    inputs = sorted({f"{p['name']}@{p['version']}" for m in manifests.values() for p in m.parents})
    lines = [f"## {stage}", "", "reused existing versions (inputs unchanged)" if reused else "",
             "", "inputs: " + (", ".join(f"`{i}`" for i in inputs) or "files named in the config"),
             "", "| output | version | rows | path |", "|---|---|---|---|"]
    lines += [f"| {name} | `{m.version}` | {m.rows} | `{store.version_dir(m.ref)}` |"
              for name, m in manifests.items()]
    if summary:
        lines += ["", "| " + " | ".join(summary[0]) + " |", "|" + "---|" * len(summary[0])]
        lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in summary]
    if usage:
        lines += ["", "| stage | role | requests | cached | prompt tokens | completion tokens | cost |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {u['stage']} | {u['role']} | {u['requests']} | {u['cached']} | "
                  f"{u['prompt_tokens']} | {u['completion_tokens']} | {u['cost']} |" for u in usage]
    reporting.markdown(f"{stage}-summary", "\n".join(lines), f"{stage} run summary")
    reporting.table(f"{stage}-counts", summary, f"{stage}: counts in, kept, dropped by reason")
    return {"stage": stage, "outputs": outputs, "reused": reused, "summary": list(summary)}
