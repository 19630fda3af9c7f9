"""The prompt templates a benchmark asks its models under: the benchmark templates asked for
(keyed by their KAgentBench names, ``ReACT`` ..., so the official script can score them) and
Meta-Agent templates the train split never used (keyed by template id), each recorded with
whether training saw it, so a report can show generalisation to unseen templates. The held-out
suites render their prompts with them; the closed loop's steps form groups its cases by them."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentune.tasks.agent.formats import KAGENTBENCH_KEYS
from agentune.tasks.agent.prompt_templates import (
    AgentTemplate,
    TemplateError,
    benchmark_id,
    benchmark_template,
    load_template,
)

PROTOCOL_KEYS: dict[str, str] = {protocol: key for key, protocol in KAGENTBENCH_KEYS.items()}
"""Protocol name -> KAgentBench template key (``react`` -> ``ReACT`` ...)."""


@dataclass(frozen=True)
class PromptTemplate:
    """A template the benchmark renders prompts with, and its record in ``templates``."""

    key: str
    template: AgentTemplate
    seen: bool

    def record(self) -> dict[str, Any]:
        return {"template_id": self.template.id, "protocol": self.template.protocol,
                "source": self.template.source, "seen": self.seen}


def template_key(template: AgentTemplate) -> str:
    """Benchmark templates go by their KAgentBench name (so the official script can score
    them); any other template by its id."""
    if template.source == "benchmark" and template.kind == "planner":
        return PROTOCOL_KEYS.get(template.protocol, template.id)
    return template.id


def template_from_row(row: Mapping[str, Any], origin: str) -> AgentTemplate:
    return load_template(str(row.get("text") or ""), id=str(row["id"]),
                         protocol=str(row["protocol"]), kind=row.get("kind") or "planner",
                         source=row.get("source") or "meta-agent",
                         lang=row.get("lang") or None, origin=f"{origin} row {row['id']!r}")


def choose_templates(*, benchmark: Sequence[str], template_rows: Sequence[Mapping[str, Any]],
                     seen_ids: set[str], unseen: int, seed: int, origin: str
                     ) -> tuple[list[PromptTemplate], list[dict[str, str]]]:
    """The benchmark templates asked for, plus up to ``unseen`` kept Meta-Agent planners the
    train split never used (drawn with ``seed``): those build_templates reserved for evaluation,
    or, in a templates version without reservations, any not used. Returns them and the
    templates left out."""
    chosen = []
    for name in benchmark:
        template = benchmark_template(name)
        chosen.append(PromptTemplate(template_key(template), template,
                                     benchmark_id(name) in seen_ids))
    skipped: list[dict[str, str]] = []
    candidates = [r for r in template_rows if r.get("source") == "meta-agent"
                  and r.get("kind", "planner") == "planner" and r.get("kept")
                  and str(r["id"]) not in seen_ids]
    reserved = [r for r in candidates if r.get("reserved") is True]
    candidates = reserved or candidates  # templates set aside before any training was planned
    random.Random(seed).shuffle(candidates)
    for row in candidates:
        if unseen <= 0:
            break
        try:
            template = template_from_row(row, origin)
        except TemplateError as exc:
            skipped.append({"item": f"template {row['id']}", "reason": "unusable_template",
                            "detail": str(exc)})
            continue
        chosen.append(PromptTemplate(template.id, template, False))
        unseen -= 1
    return chosen, skipped
