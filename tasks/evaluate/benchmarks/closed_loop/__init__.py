"""The closed loop: every model acting in the scenarios' environments, verified (pass@1, pass^k,
reward per split, kind, language, environment and template group)."""
