"""A user's reward function, selected by import path (support.custom_reward:calls_made)."""

from __future__ import annotations

__version__ = "2"


def calls_made(*, scenario, rollout, verdict) -> float:
    """Minus one tenth per call: a toy cost on tool use."""
    return -0.1 * len(rollout.calls()) if rollout is not None else 0.0


def no_keywords(x):
    return 0.0
