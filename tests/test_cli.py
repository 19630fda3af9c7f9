"""The `agentune` command: the store commands, config errors, the console script itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentune.cli import main
from agentune.tasks.store.artifact_store import ArtifactStore

AGENTUNE = shutil.which("agentune") or str(Path(sys.executable).parent / "agentune")


@pytest.fixture
def filled_store(tmp_path: Path) -> ArtifactStore:
    store = ArtifactStore(tmp_path / "store")
    q = store.publish("queries", [{"id": "q1", "text": "北京天气"}], params={"n": 1})
    store.publish("tools", [{"name": "get_weather"}], parents=[q.ref])
    store.publish("queries", [{"id": "q2", "text": "old"}], params={"n": 0}, aliases=())
    return store


def test_console_script_lists_its_commands() -> None:
    out = subprocess.run([AGENTUNE, "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("run", "versions", "show", "verify", "gc"):
        assert command in out


def test_versions_json_is_a_list_with_the_documented_keys(filled_store, capsys) -> None:
    assert main(["versions", "--json", "--store", str(filled_store.root)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and len(rows) == 3
    for row in rows:
        assert {"name", "version", "created_at", "rows", "path", "parents"} <= set(row)
        assert Path(row["path"]).is_dir()
    tools = next(r for r in rows if r["name"] == "tools")
    assert tools["parents"][0]["name"] == "queries"
    assert main(["versions", "tools", "--json", "--store", str(filled_store.root)]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["tools"]


def test_versions_json_on_an_empty_store(tmp_path, capsys) -> None:
    assert main(["versions", "--json", "--store", str(tmp_path / "none")]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_show_prints_manifest_and_rows(filled_store, capsys) -> None:
    assert main(["show", "queries", "--store", str(filled_store.root)]) == 0
    out = capsys.readouterr().out
    assert '"name": "queries"' in out and "北京天气" in out


def test_verify_fails_with_nonzero_exit_naming_the_file(filled_store, capsys) -> None:
    assert main(["verify", "--store", str(filled_store.root)]) == 0
    part = filled_store.version_dir(filled_store.resolve("tools")) / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[:-10] + b"0123456789")
    assert main(["verify", "tools", "--store", str(filled_store.root)]) == 1
    assert "part-00000.parquet: sha256 mismatch" in capsys.readouterr().err


def test_gc_dry_run_then_real(filled_store, capsys) -> None:
    assert main(["gc", "--dry-run", "--store", str(filled_store.root)]) == 0
    assert "would remove 1 item(s)" in capsys.readouterr().out
    assert len(filled_store.versions()) == 3
    assert main(["gc", "--store", str(filled_store.root)]) == 0
    assert len(filled_store.versions()) == 2


def test_unknown_version_is_a_clear_error(filled_store, capsys) -> None:
    assert main(["show", "nothing", "--store", str(filled_store.root)]) == 2
    assert "no published version nothing@latest" in capsys.readouterr().err


def test_config_errors_name_the_file_and_field(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("llm:\n  teacher:\n    max_concurrency: 0\n    provider: openai\n")
    assert main(["versions", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "llm.teacher.max_concurrency" in err
    bad.write_text("stroe:\n  root: x\n")
    assert main(["versions", "--config", str(bad)]) == 2
    assert "stroe: Extra inputs are not permitted" in capsys.readouterr().err
    bad.write_text("store: [unclosed\n")
    assert main(["versions", "--config", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["versions", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_the_synthesis_yield_is_printed_readably(capsys) -> None:
    from agentune.cli import print_synthesis_yield

    print_synthesis_yield([{"metric": "combinations", "value": 12},
                           {"metric": "trajectories verified", "value": 31},
                           {"metric": "pass@k single_call (9 scenarios)", "value": 0.89}])
    out = capsys.readouterr().out
    assert "trajectories verified: 31" in out and "pass@k single_call (9 scenarios): 0.89" in out
    assert "combinations" not in out


def test_ctrl_c_stops_a_run_even_when_its_first_cancellation_is_lost(monkeypatch) -> None:
    import asyncio
    import os
    import signal
    import time

    from agentune import cli

    monkeypatch.setattr(cli, "STOP_AGAIN_S", 0.2)
    cancelled = []

    async def stubborn() -> str:
        # Ctrl-C once the run is going; the first cancellation is swallowed, as
        # asyncio.wait_for does on Python 3.11 when its inner call completes at that moment.
        asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
        for _ in range(2):
            try:
                await asyncio.sleep(20)
            except asyncio.CancelledError:
                cancelled.append(time.monotonic())
                if len(cancelled) == 2:
                    raise
        return "ran to its end"

    with pytest.raises(KeyboardInterrupt):
        cli.run_flow(stubborn())
    assert len(cancelled) == 2
    # The handler is gone with the run: Ctrl-C is Python's KeyboardInterrupt again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
