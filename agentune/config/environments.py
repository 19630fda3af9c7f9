"""The tool environments every stage that runs or reads tools shares: the catalog that defines
them and how their tools are executed."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentune.config.inputs import RESOLVED
from agentune.config.strict import Strict
from agentune.config.tools import ToolsConfig


class EnvironmentsConfig(Strict):
    """The tool environments: one catalog file (its tools and the environments bound in it) and
    the execution settings of its tools, the same for every stage that acts in them."""

    catalog: Annotated[str, RESOLVED] = Field(
        "data/demo/tools.yaml",
        min_length=1,
        description="Tool catalog in the OpenAI function-tool schema (.yaml, .yml, .json, "
        ".jsonl), with the environments bound in it.",
    )
    tools: ToolsConfig = Field(
        default_factory=ToolsConfig,
        description="How the catalog's tools are executed: real, HTTP or simulated, with limits.",
    )
