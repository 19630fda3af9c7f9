"""The evaluate stage's benchmarks, in the order they run and the report shows them."""

from __future__ import annotations

from typing import Any

from agentune.tasks.evaluate.benchmark import Benchmark
from agentune.tasks.evaluate.benchmarks.bfcl.benchmark import Bfcl
from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import ClosedLoop
from agentune.tasks.evaluate.benchmarks.kagentbench.benchmark import KAgentBenchSuites
from agentune.tasks.evaluate.benchmarks.tool_retrieval.benchmark import ToolRetrieval

BENCHMARKS: tuple[Benchmark[Any, Any], ...] = (KAgentBenchSuites(), ClosedLoop(), Bfcl(),
                                               ToolRetrieval())
