"""Stage 6: benchmarks answered by every listed model, scored and compared."""

STAGE = "evaluate"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
