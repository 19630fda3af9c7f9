"""The Python interpreter tool on a SandboxFusion server (``POST /run_code``).

Request: ``{"code", "language", "compile_timeout", "run_timeout", "memory_limit_MB", "stdin",
"files", "fetch_files"}``. Answer: ``{"status": "Success" | "Failed" | "SandboxError", "message",
"compile_result", "run_result": {"status": "Finished" | "Error" | "TimeLimitExceeded",
"execution_time", "return_code", "stdout", "stderr"}, "files"}``. The observation has the same
shape as the local sandbox's (``stdout``, ``stderr``), so the agent cannot tell them apart.
"""

from __future__ import annotations

from typing import Any

from agentune.config.tools import SandboxFusionConfig
from agentune.tasks.tools.http import HttpToolService
from agentune.tasks.tools.observation import ToolContext, ToolFailure, ToolKind


def run_code_request(
    config: SandboxFusionConfig, code: str, run_timeout_s: float | None = None
) -> dict[str, Any]:
    return {
        "code": code,
        "language": config.language,
        "compile_timeout": config.compile_timeout_s,
        "run_timeout": min(run_timeout_s or config.run_timeout_s, config.run_timeout_s),
        "memory_limit_MB": config.memory_limit_mb,
        "stdin": "",
        "files": {},
        "fetch_files": [],
    }


def read_run_code_answer(answer: Any, url: str) -> dict[str, Any]:
    """The observation payload of a ``/run_code`` answer; raises ToolFailure for failed runs."""
    if not isinstance(answer, dict) or "status" not in answer:
        raise ToolFailure("http", f"{url}: not a run_code answer: {str(answer)[:200]}")
    if answer["status"] == "SandboxError":
        raise ToolFailure("http", f"{url}: sandbox error: {answer.get('message') or 'no message'}")
    compiled = answer.get("compile_result") or {}
    run = answer.get("run_result") or {}
    output: dict[str, Any] = {"stdout": run.get("stdout") or ""}
    stderr = (run.get("stderr") or "") or (compiled.get("stderr") or "")
    if stderr:
        output["stderr"] = stderr
    if answer["status"] == "Success":
        return output
    if run.get("status") == "TimeLimitExceeded" or compiled.get("status") == "TimeLimitExceeded":
        raise ToolFailure(
            "timeout", "the program did not finish within its time limit", details=output
        )
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else f"exit status {run.get('return_code')}"
    raise ToolFailure("execution", reason, details=output)


class SandboxFusionInterpreter:
    """Backend of a catalog tool with ``code`` and optional ``timeout_seconds`` arguments."""

    kind: ToolKind = "http"
    required: tuple[str, ...] = ("code",)

    def __init__(self, config: SandboxFusionConfig) -> None:
        self.config = config
        self.service = HttpToolService(config)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        timeout = arguments.get("timeout_seconds")
        body = run_code_request(self.config, str(arguments["code"]), timeout)
        return read_run_code_answer(await self.service.post(body), self.config.url)

    async def aclose(self) -> None:
        await self.service.aclose()
