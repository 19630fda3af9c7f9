"""HTTP tool clients (SandboxFusion `/run_code`, search-R1 `/retrieve`) against loopback servers:
answers, retries on 429 and 5xx, timeouts, rate and concurrency limits, through the executor."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentune.config.tools import RetrievalConfig, SandboxFusionConfig, ToolsConfig
from agentune.tasks.tools.catalog import load_tool_catalog
from agentune.tasks.tools.documents import DocumentIndex
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.tools.observation import Observation

from support.json_server import JsonReply, JsonTestServer, Stall

CATALOG = {tool.name: tool for tool in load_tool_catalog("data/demo/tools.yaml")}
FAST_RETRY = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}


def run_code_answer(
    stdout: str = "",
    stderr: str = "",
    *,
    status: str = "Success",
    run_status: str = "Finished",
    return_code: int = 0,
) -> dict[str, Any]:
    return {
        "status": status,
        "message": "",
        "compile_result": None,
        "run_result": {
            "status": run_status,
            "execution_time": 0.01,
            "return_code": return_code,
            "stdout": stdout,
            "stderr": stderr,
        },
        "executor_pod_name": None,
        "files": {},
    }


def executor(server: JsonTestServer, **settings: Any) -> ToolExecutor:
    fusion = {"url": server.url("/run_code"), **FAST_RETRY, **settings.pop("fusion", {})}
    retrieval = {"url": server.url("/retrieve"), **FAST_RETRY, **settings.pop("retrieval", {})}
    config = ToolsConfig(
        implementations={"run_python": "sandbox_fusion", "web_search": "search_r1"},
        sandbox_fusion=SandboxFusionConfig(**fusion),
        retrieval=RetrievalConfig(**retrieval),
        **settings,
    )
    return ToolExecutor([CATALOG["run_python"], CATALOG["web_search"]], config)


async def run_python(
    server: JsonTestServer, code: str = "print(1)", **settings: Any
) -> Observation:
    async with executor(server, **settings) as tools:
        return await tools.execute("run_python", {"code": code, "timeout_seconds": 5})


async def test_run_code_success_and_request_shape() -> None:
    with JsonTestServer({"/run_code": [JsonReply(run_code_answer("3\n"))]}) as srv:
        obs = await run_python(srv, "print(1 + 2)", fusion={"memory_limit_mb": 512})
        assert obs.ok and obs.kind == "http" and obs.error_kind is None
        assert obs.content == '{"stdout": "3\\n"}'
        (body,) = srv.requests["/run_code"]
        assert body["code"] == "print(1 + 2)" and body["language"] == "python"
        assert body["run_timeout"] == 5 and body["compile_timeout"] == 10
        assert body["memory_limit_MB"] == 512
        assert body["files"] == {} and body["fetch_files"] == [] and body["stdin"] == ""


async def test_run_code_failures_become_observations() -> None:
    script = [
        JsonReply(
            run_code_answer(
                stderr="Traceback ...\nNameError: name 'x' is not defined",
                status="Failed",
                return_code=1,
            )
        ),
        JsonReply(run_code_answer(status="Failed", run_status="TimeLimitExceeded", return_code=-1)),
        JsonReply(
            {"status": "SandboxError", "message": "no runtime for language", "run_result": None}
        ),
        JsonReply({"unexpected": True}),
    ]
    with JsonTestServer({"/run_code": script}) as srv:
        async with executor(srv) as tools:
            error = await tools.execute("run_python", {"code": "x"})
            slow = await tools.execute("run_python", {"code": "while True: pass"})
            broken = await tools.execute("run_python", {"code": "print()"})
            garbage = await tools.execute("run_python", {"code": "print(2)"})
    assert (error.ok, error.error_kind) == (False, "execution")
    assert "NameError: name 'x' is not defined" in error.content
    assert slow.error_kind == "timeout"
    assert broken.error_kind == "http" and "no runtime for language" in broken.content
    assert garbage.error_kind == "http" and "not a run_code answer" in garbage.content


async def test_429_is_retried_after_the_servers_wait() -> None:
    script = [
        JsonReply({"error": "busy"}, status=429, headers={"Retry-After": "0.4"}),
        JsonReply(run_code_answer("ok\n")),
    ]
    with JsonTestServer({"/run_code": script}) as srv:
        started = time.monotonic()
        obs = await run_python(srv)
        assert obs.ok and len(srv.requests["/run_code"]) == 2
        assert time.monotonic() - started >= 0.4


async def test_429_until_retries_run_out_is_rate_limited() -> None:
    busy = JsonReply({"error": "busy"}, status=429)
    with JsonTestServer({"/run_code": lambda body, n: busy}) as srv:
        obs = await run_python(srv, fusion={"max_retries": 2})
        assert obs.error_kind == "rate_limited" and "gave up after 3 attempts" in obs.content
        assert len(srv.requests["/run_code"]) == 3


async def test_5xx_is_retried_then_succeeds_or_gives_up() -> None:
    flaky = [
        JsonReply({"detail": "down"}, status=503),
        JsonReply({"detail": "down"}, status=502),
        JsonReply(run_code_answer("fine\n")),
    ]
    with JsonTestServer({"/run_code": flaky}) as srv:
        obs = await run_python(srv)
        assert obs.ok and len(srv.requests["/run_code"]) == 3
    broken = JsonReply({"detail": "boom"}, status=500)
    with JsonTestServer({"/run_code": lambda body, n: broken}) as srv:
        obs = await run_python(srv, fusion={"max_retries": 1})
        assert obs.error_kind == "http" and "HTTP 500" in obs.content
        assert len(srv.requests["/run_code"]) == 2


async def test_4xx_is_not_retried() -> None:
    with JsonTestServer({"/run_code": [JsonReply({"detail": "bad request"}, status=400)]}) as srv:
        obs = await run_python(srv)
        assert obs.error_kind == "http" and "HTTP 400" in obs.content
        assert len(srv.requests["/run_code"]) == 1


async def test_timeout_is_retried_then_reported() -> None:
    with JsonTestServer({"/run_code": lambda body, n: Stall(10)}) as srv:
        started = time.monotonic()
        obs = await run_python(
            srv,
            fusion={
                "request_timeout_s": 0.3,
                "run_timeout_s": 0.1,
                "compile_timeout_s": 0.1,
                "max_retries": 1,
            },
        )
        assert obs.error_kind == "timeout" and "did not answer within 0.3 s" in obs.content
        assert len(srv.requests["/run_code"]) == 2
        assert time.monotonic() - started < 3


async def test_the_executor_time_limit_bounds_all_retries() -> None:
    with JsonTestServer({"/run_code": lambda body, n: Stall(10)}) as srv:
        started = time.monotonic()
        obs = await run_python(
            srv,
            fusion={
                "request_timeout_s": 0.5,
                "run_timeout_s": 0.1,
                "compile_timeout_s": 0.1,
                "max_retries": 10,
            },
            limits={"run_python": {"timeout_s": 0.8}},
        )
        assert obs.error_kind == "timeout" and "within 0.8 s" in obs.content
        assert time.monotonic() - started < 3


async def test_rate_and_concurrency_limits() -> None:
    answer = JsonReply(run_code_answer("x\n"))
    with JsonTestServer({"/run_code": lambda body, n: answer}) as srv:
        started = time.monotonic()
        async with executor(srv, fusion={"requests_per_second": 2}, max_concurrency=16) as tools:
            results = await asyncio.gather(
                *(tools.execute("run_python", {"code": f"print({i})"}) for i in range(4))
            )
        assert all(o.ok for o in results)
        # A bucket of two per second: two at once, then one every half second.
        assert time.monotonic() - started >= 0.9
    slow = Stall(0.25, JsonReply(run_code_answer("y\n")))
    with JsonTestServer({"/run_code": lambda body, n: slow}) as srv:
        started = time.monotonic()
        async with executor(srv, fusion={"max_in_flight": 1}, max_concurrency=16) as tools:
            results = await asyncio.gather(
                *(tools.execute("run_python", {"code": f"print({i})"}) for i in range(3))
            )
        assert all(o.ok for o in results)
        assert time.monotonic() - started >= 0.7  # one at a time


@pytest.fixture(scope="module")
def index() -> DocumentIndex:
    return DocumentIndex.from_folder("data/demo/docs")


def search_r1_server(index: DocumentIndex, *, scores: bool = True):
    """A /retrieve endpoint in search-R1's format, answering from the demo collection."""

    def answer(body: dict[str, Any], n: int) -> JsonReply:
        result = []
        for query in body["queries"]:
            hits = index.search(query, body["topk"])
            docs = [
                {"id": h.document.id, "contents": f'"{h.document.title}"\n{h.document.summary}'}
                for h in hits
            ]
            if body.get("return_scores") and scores:
                result.append(
                    [{"document": d, "score": h.score} for d, h in zip(docs, hits, strict=True)]
                )
            else:
                result.append(docs)
        return JsonReply({"result": result})

    return answer


