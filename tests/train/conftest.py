"""The train tests' store: the tiny SFT rows and preference pairs, published."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentune.tasks.common.schemas import PREFERENCE_FEATURES, SFT_FEATURES
from agentune.tasks.store.artifact_store import ArtifactStore

from support.preference_pairs import preference_rows
from support.tiny_train_model import sft_rows


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    store = ArtifactStore(tmp_path / "store")
    store.publish("sft_dataset", sft_rows(), features=SFT_FEATURES)
    store.publish("preferences", preference_rows(copies=2), features=PREFERENCE_FEATURES)
    return store
