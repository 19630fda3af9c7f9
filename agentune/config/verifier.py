"""The verifier: how a trajectory's components aggregate into one reward, and when it passes.

One verifier accepts synthesized data, ranks preference pairs, rewards RL and scores evaluation,
so these settings are shared by every stage that uses it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from agentune.config.strict import Strict


class RewardWeights(Strict):
    """Weights of the components in the reward (the agent-tuning plan's defaults)."""

    task_completion: float = Field(0.4, ge=0, le=1, description="End state right and the answer "
                                   "states the required facts (or asks, or declines, as due).")
    tool_accuracy: float = Field(0.25, ge=0, le=1, description="F1 of the calls made against the "
                                 "ground-truth calls (name and arguments).")
    efficiency: float = Field(0.15, ge=0, le=1, description="Steps of the ground truth over the "
                              "steps taken (at most 1).")
    timing_quality: float = Field(0.10, ge=0, le=1, description="Called tools when needed, and "
                                  "not when not (asked first when information was missing).")
    format_compliance: float = Field(0.10, ge=0, le=1, description="Share of steps that parse "
                                     "and call a known tool with schema-valid arguments.")


class Penalties(Strict):
    """Added to the reward once each when the trajectory shows the fault (values <= 0)."""

    wrong_tool: float = Field(-0.3, le=0, description="A call of a tool the task does not need.")
    redundant_call: float = Field(-0.2, le=0, description="The same call made again.")
    format_error: float = Field(-0.1, le=0, description="A step that does not parse, or a call "
                                "of an unknown tool or with invalid arguments.")
    timeout: float = Field(-0.5, le=0, description="Stopped at a cap before answering.")


class VerifierConfig(Strict):
    """Components, reward and pass rule of the one verifier."""

    weights: RewardWeights = Field(default_factory=RewardWeights)
    penalties: Penalties = Field(default_factory=Penalties)
    allow_recovered_errors: bool = Field(
        False, description="Pass a trajectory in which a call failed and the agent recovered "
        "(off: every replayed call must succeed, as in APIGen's execution check).")
    answer_judge: bool = Field(
        False, description="Ask the judge role about facts the normalised match does not find "
        "(two orders of the facts; a fact counts when both say it is stated).")


class RewardTerm(Strict):
    """One reward function of the registry and its weight in the total."""

    name: str = Field(
        min_length=1, description="A built-in reward (verifier, state_match, format, outcome; "
        "retool_reward is outcome's seed-003 name) or a function by import path, "
        "`package.module:function`, called as f(scenario=, rollout=, verdict=) -> float.")
    weight: float = Field(1.0, description="Its weight in the weighted sum of the terms.")


class RewardConfig(Strict):
    """The reward that ranks preference pairs and rewards GRPO: one registry function or a
    weighted list of them. Every term's name, weight and version go into the lineage."""

    functions: list[RewardTerm] = Field(
        default_factory=lambda: [RewardTerm(name="verifier")], min_length=1,
        description="The terms; the reward is sum(weight * term). Default: the verifier's "
        "seed-004 weighted components with penalties.")

    @field_validator("functions", mode="before")
    @classmethod
    def _names_alone(cls, value: Any) -> Any:
        """`functions: [verifier]` or `functions: verifier` is shorthand for weight 1 each."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value
