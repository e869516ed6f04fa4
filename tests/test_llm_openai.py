"""The ``openai_compatible`` provider against a real chat-completions server on loopback
(tests/llm_support.py): whole and streamed answers, retries with backoff and ``Retry-After``,
exhaustion, timeouts, a stream cut short — and the API key never in a log, an error or a repr.

Waits run on a mock clock that jumps ahead once the loop has been idle for 20 ms of real time
(the server answers in far less), so backoffs and timeouts cost no real time and the elapsed
virtual time shows what was waited."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from cortexdb import EngineConfig
from cortexdb.engine.llm import LLMRouter, OpenAICompatibleLLM, api_key, configured
from cortexdb.engine.spi.llm import ANSWER, Completion, Passage, Prompt
from cortexdb.errors import InvalidAnswer, LLMUnavailable

from .llm_support import KEY, chat_server

PASSAGES = (
    Passage("[1]", "fact", "fact_1", "alice lives in Berlin (from 2026-04-15)"),
    Passage("[2]", "event", "evt_2", "My favorite color is blue.", source="alice on 2026-03-02"),
)
PROMPT = Prompt(ANSWER, "What is Alice's favorite color?", PASSAGES, 200)


@pytest.fixture
def virtual_clock():
    return trio.testing.MockClock(autojump_threshold=0.02)


def provider(url: str, **options) -> OpenAICompatibleLLM:
    options = {"base_url": url, "model": "test-model", "api_key": KEY, "timeout": 30.0, "max_retries": 3,
               "backoff": 0.5, "backoff_max": 20.0, **options}  # fmt: skip
    return OpenAICompatibleLLM(**options)


async def test_a_whole_answer_on_the_wire(virtual_clock):
    async with chat_server() as server:
        llm = provider(server.url)
        completion = await llm.complete(PROMPT)
        await llm.aclose()
    assert completion.text == "According to memory, alice on 2026-03-02: My favorite color is blue. [2]"
    assert completion.model == "test-model" and completion.finish_reason == "stop"
    assert completion.usage.counted_by == "provider" and completion.usage.completion == 12
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    body = request["body"]
    assert body["model"] == "test-model" and body["max_tokens"] == 200 and body["temperature"] == 0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "[2] (event) alice on 2026-03-02: My favorite color is blue." in body["messages"][1]["content"]
    assert body["messages"][1]["content"].endswith("Question: What is Alice's favorite color?")


async def test_a_streamed_answer_arrives_piece_by_piece(virtual_clock):
    async with chat_server() as server:
        llm = provider(server.url)
        items = [item async for item in llm.stream(PROMPT)]
        await llm.aclose()
    *pieces, completion = items
    assert isinstance(completion, Completion) and all(isinstance(p, str) for p in pieces)
    assert len(pieces) == 12 and "".join(pieces) == completion.text
    assert completion.text.endswith("blue. [2]")
    assert completion.usage.counted_by == "provider"  # stream_options.include_usage
    body = server.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_a_429_then_success_waits_what_the_server_asks(virtual_clock):
    async with chat_server() as server:
        server.script = [("status", 429, {"Retry-After": "3"}), ("status", 503)]
        llm = provider(server.url)
        started = trio.current_time()
        completion = await llm.complete(PROMPT)
        waited = trio.current_time() - started
        await llm.aclose()
    assert completion.text.endswith("[2]") and len(server.requests) == 3
    # Retry-After 3 s (more than the first backoff, 0.5 s), then the second backoff (1 s)
    assert 4.0 <= waited < 4.5


async def test_a_streamed_answer_is_retried_before_its_first_piece(virtual_clock):
    async with chat_server() as server:
        server.script = [("status", 500), ("status", 429)]
        llm = provider(server.url)
        items = [item async for item in llm.stream(PROMPT)]
        await llm.aclose()
    assert items[-1].text.endswith("[2]") and len(server.requests) == 3


async def test_5xx_exhaustion_is_llm_unavailable(virtual_clock):
    async with chat_server() as server:
        server.script = [("status", 502)] * 10
        llm = provider(server.url, max_retries=2)
        started = trio.current_time()
        with pytest.raises(LLMUnavailable) as failure:
            await llm.complete(PROMPT)
        waited = trio.current_time() - started
        await llm.aclose()
    assert len(server.requests) == 3  # the first attempt and two retries
    assert 1.5 <= waited < 2.0  # 0.5 + 1.0
    error = failure.value
    assert error.http_status == 503 and error.error_code == "LLM_UNAVAILABLE" and error.retriable
    assert error.details == {"provider": "openai_compatible", "model": "test-model", "reason": "server_error",
                             "status": 502, "attempts": 3, "retry_after": None}  # fmt: skip


async def test_a_retry_after_beyond_the_longest_wait_fails_at_once(virtual_clock):
    async with chat_server() as server:
        server.script = [("status", 429, {"Retry-After": "120"})]
        llm = provider(server.url)
        started = trio.current_time()
        with pytest.raises(LLMUnavailable) as failure:
            await llm.complete(PROMPT)
        assert trio.current_time() - started < 0.5
        await llm.aclose()
    assert failure.value.details["reason"] == "overloaded" and failure.value.details["retry_after"] == 120


async def test_a_model_that_does_not_answer_times_out(virtual_clock):
    async with chat_server() as server:
        server.script = [("hang",)]
        llm = provider(server.url, timeout=7.0)
        started = trio.current_time()
        with pytest.raises(LLMUnavailable) as failure:
            await llm.complete(PROMPT)
        waited = trio.current_time() - started
        await llm.aclose()
    assert failure.value.details["reason"] == "timeout" and len(server.requests) == 1  # not retried
    assert 7.0 <= waited < 8.0


async def test_a_stream_cut_short_fails_after_its_pieces(virtual_clock):
    async with chat_server() as server:
        server.script = [("cut", 4)]
        llm = provider(server.url)
        pieces = []
        with pytest.raises(LLMUnavailable) as failure:
            async for item in llm.stream(PROMPT):
                pieces.append(item)
        await llm.aclose()
    assert pieces == ["According", " to", " memory,"]
    assert failure.value.details["reason"] == "connect"


async def test_an_unreachable_endpoint_is_retried_then_unavailable(virtual_clock):
    async with chat_server() as server:
        url = server.url  # the port is free again once the server is gone
    llm = provider(url, max_retries=1)
    with pytest.raises(LLMUnavailable) as failure:
        await llm.complete(PROMPT)
    await llm.aclose()
    assert failure.value.details["reason"] == "connect" and failure.value.details["attempts"] == 2


async def test_the_api_key_is_never_logged_nor_shown(virtual_clock, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    shown: list[str] = []
    async with chat_server() as server:
        llm = provider(server.url, max_retries=1)
        shown.append(repr(llm))
        for script in ([("status", 401)], [("status", 500)] * 2, [("hang",)], [("cut", 2)]):
            server.script = list(script)
            llm = provider(server.url, max_retries=1, timeout=5.0)
            with pytest.raises(LLMUnavailable) as failure:
                [item async for item in llm.stream(PROMPT)]
            await llm.aclose()
            error = failure.value
            shown += [str(error), repr(error), repr(error.details), repr(error.to_envelope("req_1"))]
        assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # it was sent
    assert failure.value.details["reason"] == "connect"
    rejected = [text for text in shown if "rejected" in text]
    assert rejected and "invalid_api_key" in rejected[0]  # the provider's error code, not its message
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    config = EngineConfig(llm_provider="openai_compatible", llm_model="m", llm_base_url="http://127.0.0.1:9/v1",
                          llm_api_key_file=str(key_file))  # fmt: skip
    assert api_key(config) == KEY
    shown += [repr(config), repr(configured(config)[0])]
    records = "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records)
    assert caplog.records  # the failures were logged...
    assert KEY not in records and KEY not in caplog.text  # ...without the key
    assert not [text for text in shown if KEY in text]


def test_the_key_comes_from_a_file_or_an_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_LLM_KEY", "from-env")
    assert api_key(EngineConfig(llm_api_key_env="MY_LLM_KEY")) == "from-env"
    assert api_key(EngineConfig(llm_api_key_env="")) is None
    (tmp_path / "k").write_text("  from-file\n")
    assert api_key(EngineConfig(llm_api_key_env="MY_LLM_KEY", llm_api_key_file=str(tmp_path / "k"))) == "from-file"
    with pytest.raises(LLMUnavailable) as missing:
        api_key(EngineConfig(llm_api_key_file=str(tmp_path / "absent")))
    assert missing.value.details["reason"] == "configuration" and not missing.value.retriable
    with pytest.raises(LLMUnavailable) as incomplete:
        configured(EngineConfig(llm_provider="openai_compatible", llm_model="m"))
    assert incomplete.value.details["setting"] == "llm_base_url"


async def test_the_router_serves_the_configured_models_and_extractive():
    config = EngineConfig(llm_provider="openai_compatible", llm_model="big", llm_models=("small", "big"),
                          llm_base_url="http://127.0.0.1:9/v1", llm_api_key_env="")  # fmt: skip
    router = LLMRouter.open(config)
    assert router.available() == ["big", "small", "extractive"]
    assert router.route(None) is router.route("big") and router.route("small").model == "small"
    assert router.route("extractive").provider == "extractive"
    with pytest.raises(InvalidAnswer) as unknown:
        router.route("gpt-9")
    assert unknown.value.http_status == 422
    assert unknown.value.details == {"field": "answer_model", "available": ["big", "small", "extractive"],
                                     "reason": unknown.value.details["reason"]}  # fmt: skip
    await router.aclose()
    offline = LLMRouter.open(EngineConfig())
    assert offline.available() == ["extractive"] and offline.default.provider == "extractive"
