"""agentune: Meta-Agent Tuning (KwaiAgents MAT) as a Prefect pipeline."""

import os

# Offline-friendly Prefect defaults, set before anything imports prefect: the
# ephemeral API server needs longer than its 20 s default on a loaded 2-core machine, and the
# server must not try to send telemetry from a machine without internet. Explicit settings win.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

__version__ = "0.1.0"
