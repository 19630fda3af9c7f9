"""The Prefect UI in a real browser: `agentune ui` on a free loopback port, headless Chromium
(Debian's `chromium`, driven by Playwright), the Custom run forms of the pipeline and of a stage
submitted with "Validate parameters" on, and a stage's Quick run. Screenshots of every step go to
the test's temp folder.

A default the form refuses (e.g. a time without its UTC offset) makes Submit start nothing: then
no flow run appears and this test fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentune.paths import PROJECT_ROOT
from agentune.tasks.orchestration import console

from support.console import free_port, write_config

CHROMIUM = os.environ.get("AGENTUNE_CHROMIUM") or shutil.which("chromium")
INSTALL = ("needs Debian's chromium (`apt-get install chromium`; `make test` installs it as root "
           "where apt exists) or AGENTUNE_CHROMIUM=/path/to/chrome, and the `playwright` Python "
           "package (`pip install -e '.[test]'`)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(CHROMIUM is None, reason=f"no chromium: {INSTALL}")]

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
DATABASE_TIMEOUT_S = 60


def flow_runs(api: str, deployment_id: str) -> list[dict[str, Any]]:
    got = httpx.post(f"{api}/flow_runs/filter", json={
        "deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_DESC"})
    got.raise_for_status()
    return got.json()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout_s:g} s")


def new_run(api: str, deployment_id: str, before: set[str], messages: list[str],
            timeout_s: float = 60) -> dict:
    """The flow run the last click created (Submit starting nothing is the bug this catches)."""
    return wait_for(f"a flow run created by the click (browser console: {messages[-5:]})",
                    lambda: next((r for r in flow_runs(api, deployment_id)
                                  if r["id"] not in before), None), timeout_s)


def final_state(api: str, run_id: str, timeout_s: float) -> dict:
    return wait_for(f"flow run {run_id} finished", lambda: (
        lambda r: r if r["state_type"] in FINAL else None)(
            httpx.get(f"{api}/flow_runs/{run_id}").json()), timeout_s)


def test_custom_and_quick_runs_from_the_ui_start_and_complete(tmp_path: Path, monkeypatch) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason=f"no playwright: {INSTALL}")
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    # A loaded machine makes SQLite slow: wait for it rather than answer 503 (default 10 s).
    monkeypatch.setenv("PREFECT_API_DATABASE_TIMEOUT", str(DATABASE_TIMEOUT_S))
    inputs = PROJECT_ROOT / "data" / "demo"
    config = write_config(tmp_path / "run.yaml", tmp_path / "store", inputs)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        state = console.console_up(config, port=port, pool="agentune-browser", root=PROJECT_ROOT)
        api = state.api_url
        print(f"console up after {time.monotonic() - started:.0f} s")
        ids = {name: httpx.get(f"{api}/deployments/name/{name}/{name}").json()["id"]
               for name in ("collect_queries", "pipeline")}
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            messages: list[str] = []  # the browser console: what the UI said, for a failure
            page.on("console", lambda m: messages.append(f"{m.type}: {m.text[:300]}"))
            # ... and which request a "Failed to load resource" was.
            page.on("response", lambda r: r.status >= 400 and messages.append(
                f"{r.status} {r.request.method} {r.url.removeprefix(ui)}"))

            def submitted(name: str, submit: Any, shot: str, before: set[str]) -> dict:
                """Click ``submit``; the flow run it created. The creating request may wait for
                SQLite up to the database timeout and then answer 503 (a loaded CI machine):
                waited for past that, and only a 503 earns another click, as a user would give
                it; anything else is the failure."""
                for attempt in range(3):
                    submit.click()
                    page.wait_for_timeout(1500)  # the toast or the error the click produced
                    page.screenshot(path=shots / shot)
                    try:
                        return new_run(api, ids[name], before, messages, DATABASE_TIMEOUT_S + 30)
                    except AssertionError:
                        if attempt == 2 or not any("503" in m for m in messages):
                            raise
                        messages.clear()
                raise AssertionError("unreachable")

            def custom_run(name: str) -> dict:
                before = {r["id"] for r in flow_runs(api, ids[name])}
                page.goto(f"{ui}/deployments/deployment/{ids[name]}/run")
                submit = page.get_by_role("button", name="Submit")
                submit.wait_for(timeout=60_000)
                assert page.get_by_label("Validate parameters").is_checked()
                page.screenshot(path=shots / f"{name}-1-custom-run-form.png")
                return submitted(name, submit, f"{name}-2-submitted.png", before)

            # Submitted one after the other, so the worker runs them side by side.
            # A stage: its (short) form as deployed, validated and submitted.
            stage_run = custom_run("collect_queries")
            # Its LLM roles (teacher, judge) each offer the provider choice, the local form shown.
            page.goto(f"{ui}/deployments/deployment/{ids['collect_queries']}/run")
            page.get_by_role("button", name="Submit").wait_for(timeout=60_000)
            assert page.get_by_role("button", name="openai", exact=True).count() == 2
            assert page.get_by_text("Batch Size (Optional)").count() == 2
            assert page.get_by_text("Base Url (Optional)").count() == 0

            # Quick run: the deployment's defaults as they are, from the Run menu's dialog.
            before = {r["id"] for r in flow_runs(api, ids["collect_queries"])}
            page.goto(f"{ui}/deployments/deployment/{ids['collect_queries']}")
            run_menu = page.get_by_role("button", name="Run", exact=True)
            run_menu.wait_for(timeout=60_000)
            run_menu.click()
            page.get_by_text("Quick run", exact=True).click()
            dialog = page.get_by_role("dialog")
            dialog.wait_for(timeout=30_000)
            page.screenshot(path=shots / "collect_queries-3-quick-run-dialog.png")
            quick_run = submitted("collect_queries", dialog.get_by_role("button", name="Run",
                                                                        exact=True),
                                  "collect_queries-3-quick-run-submitted.png", before)

            # The pipeline: the whole run config in the form. Its run starts (the parameters pass
            # the server and the flow's own validation: it reaches Running); running every stage
            # would take many minutes, so it is cancelled then.
            pipeline_run = custom_run("pipeline")
            running = wait_for("the pipeline run running", lambda: (
                lambda r: r if r["state_type"] in {"RUNNING"} | FINAL else None)(
                    httpx.get(f"{api}/flow_runs/{pipeline_run['id']}").json()), 180)
            assert running["state_type"] == "RUNNING", running["state"]
            page.goto(f"{ui}/runs/flow-run/{pipeline_run['id']}")
            page.get_by_text("Running").first.wait_for(timeout=60_000)
            page.screenshot(path=shots / "pipeline-3-run-running.png")
            httpx.post(f"{api}/flow_runs/{pipeline_run['id']}/set_state", json={
                "state": {"type": "CANCELLING", "name": "Cancelling"}, "force": True})

            for n, run in enumerate((stage_run, quick_run), start=4):
                done = final_state(api, run["id"], 240)
                assert done["state_type"] == "COMPLETED", done["state"]
                page.goto(f"{ui}/runs/flow-run/{run['id']}")
                page.get_by_text("Completed").first.wait_for(timeout=60_000)
                page.screenshot(path=shots / f"collect_queries-{n}-run-completed.png")
            browser.close()
    finally:
        console.console_down()
    assert sorted(p.name for p in shots.iterdir()) == [
        "collect_queries-1-custom-run-form.png", "collect_queries-2-submitted.png",
        "collect_queries-3-quick-run-dialog.png", "collect_queries-3-quick-run-submitted.png",
        "collect_queries-4-run-completed.png",
        "collect_queries-5-run-completed.png", "pipeline-1-custom-run-form.png",
        "pipeline-2-submitted.png", "pipeline-3-run-running.png"]
