"""The Prefect console end to end: a real server on a free loopback port, deployments from
prefect.yaml, a process worker, a deployment run with custom parameters, and a clean stop."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import httpx
import pytest

from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.orchestration import console, deployment_forms
from agentune.tasks.store.artifact_store import ArtifactStore

from support.console import free_port, process_group_members, write_config

ROOT = PROJECT_ROOT
DEMO = ROOT / "data" / "demo"


def test_deployment_spec_fills_every_deployment(tmp_path: Path) -> None:
    config = write_config(tmp_path / "run.yaml", tmp_path / "store", DEMO)
    spec = console.deployment_spec(ROOT / "prefect.yaml", config, "my-pool")
    names = {d["name"] for d in spec["deployments"]}
    assert {"pipeline", "collect_queries", "build_scenarios", "build_templates", "synthesize",
            "build_dataset", "train", "build_preferences", "train_dpo", "train_grpo",
            "evaluate"} <= names
    loaded = load_config(config)
    expected = loaded.model_dump(mode="json")
    # Each role with its provider's fields only (the form's branch for that provider).
    for role in ("teacher", "judge", "student"):
        expected["llm"][role] = getattr(loaded.llm, role).provider_dump()
        assert "base_url" not in expected["llm"][role] and "batch_size" in expected["llm"][role]
    methods = {"train_dpo": {"method": "dpo"}, "train_grpo": {"method": "grpo"}}
    for d in spec["deployments"]:
        paths = deployment_forms.form_paths(console.flow_name(d))
        assert (paths is None) == (d["name"] == "pipeline")
        config = d["parameters"].pop("config")
        assert d["parameters"] == methods.get(d["name"], {})
        if paths is None:
            # The pipeline's form holds the config as declared (tests/test_model_registry.py:
            # names of the models registry kept), each role with its provider's fields only.
            assert RunConfig.model_validate(config) == loaded
            for role in ("teacher", "judge", "student"):
                assert set(config["llm"][role]) <= set(expected["llm"][role])
        else:  # a stage's form: the fields it reads, resolved
            assert config == deployment_forms.prune_values(expected, paths)
        assert d["work_pool"]["name"] == "my-pool"
        assert d["enforce_parameter_schema"] is True
        assert all(not s["active"] for s in d.get("schedules", []))
    # The deployments that train run one at a time.
    limits = {d["name"]: d.get("concurrency_limit") for d in spec["deployments"]}
    assert limits["train"] == limits["pipeline"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
    assert limits["train_dpo"] == limits["train_grpo"] == limits["train"]
    assert limits["collect_queries"] is None


def test_deployment_spec_rejects_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("queries: {set_sise: 3}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="set_sise"):
        console.deployment_spec(ROOT / "prefect.yaml", bad, "agentune")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_console_runs_a_deployment_and_stops_clean(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name in ("queries.jsonl", "tools.yaml"):
        shutil.copy(DEMO / name, inputs / name)
    shutil.copytree(DEMO / "environments", inputs / "environments")
    deployed = write_config(tmp_path / "deployed.yaml", tmp_path / "store-default", inputs)
    custom = load_config(write_config(tmp_path / "custom.yaml", tmp_path / "store", inputs))
    custom.queries.set_size = 4  # a parameter the deployed default does not have

    port = free_port()
    state = None
    try:
        state = console.console_up(deployed, port=port, pool="agentune-test", root=ROOT)
        assert state.api_url == f"http://127.0.0.1:{port}/api"
        with temporary_settings({PREFECT_API_URL: state.api_url}):
            run = run_deployment("collect_queries/collect_queries", timeout=480,
                                 parameters={"config": custom.model_dump(mode="json")})
            assert run.state is not None and run.state.is_completed(), run.state
            forms = {name: httpx.get(f"{state.api_url}/deployments/name/{name}/{name}").json()
                     for name in ("pipeline", "synthesize")}
            assert all(f["enforce_parameter_schema"] for f in forms.values())
            fields = {n: deployment_forms.field_count(f["parameter_openapi_schema"])
                      for n, f in forms.items()}
            assert fields["synthesize"] < 0.5 * fields["pipeline"], fields
            # The server enforces the form's schema: a naive time is refused, the field named.
            naive = custom.model_dump(mode="json")
            naive["evaluate"]["current_time"] = "2025-06-02T09:30:00"
            with pytest.raises(Exception, match=r"config\.evaluate\.current_time'. Failure "
                               r"reason: '2025-06-02T09:30:00' does not match"):
                run_deployment("pipeline/pipeline", timeout=0, parameters={"config": naive})

            async def artifacts() -> list:
                async with get_client() as client:
                    return await client.read_artifacts(artifact_filter=ArtifactFilter(
                        flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))

            found = asyncio.run(artifacts())

            async def train_limits() -> list:
                async with get_client() as client:
                    found = [(await client.read_deployment_by_name(name))
                             for name in ("train/train", "pipeline/pipeline",
                                          "collect_queries/collect_queries")]
                return [d.global_concurrency_limit.limit if d.global_concurrency_limit else None
                        for d in found]

            limits = asyncio.run(train_limits())
    finally:
        pids = console.console_down()
    assert state is not None and pids == [state.worker_pid, state.server_pid]
    for pid in pids:
        assert process_group_members(pid) == [], f"process group {pid} still has processes"
    assert not console.state_path().exists()
    assert limits == [1, 1, None]  # as deployed on the server

    store = ArtifactStore(tmp_path / "store")
    published = {m.name: m for m in store.versions()}
    assert {"queries", "tools", "rejects"} <= set(published)
    assert published["queries"].params["queries"]["set_size"] == 4
    assert not (tmp_path / "store-default").exists()  # the custom parameters were used
    summary = [a for a in found if a.type == "markdown" and a.key == "collect-queries-summary"]
    assert summary, [a.key for a in found]
    assert published["queries"].version in summary[0].data
    assert os.environ["PREFECT_HOME"] == str(tmp_path / "prefect")
