"""The base of every configuration model (its own module, so the config sections that live
beside their code in ``agentune.tasks`` can use it without importing the whole run config)."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown keys are errors (a typo in the YAML names its field) and assignments validate."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# A datetime field's JSON schema says `format: date-time`, which the Prefect UI checks but the
# Prefect server does not (it validates run parameters without a format checker); this pattern,
# which both check, makes the server refuse a time without its UTC offset too, naming the field.
UTC_OFFSET_PATTERN = {"pattern": r"(Z|z|[+-]\d{2}:\d{2})$"}
