"""Settings of tool execution: which implementation answers each tool, and within what limits.

A tool of the catalog is answered by the implementation ``implementations`` names for it; a tool
it does not name is simulated by the teacher (unless ``simulate_unbound`` is off). The defaults
fit the demo catalog (data/demo/tools.yaml): the calculator, date tools, unit conversion, the
Python sandbox and the three tools over the bundled document collection run for real; weather,
flights, hotels, calendars, e-mail, contacts, stock quotes, currency rates, translation and
restaurants are simulated.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from agentune.config.inputs import FILE, UNTRACKED
from agentune.config.strict import Strict

TruncateSide = Literal["left", "right", "middle"]
"""Which part of an over-long tool result is cut: its start, its end, or its middle."""

Implementation = Literal[
    "calculator",
    "unit_converter",
    "date_calculator",
    "clock",
    "python_sandbox",
    "document_search",
    "encyclopedia",
    "document_pages",
    "sandbox_fusion",
    "search_r1",
]
HTTP_IMPLEMENTATIONS: frozenset[str] = frozenset({"sandbox_fusion", "search_r1"})

DEMO_IMPLEMENTATIONS: dict[str, Implementation] = {
    "calculator": "calculator",
    "unit_convert": "unit_converter",
    "date_calculate": "date_calculator",
    "get_current_datetime": "clock",
    "run_python": "python_sandbox",
    "web_search": "document_search",
    "encyclopedia_lookup": "encyclopedia",
    "read_webpage": "document_pages",
}


class ToolLimits(Strict):
    """Overrides for one tool; unset fields take the ToolsConfig-wide value."""

    timeout_s: float | None = Field(
        None, gt=0, le=3600, description="Longest one call may run (queueing excluded)."
    )
    max_concurrency: int | None = Field(None, ge=1, le=4096, description="Calls at once.")
    max_tool_response_length: int | None = Field(
        None, ge=16, le=1_000_000, description="Token budget of this tool's observations."
    )
    tool_response_truncate_side: TruncateSide | None = Field(
        None, description="Which part of a long observation is kept: left, right or middle."
    )


class SandboxConfig(Strict):
    """The local Python interpreter tool: a child process per call, confined by bubblewrap
    (read-only minimal root, private /tmp, no network, no capabilities, a process limit) and OS
    limits. ``tools.sandbox: unsafe_local`` is short for ``tools.sandbox: {mode: unsafe_local}``."""

    mode: Literal["bubblewrap", "unsafe_local"] = Field(
        "bubblewrap",
        description="bubblewrap: each program runs under `bwrap` (Debian/Ubuntu package "
        "`bubblewrap`; `make` installs it where it can); where bwrap cannot run, the Python tool "
        "is refused. unsafe_local: only OS limits, a network namespace or audit hook, and "
        "`nobody` when root: the program can read every file its user can; never for code "
        "written by a model you do not trust.",
    )
    max_processes: int = Field(
        64, ge=1, le=4096, description="bubblewrap: processes and threads a program may run at "
        "once (RLIMIT_NPROC of its own user), which stops a fork bomb."
    )

    cpu_time_s: int = Field(10, ge=1, le=3600, description="CPU seconds (RLIMIT_CPU).")
    memory_mb: int = Field(
        1024, ge=64, le=1_048_576, description="Address-space limit in MiB (RLIMIT_AS)."
    )
    wall_time_s: float = Field(
        30,
        gt=0,
        le=3600,
        description="Wall-clock limit; a call's own timeout_seconds argument "
        "may ask for less, never more.",
    )
    max_output_chars: int = Field(
        8000, ge=100, le=10_000_000, description="stdout and stderr are each cut to this length."
    )
    max_file_mb: int = Field(
        16,
        ge=1,
        le=65_536,
        description="Largest file the code may write, its output included (RLIMIT_FSIZE).",
    )
    network_isolation: Literal["auto", "namespace", "audit_hook"] = Field(
        "auto",
        description="unsafe_local only (bubblewrap always has its own network namespace). "
        "namespace: run in a new network namespace (`unshare --net`), where "
        "no interface is up; audit_hook: block sockets and process creation inside the "
        "interpreter (weaker); auto: namespace where the system allows it, else audit_hook.",
    )
    python: str | None = Field(
        None, description="Interpreter to run the code with (default: the one running agentune). "
        "Under bubblewrap its installation folders (prefix, base prefix) are mounted read-only "
        "in the sandbox; nothing else of their parent folders is."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"mode": data}
        return data


class HttpServiceConfig(Strict):
    """A remote tool service: where it is and how hard to push it."""

    url: str = Field(min_length=1, description="Endpoint URL.")
    request_timeout_s: float = Field(30, gt=0, le=3600, description="Per-request HTTP timeout.")
    max_in_flight: int = Field(
        128, ge=1, le=4096, description="Requests in flight at once (MindSpeed-RL `rate_limit`)."
    )
    requests_per_second: float | None = Field(
        None, gt=0, le=100_000, description="Request rate cap (null: none)."
    )
    max_retries: int = Field(3, ge=0, le=20, description="Retries on 429, 5xx and timeouts.")
    backoff_base_s: float = Field(
        0.5, ge=0, le=60, description="First backoff; doubles per retry, with full jitter."
    )
    backoff_max_s: float = Field(8.0, ge=0, le=600, description="Longest single backoff wait.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL, got {url!r}")
        return url


class SandboxFusionConfig(HttpServiceConfig):
    """A SandboxFusion server (`POST /run_code`), as MindSpeed-RL's ReTool uses it."""

    url: str = Field("http://localhost:8080/run_code", min_length=1, description="run_code URL.")
    language: str = Field("python", min_length=1, description="Language sent with the code.")
    run_timeout_s: float = Field(
        30, gt=0, le=3600, description="Run time limit passed to the sandbox (`run_timeout`)."
    )
    compile_timeout_s: float = Field(
        10, gt=0, le=3600, description="Compile time limit passed to the sandbox."
    )
    memory_limit_mb: int = Field(
        1024, ge=-1, le=1_048_576, description="Memory limit passed to the sandbox (-1: none)."
    )
    request_timeout_s: float = Field(
        60,
        gt=0,
        le=3600,
        description="Per-request HTTP timeout; longer than compile plus run "
        "time, so that a slow program is reported by the sandbox instead of retried.",
    )

    @model_validator(mode="after")
    def _request_outlasts_run(self) -> SandboxFusionConfig:
        if self.request_timeout_s <= self.run_timeout_s + self.compile_timeout_s:
            raise ValueError(
                f"request_timeout_s ({self.request_timeout_s:g}) must exceed run_timeout_s + "
                f"compile_timeout_s ({self.run_timeout_s + self.compile_timeout_s:g})"
            )
        return self


