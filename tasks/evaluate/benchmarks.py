"""The evaluate stage's benchmarks, in the order they run and the report shows them."""

from __future__ import annotations

from typing import Any

from agentune.tasks.evaluate.benchmark import Benchmark
from agentune.tasks.evaluate.bfcl.benchmark import Bfcl
from agentune.tasks.evaluate.closed_loop_benchmark import ClosedLoop
from agentune.tasks.evaluate.kagentbench_benchmark import KAgentBenchSuites
from agentune.tasks.evaluate.tool_retrieval_benchmark import ToolRetrieval

BENCHMARKS: tuple[Benchmark[Any, Any], ...] = (KAgentBenchSuites(), ClosedLoop(), Bfcl(),
                                               ToolRetrieval())
