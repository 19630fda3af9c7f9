"""Prefect flows: orchestration only. Each stage flow runs alone or as a step of `pipeline`."""

from agentune.flows.pipeline import STAGES, pipeline

# What `agentune run` accepts: every stage by name, and the whole pipeline.
RUNNABLE = {**STAGES, "pipeline": pipeline}

__all__ = ["RUNNABLE", "STAGES", "pipeline"]