async def test_retrieve_client_reads_search_r1_answers(index: DocumentIndex) -> None:
    with JsonTestServer({"/retrieve": search_r1_server(index)}) as srv:
        async with executor(srv) as tools:
            obs = await tools.execute(
                "web_search", {"query": "Rosetta Stone hieroglyphs", "num_results": 2}
            )
        assert obs.ok and obs.kind == "http"
        assert srv.requests["/retrieve"] == [
            {"queries": ["Rosetta Stone hieroglyphs"], "topk": 2, "return_scores": True}
        ]
        import json

        results = json.loads(obs.content)["results"]
        assert results[0]["title"] == "Rosetta Stone" and results[0]["id"] == "enc-rosetta-stone-en"
        assert "Ptolemy V" in results[0]["snippet"] and results[0]["score"] > 0
    with JsonTestServer({"/retrieve": search_r1_server(index, scores=False)}) as srv:
        async with executor(srv) as tools:
            obs = await tools.execute("web_search", {"query": "Canberra capital"})
        assert obs.ok and '"title": "Canberra"' in obs.content and '"score"' not in obs.content
    with JsonTestServer({"/retrieve": [JsonReply({"result": "nope"})]}) as srv:
        async with executor(srv) as tools:
            obs = await tools.execute("web_search", {"query": "anything"})
        assert obs.error_kind == "http" and "not a retrieve answer" in obs.content


async def test_unreachable_service_is_an_observation() -> None:
    with JsonTestServer({"/other": []}) as srv:
        port = srv.port
    config = ToolsConfig(
        implementations={"web_search": "search_r1"},
        retrieval=RetrievalConfig(
            url=f"http://127.0.0.1:{port}/retrieve", max_retries=1, **FAST_RETRY
        ),
    )
    async with ToolExecutor([CATALOG["web_search"]], config) as tools:
        obs = await tools.execute("web_search", {"query": "x"})
    assert obs.error_kind == "http" and "cannot reach" in obs.content