class RetrievalConfig(HttpServiceConfig):
    """A search-R1 style retrieval server (`POST /retrieve`)."""

    url: str = Field("http://localhost:8080/retrieve", min_length=1, description="retrieve URL.")
    topk: int = Field(3, ge=1, le=100, description="Results per query when the call sets none.")


class SimulationConfig(Strict):
    """Tools answered by the teacher playing the API (StableToolBench's virtual API server)."""

    error_rate: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of simulated calls answered with an API error instead "
        "(decided per call: the same call always gets the same outcome), so that trajectories "
        "with reflection exist.",
    )
    seed: int = Field(
        0,
        description="Salt of the per-call error draw and of the teacher seed; changing it "
        "changes which calls fail and every simulated answer.",
    )
    max_tokens: int = Field(
        768, ge=32, le=32_768, description="Longest simulated API response, in tokens."
    )
    max_error_chars: int = Field(
        300, ge=20, le=10_000, description="Longest error message the teacher may write."
    )


class ToolsConfig(Strict):
    """How the tools of the catalog are executed, by every stage that runs them."""

    implementations: dict[str, Implementation] = Field(
        default_factory=lambda: dict(DEMO_IMPLEMENTATIONS),
        description="Tool name -> implementation. Real: calculator, unit_converter, "
        "date_calculator, clock, python_sandbox, document_search, encyclopedia, document_pages; "
        "HTTP: sandbox_fusion, search_r1. Names not in the catalog are ignored.",
    )
    simulate_unbound: bool = Field(
        True,
        description="Simulate catalog tools with no implementation (else such a catalog "
        "is refused).",
    )
    documents: Annotated[str, FILE] = Field(
        "data/demo/docs",
        min_length=1,
        description="Folder of the local document collection "
        "(Markdown files with YAML front matter) for the search tools.",
    )
    now: datetime | None = Field(
        None,
        description="Pin the clock the date tools and simulated APIs read (ISO 8601 with "
        "a UTC offset); null: the real clock. Pinning makes tool results reproducible.",
    )
    timeout_s: float = Field(
        30,
        gt=0,
        le=3600,
        description="Time limit per call of real and HTTP tools. Simulated "
        "tools have none by default (the gateway's own timeouts and retries apply).",
    )
    max_concurrency: Annotated[int, UNTRACKED] = Field(8, ge=1, le=4096, description="Calls at once per tool.")
    limits: dict[str, ToolLimits] = Field(
        default_factory=lambda: {"run_python": ToolLimits(timeout_s=60, max_concurrency=2)},
        description="Per-tool overrides of timeout, concurrency and truncation.",
    )
    max_tool_response_length: int = Field(
        512,
        ge=16,
        le=1_000_000,
        description="Token budget of one observation (MindSpeed-RL `max_tool_response_length`).",
    )
    tool_response_truncate_side: TruncateSide = Field(
        "middle",
        description="Which part of a long observation is kept: left (the beginning), "
        "right (the end) or middle (both ends).",
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    sandbox_fusion: SandboxFusionConfig = Field(default_factory=SandboxFusionConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)

    @field_validator("now")
    @classmethod
    def _aware(cls, now: datetime | None) -> datetime | None:
        if now is not None and now.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2025-06-02T09:00:00+08:00")
        return now

    @model_validator(mode="after")
    def _outer_timeouts_fit(self) -> ToolsConfig:
        inner = {
            "python_sandbox": ("environments.tools.sandbox.wall_time_s", self.sandbox.wall_time_s),
            "sandbox_fusion": (
                "environments.tools.sandbox_fusion.request_timeout_s",
                self.sandbox_fusion.request_timeout_s,
            ),
            "search_r1": ("environments.tools.retrieval.request_timeout_s", self.retrieval.request_timeout_s),
        }
        for name, impl in self.implementations.items():
            if impl not in inner:
                continue
            setting, seconds = inner[impl]
            timeout = self.limit(name).timeout_s
            if timeout is not None and timeout < seconds:
                raise ValueError(
                    f"tool {name!r}: its timeout ({timeout:g} s) is shorter than {setting} "
                    f"({seconds:g} s), which could then never act; raise environments.tools.limits.{name}.timeout_s"
                )
        return self

    def limit(self, tool: str, *, simulated: bool = False) -> ToolLimits:
        """The effective limits of ``tool`` (every field set, timeout None for simulated)."""
        own = self.limits.get(tool, ToolLimits())
        return ToolLimits(
            timeout_s=own.timeout_s if own.timeout_s is not None or simulated else self.timeout_s,
            max_concurrency=own.max_concurrency or self.max_concurrency,
            max_tool_response_length=own.max_tool_response_length or self.max_tool_response_length,
            tool_response_truncate_side=own.tool_response_truncate_side or self.tool_response_truncate_side,
        )
