"""Stage 1: seed queries and a tool catalog in; cleaned, grouped, expanded queries out."""

STAGE = "collect_queries"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
