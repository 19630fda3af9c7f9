"""The demo scenarios as retrieval cases (splits as build_scenarios draws them, no ground truth
run: retrieval needs only the requests and the tools called), and a tiny random encoder."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.scenarios import ScenarioRecord, assign_split, load_scenarios
from agentune.tasks.tool_retrieval.documents import tool_text
from agentune.tasks.tool_retrieval.pairs import RetrievalCase, scenario_cases

from support.tiny_models import tiny_llama

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"
NOW = dt.datetime(2025, 6, 2, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=8)))


def demo_catalog() -> EnvironmentCatalog:
    return load_environments(DEMO / "tools.yaml")


def demo_records(catalog: EnvironmentCatalog, heldout_fraction: float = 0.25
                 ) -> list[ScenarioRecord]:
    return [ScenarioRecord(s, assign_split(s, catalog, heldout_fraction=heldout_fraction, seed=0),
                           NOW, {}, {})
            for s in load_scenarios(DEMO / "scenarios.yaml", catalog)]


def demo_cases() -> tuple[EnvironmentCatalog, list[RetrievalCase]]:
    catalog = demo_catalog()
    return catalog, scenario_cases(demo_records(catalog))


def tiny_encoder_folder(folder: Path, catalog: EnvironmentCatalog,
                        cases: list[RetrievalCase]) -> Path:
    """A random 2-layer Llama whose tokenizer is fitted to the catalog and the requests."""
    corpus = [tool_text(t) for t in catalog.tools()] + [c.request for c in cases]
    return tiny_llama(folder, corpus * 2, vocab_size=600, max_positions=512,
                      chat_template="{{ messages[0]['content'] }}")


def publish_scenarios(store: Any, catalog: EnvironmentCatalog) -> Any:
    """The demo scenarios as a ``scenarios`` version (splits drawn as build_scenarios draws them;
    ground truth not run: retrieval reads the requests and the tools called)."""
    from agentune.tasks.common.schemas import SCENARIO_FEATURES

    rows = [{**r.scenario.model_dump(mode="json"), "split": r.split, "now": NOW.isoformat(),
             "start_state": {}, "expected_state": {}, "ground_truth_results": [],
             "verifier_version": "test"} for r in demo_records(catalog)]
    return store.publish("scenarios", rows, features=SCENARIO_FEATURES)
