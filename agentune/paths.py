"""Where agentune's own files live, for an editable checkout and an installed wheel alike."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# In a checkout the project root holds flows/, tasks/, templates/, data/, models/ beside agentune/.
PROJECT_ROOT = PACKAGE_DIR.parent


def templates_dir() -> Path:
    """The Jinja2 prompt templates shipped with the package (``templates/`` in the checkout)."""
    return Path(str(files("agentune.templates")))


def models_dir() -> Path:
    """Where converted base models and DeepSpeed configs live (``models/`` in the checkout).

    ``AGENTUNE_MODELS_DIR`` overrides it, for installs outside a checkout.
    """
    return Path(os.environ.get("AGENTUNE_MODELS_DIR", PROJECT_ROOT / "models"))
