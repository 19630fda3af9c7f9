"""Stage 4: deduplicated, decontaminated, split, mixed and audited SFT data."""

STAGE = "build_dataset"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
