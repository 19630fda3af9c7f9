"""build_preferences: preference pairs from synthesis attempts and the student's own rollouts."""

STAGE = "build_preferences"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
