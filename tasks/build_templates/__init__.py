"""Stage 2: Meta-Agent prompt templates written, structurally filtered and judged."""

STAGE = "build_templates"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
