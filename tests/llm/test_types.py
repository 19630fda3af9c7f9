"""The gateway's request: a penalty of 0 is no penalty, so it asks and caches as one left out."""

from __future__ import annotations

from agentune.tasks.llm.types import ChatRequest

MESSAGES = [{"role": "user", "content": "hi"}]


def test_a_zero_penalty_is_the_same_request_as_none() -> None:
    plain = ChatRequest(messages=MESSAGES)
    for zero in (0, 0.0, -0.0):
        for field in ("frequency_penalty", "presence_penalty"):
            request = ChatRequest(messages=MESSAGES, **{field: zero})
            assert request.model_dump() == plain.model_dump()
            assert request.body_json() == plain.body_json()
            assert request.cache_key("p", "m") == plain.cache_key("p", "m")
            assert request.cache_key("p", "m").legacy() == plain.cache_key("p", "m").legacy()


def test_a_penalty_that_is_not_zero_is_sent_as_given() -> None:
    request = ChatRequest(messages=MESSAGES, frequency_penalty=0.5, presence_penalty=-1)
    assert (request.frequency_penalty, request.presence_penalty) == (0.5, -1.0)
    assert b'"frequency_penalty":0.5' in request.body_json()
    assert request.cache_key("p", "m") != ChatRequest(messages=MESSAGES).cache_key("p", "m")
