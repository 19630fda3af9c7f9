"""``agentune env check``: load the environments, list every tool's schema, run every scenario's
ground truth, and say what fails (and which facts no call returns: a fact nobody can ground)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.environments.catalog import EnvironmentCatalog, describe
from agentune.tasks.environments.replay import Episode, execute_ground_truth
from agentune.tasks.environments.scenarios import CALLING_KINDS, Scenario
from agentune.tasks.verifier.answers import fact_found


@dataclass
class CheckReport:
    environments: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    scenarios: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(scenario id, reason, detail) of every ground truth that does not stand."""
    warnings: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        out = ["environments:"]
        out += [f"  {e['environment']}: {e['source']}, {e['tools']} tools ({e['writes']} write)"
                + (", reserved" if e["reserved"] else "") + (", shared" if e["shared"] else "")
                for e in self.environments]
        out.append("tools:")
        out += [f"  [{t['environment']}] {t['name']}: {json.dumps(t['parameters'], ensure_ascii=False)}"
                for t in self.tools]
        ran = self.scenarios - len(self.skipped)
        out.append(f"scenarios: {self.scenarios}, ground truth ran for {ran}, "
                   f"{ran - len(self.failures)} passed, {len(self.failures)} failed")
        out += [f"  FAILED {sid}: {reason}: {detail}" for sid, reason, detail in self.failures]
        out += [f"  skipped {sid}: {why}" for sid, why in self.skipped]
        out += [f"  warning {sid}: {what}" for sid, what in self.warnings]
        return out


def catalog_report(catalog: EnvironmentCatalog) -> CheckReport:
    tools = [{"environment": spec.name, "name": t.name, "parameters": t.parameters}
             for spec in catalog.environments.values() for t in spec.tools]
    return CheckReport(describe(catalog), tools)


async def check_scenarios(report: CheckReport, scenarios: Sequence[Scenario],
                          episode: Episode) -> CheckReport:
    """Every ground truth run in a fresh episode. Without a teacher (``episode.gateway`` None)
    the scenarios of simulated environments are skipped: the teacher plays those."""
    report.scenarios = len(scenarios)
    for scenario in scenarios:
        simulated = any(spec.kind == "simulated"
                        for spec in episode.catalog.offered(scenario.environment))
        if simulated and episode.gateway is None:
            report.skipped.append((scenario.id, "a simulated environment needs the teacher "
                                   "(give --config)"))
            continue
        run = await execute_ground_truth(scenario, episode)
        if run.problem:
            report.failures.append((scenario.id, *run.problem))
            continue
        if scenario.kind in CALLING_KINDS:
            known = json.dumps(run.results, ensure_ascii=False) + scenario.request + (
                scenario.hidden or "")
            ungrounded = [f for f in scenario.facts if not fact_found(f, known)]
            if ungrounded:
                report.warnings.append((scenario.id, f"no call returns the facts {ungrounded}"))
    return report
