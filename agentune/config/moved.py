"""Settings that moved to another section: an old config file still loads, its old keys moved to
their new places with a deprecation warning that names the file."""

from __future__ import annotations

import logging
import warnings
from typing import Any

# ``section.key`` -> where it lives now (``section.key``).
MOVED: dict[str, str] = {
    "queries.tool_catalog": "environments.catalog",
    "synthesis.tools": "environments.tools",
    "evaluate.unseen_templates": "templates.unseen_templates",
}

logger = logging.getLogger(__name__)


def move_old_keys(raw: dict[str, Any], source: str) -> None:
    """Move every old key of ``raw`` (one config file's settings, before ``extends`` merges it)
    to its new place, warning (``DeprecationWarning`` and a log line) for each. A file that gives
    both the old and the new key is refused: a ``ValueError`` naming both."""
    for old, new in MOVED.items():
        old_section, old_key = old.split(".")
        new_section, new_key = new.split(".")
        settings = raw.get(old_section)
        if not isinstance(settings, dict) or old_key not in settings:
            continue
        target = raw.setdefault(new_section, {})
        if not isinstance(target, dict):
            continue  # not a mapping: validation names the field
        if new_key in target:
            raise ValueError(f"{source}: both {old} and {new} are given; {old} is the old name "
                             f"of {new}: keep {new} only")
        target[new_key] = settings.pop(old_key)
        message = f"{source}: {old} is deprecated: it moved to {new} (loaded from there for now)"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        logger.warning(message)
