"""Publishing inside a Prefect run leaves a markdown artifact pointing at the version."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
)

from agentune.tasks.orchestration import reporting
from agentune.tasks.store.artifact_store import ArtifactStore


async def test_publish_in_a_flow_creates_a_markdown_artifact(prefect_api, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store", on_publish=reporting.announce_version)

    @flow
    def publish_queries() -> str:
        m = store.publish("queries", [{"id": "q1"}], stats={"kept": 1})
        reporting.table("queries-summary", [{"in": 1, "kept": 1}], "counts")
        return m.version

    state = publish_queries(return_state=True)
    version = await state.result()
    # The Prefect server is shared by the session: other tests publish under the same keys.
    this_run = ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["queries-version"]), flow_run_id=this_run
            )
        )
        tables = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["queries-summary"]), flow_run_id=this_run
            )
        )
    assert found and found[0].type == "markdown"
    assert f"queries@{version}" in found[0].data
    assert str(store.version_dir(store.resolve("queries"))) in found[0].data
    assert tables and tables[0].type == "table"


def test_outside_a_run_nothing_is_reported(tmp_path: Path) -> None:
    assert not reporting.in_prefect_run()
    # no Prefect API needed
    ArtifactStore(tmp_path, on_publish=reporting.announce_version).publish("queries", [{"id": "q1"}])
    assert reporting.artifact_key("sft_dataset Version") == "sft-dataset-version"


def test_lists_and_dicts_render_readably_not_as_python_reprs() -> None:
    summary = [{"kind": "scenario", "kept": 3}, {"kind": "query", "kept": 1}]
    assert reporting.cell(["zh", "en"]) == "zh, en"
    assert reporting.cell({"kept": 3, "langs": ["zh", "en"]}) == "kept: 3; langs: zh, en"
    assert reporting.cell([]) == "-" and reporting.cell(2.5) == 2.5
    assert reporting.bullets({"summary": summary, "total": 4}) == [
        "- summary:", "  - kind: scenario; kept: 3", "  - kind: query; kept: 1", "- total: 4"]
    assert not any("{" in line or "[" in line for line in reporting.bullets(summary))
