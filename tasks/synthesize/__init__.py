"""Stage 3: multi-step tool-use trajectories answered by the teacher and gated."""

STAGE = "synthesize"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
