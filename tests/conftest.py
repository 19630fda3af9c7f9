"""Shared fixtures. Prefect runs against an isolated, temporary API (never ~/.prefect)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.openai_server import OpenAITestServer
from support.tiny_train_model import make_tiny_model

# Before anything imports prefect: a throwaway home, so tests never touch a user's Prefect DB.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="agentune-prefect-"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random tiny Llama of support/tiny_train_model.py, made once per test module."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    """An isolated Prefect API (ephemeral server on a temporary database) for flow tests."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with tempfile.TemporaryDirectory(prefix="agentune-results-") as results:
        with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: results}):
            with prefect_test_harness(server_startup_timeout=120):
                yield


# --- OpenAI-compatible test server (tests/support/openai_server.py) --------------------------


@pytest.fixture
def openai_server() -> Iterator[Callable[..., OpenAITestServer]]:
    """Start scripted OpenAI-compatible servers: ``srv = openai_server([Reply("hi")])``.

    Takes ``OpenAITestServer``'s arguments; every server started is stopped at teardown.
    """
    servers: list[OpenAITestServer] = []

    def start(*args: Any, **kwargs: Any) -> OpenAITestServer:
        server = OpenAITestServer(*args, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


# --- end of the OpenAI test server block ------------------------------------------------------
