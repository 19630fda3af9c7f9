"""Python environments: tool schemas from type hints and docstrings, the state round trip, and
errors that name the file, the line and the parameter."""

from __future__ import annotations

import asyncio
import logging
import sys
import textwrap
from pathlib import Path

import pytest

from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.base import Environment, ToolError, generates, writes
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.python_source import inspect_class
from agentune.tasks.environments.session import EnvironmentSession
from agentune.tasks.tools.observation import ToolContext, ToolFailure


class Counter(Environment):
    name = "counter"
    description = {"en": "A counter.", "zh": "计数器。"}

    def reset(self, **state):
        self.value = state.get("value", 0)
        self.log = list(state.get("log", []))

    def state(self):
        return {"value": self.value, "log": list(self.log)}

    def read(self) -> int:
        """Read the counter. 读取计数。"""
        return self.value

    @writes
    def add(self, amount: int, note: str | None = None, times: int = 1) -> dict:
        """Add to the counter.

        Args:
            amount: How much to add.
            note: Why, for the log.
            times: How often.
        """
        if amount < 0:
            raise ToolError("amount must not be negative")
        self.value += amount * times
        self.log.append(note or "")
        return {"value": self.value}

    @generates("log.*")
    def reset_log(self) -> str:
        """Empty the log."""
        self.log = []
        return "ok"

    def _helper(self) -> None:
        """Not a tool: private."""


def test_schemas_come_from_hints_and_docstrings() -> None:
    loaded = inspect_class(Counter, source="test")
    tools = {t.name: t for t in loaded.tools}
    assert list(tools) == ["read", "add", "reset_log"]
    add = tools["add"]
    assert add.description == "Add to the counter."
    assert add.parameters == {
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "description": "How much to add."},
            "note": {"type": ["string", "null"], "description": "Why, for the log."},
            "times": {"type": "integer", "description": "How often.", "default": 1},
        },
        "required": ["amount"],
    }
    assert tools["read"].parameters["properties"] == {}
    assert loaded.writes == {"add", "reset_log"} and loaded.generated == ("log.*",)


def test_reset_and_state_round_trip() -> None:
    env = Counter()
    env.reset(value=3, log=["a"])
    env.add(2, "b")
    snapshot = env.state()
    other = Counter()
    other.reset(**snapshot)
    assert other.state() == snapshot == {"value": 5, "log": ["a", "b"]}


def _catalog(tmp_path: Path, source: str, cls: str = "Bad") -> Path:
    module = tmp_path / "bad_env.py"
    module.write_text(textwrap.dedent(source), encoding="utf-8")
    catalog = tmp_path / "tools.yaml"
    catalog.write_text(f"environments:\n  - class: bad_env.py:{cls}\ntools: []\n",
                       encoding="utf-8")
    return catalog


HEADER = """
    from agentune.tasks.environments.base import Environment
    class Bad(Environment):
        name = "bad"
        def reset(self, **state): pass
        def state(self): return {}
"""


def test_an_untyped_parameter_is_an_error_naming_file_line_and_parameter(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, HEADER + """
        def lookup(self, key) -> str:
            '''Look up.

            Args:
                key: What to look up.
            '''
    """)
    with pytest.raises(InputError) as err:
        load_environments(catalog)
    assert err.value.file.endswith("bad_env.py") and err.value.row == "line 8"
    assert err.value.field == "lookup.key" and "type hint" in str(err.value)


def test_a_docstring_without_an_argument_is_an_error(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, HEADER + """
        def lookup(self, key: str, limit: int) -> str:
            '''Look up.

            Args:
                key: What to look up.
            '''
    """)
    with pytest.raises(InputError) as err:
        load_environments(catalog)
    assert err.value.field == "lookup.limit" and err.value.row == "line 8"


def test_a_users_own_module_binds_from_the_catalog(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "acme_tools"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "crm.py").write_text(textwrap.dedent("""
        from agentune.tasks.environments.base import Environment, writes

        class Crm(Environment):
            name = "crm"
            def reset(self, **state):
                self.notes = list(state.get("notes", []))
            def state(self):
                return {"notes": list(self.notes)}
            @writes
            def add_note(self, text: str) -> int:
                '''Add a note to the CRM.

                Args:
                    text: The note.
                '''
                self.notes.append(text)
                return len(self.notes)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog_file = tmp_path / "tools.yaml"
    catalog_file.write_text("environments:\n  - class: acme_tools.crm:Crm\n    name: crm\n"
                            "tools: []\n")
    catalog = load_environments(catalog_file)
    assert catalog.environments["crm"].tool_names() == ["add_note"]
    session = EnvironmentSession(catalog, "crm", initial_state={"crm": {"notes": ["x"]}})
    assert asyncio.run(session.call("add_note", {"text": "y"}, ToolContext())) == 2
    assert session.state() == {"crm": {"notes": ["x", "y"]}}
    sys.modules.pop("acme_tools.crm", None)
    sys.modules.pop("acme_tools", None)


def test_a_tool_error_is_seen_by_the_agent_and_leaves_the_state() -> None:
    catalog = load_environments(PROJECT_ROOT / "data" / "demo" / "tools.yaml",
                                implementations=ToolsConfig().implementations)
    session = EnvironmentSession(catalog, "shop")
    before = session.state()
    with pytest.raises(ToolFailure, match="only 0 of SKU-MN04 in stock"):
        asyncio.run(session.call("create_order", {"customer_id": "C001", "sku": "SKU-MN04",
                                                  "quantity": 1}, ToolContext()))
    assert session.state() == before


def test_an_argument_the_tool_has_no_name_for_is_the_agents_error_not_a_bug(
        caplog: pytest.LogCaptureFixture) -> None:
    catalog = load_environments(PROJECT_ROOT / "data" / "demo" / "tools.yaml",
                                implementations=ToolsConfig().implementations)
    session = EnvironmentSession(catalog, "shop")
    with pytest.raises(ToolFailure) as failed:
        asyncio.run(session.call("find_customer", {"query": "Ana", "required": ["query"]},
                                 ToolContext()))
    assert failed.value.kind == "invalid_arguments" and "'required'" in str(failed.value.content())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback logged


def test_the_demo_environments() -> None:
    catalog = load_environments(PROJECT_ROOT / "data" / "demo" / "tools.yaml",
                                implementations=ToolsConfig().implementations)
    python = [s for s in catalog.environments.values() if s.kind == "python"]
    assert len(python) >= 3 and sum(len(s.tools) for s in python) + len(
        catalog.environments["utilities"].tools) >= 25
    assert [s.name for s in catalog.environments.values() if s.reserved] == ["helpdesk"]
    for spec in python:
        assert {"en", "zh"} <= set(spec.description), spec.name
        for tool in spec.tools:
            assert any("\u4e00" <= ch <= "\u9fff" for ch in tool.description), tool.name
    assert "helpdesk" not in catalog.training() and "calendar" in catalog.training()
    assert all(t.name not in catalog.environments["helpdesk"].tool_names()
               for t in catalog.training_tools())
