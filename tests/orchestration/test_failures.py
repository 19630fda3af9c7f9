"""A failed pipeline run names the failing stage and its inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentune.config import RunConfig
from agentune.flows.pipeline import pipeline
from agentune.paths import PROJECT_ROOT
from agentune.tasks.orchestration.failures import STAGE_INPUTS, StageFailed, config_value

DEMO = PROJECT_ROOT / "data" / "demo"


def test_every_named_input_is_a_config_field() -> None:
    config = RunConfig()
    for fields in STAGE_INPUTS.values():
        for name in fields:
            config_value(config, name)  # raises AttributeError on a renamed field


async def test_failed_pipeline_names_stage_and_input(tmp_path: Path, prefect_api: None) -> None:
    missing = tmp_path / "no-such-queries.jsonl"
    config = RunConfig.model_validate({
        "store": {"root": str(tmp_path / "store")},
        "llm": {"cache": False},
        "queries": {"seed_queries": str(missing)},
        "environments": {"catalog": str(DEMO / "tools.yaml")},
    })
    with pytest.raises(StageFailed) as failed:
        await pipeline(config=config)
    message = str(failed.value)
    assert "stage 'collect_queries' failed" in message
    assert str(missing) in message
    assert "Completed before it: none" in message
