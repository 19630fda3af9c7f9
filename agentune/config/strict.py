"""The base of every configuration model (its own module, so the config sections that live
beside their code in ``agentune.tasks`` can use it without importing the whole run config)."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown keys are errors (a typo in the YAML names its field) and assignments validate."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
