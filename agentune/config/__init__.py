"""The run configuration: one YAML file, validated by pydantic, doubling as the flows' parameters.

One module per stage, in pipeline order (``collect_queries`` ... ``evaluate``), each with its
``READS`` (what the stage reads of the run config), plus the shared sections (``llm``, ``store``,
``environments`` with its ``tools``, ``runner``), the keys that moved (``moved``) and the root
(``run``). Every model forbids unknown keys, so a typo in the YAML is an error naming the field
instead of a silently ignored setting. Field descriptions, declared beside their fields, are the
text the Prefect UI shows in its forms. Relative paths resolve against the current working
directory (the project root in every documented way of running agentune: the CLI, ``make demo`` and
Prefect deployments).

This package is a leaf: it imports nothing from ``agentune.tasks`` or ``agentune.flows``.
"""

from agentune.config.run import ConfigError, RunConfig, load_config

__all__ = ["ConfigError", "RunConfig", "load_config"]
