"""Stage 1b: scenarios with executed ground truth, from a seed file and from the teacher."""

STAGE = "build_scenarios"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
