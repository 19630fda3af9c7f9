"""The demo's retrieval cases and a tiny random encoder folder, once per test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.retrieval_cases import demo_cases, tiny_encoder_folder


@pytest.fixture(scope="module")
def demo():
    return demo_cases()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, demo) -> Path:
    catalog, cases = demo
    return tiny_encoder_folder(tmp_path_factory.mktemp("encoder") / "tiny", catalog, cases)
