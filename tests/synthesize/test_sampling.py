"""Combination sampling: task types by weight (within what the queries allow), every sampled query
under several distinct templates, template use balanced and capped, no-tool queries as timing
decisions, large subsets with distractors for tool retrieval, deterministic for a seed; and the
input tables checked with errors that name the row and field."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd
import pytest

from agentune.config.synthesize import SynthesisConfig, TaskTypeName
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import BENCHMARKS, benchmark_template
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.schemas import TASK_TYPES
from agentune.tasks.synthesize.sampling import (
    QueryInput,
    SynthesisInputs,
    read_queries,
    read_templates,
    sample_combinations,
)
from agentune.tasks.tools.catalog import load_tool_catalog

CATALOG = {t.name: t for t in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml")}
PLANNERS = {benchmark_template(n).id: benchmark_template(n) for n, spec in BENCHMARKS.items()
            if spec.kind == "planner"}
NAMES = sorted(CATALOG)


def queries(n_none: int, n_one: int, n_many: int) -> list[QueryInput]:
    out = []
    for i in range(n_none + n_one + n_many):
        needed = () if i < n_none else (NAMES[i % 5],) if i < n_none + n_one else \
            (NAMES[i % 5], NAMES[5 + i % 5])
        subset = tuple(dict.fromkeys(needed + tuple(NAMES[10 + j] for j in range(3))))
        out.append(QueryInput(f"q{i:03d}", f"query number {i} about {' '.join(needed)}", "en",
                              f"set{i // 5}", subset, needed))
    return out


def inputs(qs: list[QueryInput]) -> SynthesisInputs:
    return SynthesisInputs(qs, CATALOG, PLANNERS)


def test_task_types_have_the_configured_names() -> None:
    assert set(TaskTypeName.__args__) == set(TASK_TYPES)  # type: ignore[attr-defined]
    assert set(SynthesisConfig().task_weights) == set(TASK_TYPES)


def test_weights_are_met_when_every_pool_is_deep_enough() -> None:
    cfg = SynthesisConfig(templates_per_query=2, max_combinations=200)
    plan = sample_combinations(inputs(queries(60, 120, 120)), cfg, seed=1)
    assert len(plan) == 200
    per_query = Counter(c.query_id for c in plan)
    assert set(per_query.values()) == {2}
    by_type = Counter(c.task_type for c in plan)
    for task_type, weight in cfg.task_weights.items():
        assert abs(by_type[task_type] - weight * 200) <= 2
    # Every query under distinct templates, one task type each.
    for qid in per_query:
        mine = [c for c in plan if c.query_id == qid]
        assert len({c.template_id for c in mine}) == 2 and len({c.task_type for c in mine}) == 1
    assert len({c.id for c in plan}) == len(plan)


def test_each_task_type_gets_the_tools_it_is_about() -> None:
    cfg = SynthesisConfig(templates_per_query=1, max_combinations=100, retrieval_tools=12)
    qs = {q.id: q for q in queries(20, 50, 40)}
    plan = sample_combinations(inputs(list(qs.values())), cfg, seed=2)
    for c in plan:
        q = qs[c.query_id]
        assert set(q.likely_tool_ids) <= set(c.tool_names) and c.expected_tools == q.likely_tool_ids
        if c.task_type == "timing_decision":
            assert q.likely_tool_ids == () and c.tool_names == q.tool_ids
        elif c.task_type == "multi_step_planning":
            assert len(q.likely_tool_ids) >= 2
        elif c.task_type == "tool_retrieval":
            assert len(c.tool_names) == 12 and len(set(c.tool_names)) == 12
            assert len(set(c.tool_names) - set(q.likely_tool_ids)) == 12 - len(q.likely_tool_ids)
        else:
            assert c.tool_names == q.tool_ids and len(c.tool_names) > len(q.likely_tool_ids)


def test_a_type_without_queries_gives_its_share_away_and_scarce_types_come_first() -> None:
    cfg = SynthesisConfig(templates_per_query=1)
    qs = queries(0, 10, 4)  # no query needs zero tools; only four need several
    plan = sample_combinations(inputs(qs), cfg, seed=3)
    by_type = Counter(c.task_type for c in plan)
    assert "timing_decision" not in by_type and len(plan) == 14
    # The multi-tool queries went to multi-step planning rather than to the broader types.
    assert by_type["multi_step_planning"] == 4


def test_template_use_is_balanced_and_capped() -> None:
    plan = sample_combinations(inputs(queries(10, 30, 20)), SynthesisConfig(templates_per_query=3),
                               seed=4)
    uses = Counter(c.template_id for c in plan)
    assert set(uses) == set(PLANNERS) and max(uses.values()) - min(uses.values()) <= 1
    capped = sample_combinations(inputs(queries(10, 30, 20)),
                                 SynthesisConfig(templates_per_query=3, max_uses_per_template=4),
                                 seed=4)
    assert len(capped) == 4 * len(PLANNERS)
    assert set(Counter(c.template_id for c in capped).values()) == {4}


def test_deterministic_for_a_seed() -> None:
    cfg = SynthesisConfig(max_combinations=30)
    qs = queries(10, 30, 20)
    assert sample_combinations(inputs(qs), cfg, seed=5) == sample_combinations(inputs(qs), cfg,
                                                                               seed=5)
    assert sample_combinations(inputs(qs), cfg, seed=5) != sample_combinations(inputs(qs), cfg,
                                                                               seed=6)


def row(**changes: Any) -> dict[str, Any]:
    base = {"id": "q1", "text": "What is 2+3?", "lang": "en", "set_id": "s1",
            "tool_ids": ["calculator", "get_weather"], "likely_tool_ids": ["calculator"]}
    return {**base, **changes}


def test_input_errors_name_the_row_and_field() -> None:
    with pytest.raises(InputError, match=r"queries@v1: row 1 \(query q2\): field 'tool_ids': "
                                         r"no_such_tool not in the tool catalog"):
        read_queries(pd.DataFrame([row(), row(id="q2", tool_ids=["no_such_tool"])]),
                     "queries@v1", CATALOG)
    with pytest.raises(InputError, match=r"row 0: field 'text': must be a non-empty string"):
        read_queries(pd.DataFrame([row(text="")]), "queries@v1", CATALOG)
    template = {"id": "tpl-bad", "kind": "planner", "kept": True, "protocol": "react",
                "source": "meta-agent", "lang": "en", "text": "{% block profile %}x{% endblock %}"}
    with pytest.raises(InputError, match=r"row 0 \(template tpl-bad\): field 'text': .*missing"):
        read_templates(pd.DataFrame([template]), "templates@v1")
    dropped = {**template, "kept": False}
    with pytest.raises(InputError, match="no kept planner template"):
        read_templates(pd.DataFrame([dropped]), "templates@v1")
