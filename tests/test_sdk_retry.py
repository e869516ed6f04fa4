"""The SDK's retries, error mapping and lifecycle resume, against scripted answers
(``httpx.MockTransport``): deterministic — the sleep, the jitter and the clock are injected, so
no test waits and every pause is asserted."""

from __future__ import annotations

import datetime as dt
import email.utils
import json

import httpx
import pytest

from cortexdb.client import AsyncCortexClient, CortexClient, LifecycleEvent
from cortexdb.errors import (
    ConnectionFailed,
    CortexError,
    Internal,
    PolicyDenied,
    RateLimited,
    WalUnavailable,
)

from .sdk_support import NOW, Sleeps

URL = "http://cortex.test"


def envelope(code: str, status: int, retriable: bool, **extra) -> httpx.Response:
    body = {"error_code": code, "message": code.lower(), "request_id": f"req_{code.lower()}", "retriable": retriable}
    return httpx.Response(status, json=body, headers={"X-Cortex-Request-ID": body["request_id"], **extra})


class Script:
    """Answers requests from a list (a Response, or an exception to raise); records requests."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def bodies(self) -> list[dict]:
        return [json.loads(r.content) for r in self.requests]


def client(script: Script, sleeps: Sleeps, **kw) -> CortexClient:
    return CortexClient(URL, transport=httpx.MockTransport(script), sleep=sleeps, jitter=lambda: 0.5,
                        now=lambda: NOW, actor="user:alice", **kw)  # fmt: skip


OK_SCOPE = httpx.Response(201, json={"path": "ws:q3", "members": []})
OK_PAGE = httpx.Response(200, json={"items": [{"id": "evt_1"}], "has_more": False, "next_cursor": None})


def test_a_429_is_retried_after_retry_after_even_for_an_unkeyed_post():
    """A 429 is refused before the request runs: repeating any call is safe."""
    script, sleeps = Script(envelope("RATE_LIMITED", 429, True, **{"Retry-After": "2"}),
                            envelope("RATE_LIMITED", 429, True, **{"Retry-After": "1"}), OK_SCOPE), Sleeps()  # fmt: skip
    scope = client(script, sleeps).scopes.register("ws:q3")
    assert scope.path == "ws:q3" and sleeps.pauses == [2.0, 1.0] and len(script.requests) == 3


def test_a_503_is_retried_with_jittered_exponential_backoff_only_when_safe():
    script, sleeps = Script(envelope("WAL_UNAVAILABLE", 503, True), envelope("WAL_UNAVAILABLE", 503, True),
                            OK_PAGE), Sleeps()  # fmt: skip
    page = client(script, sleeps).events(scope="org:acme")
    assert [e.id for e in page] == ["evt_1"]
    assert sleeps.pauses == [0.25, 0.5]  # uniform(0, 0.5·2^attempt) with the jitter at 0.5
    unsafe, sleeps = Script(envelope("WAL_UNAVAILABLE", 503, True)), Sleeps()
    with pytest.raises(WalUnavailable):  # registering is not idempotent: not repeated
        client(unsafe, sleeps).scopes.register("ws:q3")
    assert len(unsafe.requests) == 1 and sleeps.pauses == []


def test_a_write_keeps_its_idempotency_key_across_retries():
    receipt = {"event_id": "evt_1", "status": "captured", "wal_offset": 1, "lifecycle_stream": "/x"}
    script, sleeps = Script(httpx.ReadError("connection reset"), envelope("INTERNAL", 500, True),
                            httpx.Response(202, json=receipt, headers={"X-Cortex-Replay": "true"})), Sleeps()  # fmt: skip
    result = client(script, sleeps).experience("Alice likes tea", scope="org:acme/user:alice")
    keys = {body["idempotency_key"] for body in script.bodies()}
    assert len(script.requests) == 3 and len(keys) == 1 and keys.pop().startswith("sdk-")
    assert result.replay and result.event_id == "evt_1" and sleeps.pauses == [0.25, 0.5]
    assert script.bodies()[0]["context"]["observed_at"] == "2026-05-13T15:42:09.000Z"


def test_a_lost_answer_to_an_unkeyed_post_is_raised_but_an_unsent_request_is_retried():
    script, sleeps = Script(httpx.ReadError("reset after sending")), Sleeps()
    with pytest.raises(ConnectionFailed) as failed:
        client(script, sleeps).scopes.register("ws:q3")
    assert failed.value.retriable and failed.value.error_code == "CONNECTION_FAILED"
    assert isinstance(failed.value.__cause__, httpx.ReadError) and len(script.requests) == 1
    script, sleeps = Script(httpx.ConnectError("refused"), OK_SCOPE), Sleeps()
    assert client(script, sleeps).scopes.register("ws:q3").path == "ws:q3" and sleeps.pauses == [0.25]


def test_retries_stop_at_max_retries_with_the_typed_error():
    script, sleeps = Script(*[envelope("WAL_UNAVAILABLE", 503, True) for _ in range(3)]), Sleeps()
    with pytest.raises(WalUnavailable) as failed:
        client(script, sleeps, max_retries=2).events(scope="org:acme")
    error = failed.value
    assert (error.error_code, error.retriable, error.http_status, error.request_id) == \
        ("WAL_UNAVAILABLE", True, 503, "req_wal_unavailable")  # fmt: skip
    assert len(script.requests) == 3 and sleeps.pauses == [0.25, 0.5]
    script, sleeps = Script(httpx.ConnectError("refused")), Sleeps()
    with pytest.raises(ConnectionFailed):
        client(script, sleeps, max_retries=0).events(scope="org:acme")
    assert sleeps.pauses == []


def test_a_retry_after_beyond_the_limit_is_raised_not_waited():
    script, sleeps = Script(envelope("RATE_LIMITED", 429, True, **{"Retry-After": "3600"})), Sleeps()
    with pytest.raises(RateLimited) as limited:
        client(script, sleeps).events(scope="org:acme")
    assert limited.value.retry_after == 3600.0 and sleeps.pauses == []


def test_retry_after_as_an_http_date():
    later = email.utils.format_datetime(NOW + dt.timedelta(seconds=5), usegmt=True)
    script, sleeps = Script(envelope("RATE_LIMITED", 429, True, **{"Retry-After": later}), OK_PAGE), Sleeps()
    client(script, sleeps).events(scope="org:acme")
    assert sleeps.pauses == [5.0]


def test_errors_are_the_servers_classes_with_code_request_id_and_details():
    denied = envelope("POLICY_DENIED", 403, False)
    body = json.loads(denied.content) | {"details": {"capability": "scope.write", "denied_by_tier": "token"}}
    script, sleeps = Script(httpx.Response(403, json=body, headers={"X-Cortex-Request-ID": "req_x"})), Sleeps()
    with pytest.raises(PolicyDenied) as failed:
        client(script, sleeps).experience("x", scope="org:acme")
    assert failed.value.details["denied_by_tier"] == "token" and failed.value.request_id == "req_policy_denied"
    newer = httpx.Response(409, json={"error_code": "SOMETHING_NEW", "message": "m", "request_id": "r", "retriable": False})
    for answer, kind, code in ((newer, CortexError, "SOMETHING_NEW"), (envelope("INTERNAL", 500, False), Internal, "INTERNAL"),
                               (httpx.Response(502, text="<html>bad gateway</html>",
                                               headers={"X-Cortex-Request-ID": "req_gw"}), CortexError, "INTERNAL")):  # fmt: skip
        script = Script(answer, answer, answer, answer)
        with pytest.raises(kind) as failed:
            client(script, Sleeps()).scopes.register("ws:q3")
        assert failed.value.error_code == code and failed.value.http_status == answer.status_code
    assert failed.value.request_id == "req_gw" and failed.value.retriable  # a 5xx without an envelope


def sse(*frames: tuple[str | None, str, dict], then: Exception | None = None):
    """A streamed SSE body of ``frames``, then ``then`` raised mid-stream (a dropped connection)."""

    def chunks():
        yield b": keep-alive\n\n"
        for lce, event, data in frames:
            yield (f"id: {lce}\n" if lce else "").encode() + f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        if then is not None:
            raise then

    return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=chunks())


def frame(n: int, stage: str = "captured") -> tuple[str, str, dict]:
    return f"lce_{n}", stage, {"lifecycle_id": f"lce_{n}", "stage": stage, "event_id": f"evt_{n}", "payload": {}}


def test_the_lifecycle_feed_resumes_from_the_last_id_after_a_drop_and_after_lagging():
    script = Script(sse(frame(1), frame(2), then=httpx.RemoteProtocolError("peer closed")),
                    sse(frame(3), (None, "lagging", {"behind": 9})),
                    sse(frame(4), (None, "policy_revoked", {"reason": "gone"})))  # fmt: skip
    sleeps = Sleeps()
    seen = list(client(script, sleeps).lifecycle(scope="org:acme", since_lifecycle_id="lce_0"))
    assert [(e.event, e.lifecycle_id) for e in seen] == [("captured", "lce_1"), ("captured", "lce_2"),
                                                          ("captured", "lce_3"), ("captured", "lce_4"),
                                                          ("policy_revoked", None)]  # fmt: skip
    assert [r.headers.get("Last-Event-ID") for r in script.requests] == ["lce_0", "lce_2", "lce_3"]
    assert all(r.url.params["scope"] == "org:acme" for r in script.requests)
    assert sleeps.pauses == [0.25]  # after the drop; a `lagging` reconnects at once
    assert isinstance(seen[0], LifecycleEvent) and seen[0].event_id == "evt_1"


def test_the_lifecycle_feed_gives_up_after_its_reconnects():
    drops = [sse(then=httpx.ReadError("reset")) for _ in range(3)]
    script, sleeps = Script(*drops), Sleeps()
    with pytest.raises(ConnectionFailed):
        list(client(script, sleeps, stream_reconnects=2).lifecycle())
    assert len(script.requests) == 3 and sleeps.pauses == [0.25, 0.5]


async def test_the_async_client_retries_the_same_way():
    receipt = {"event_id": "evt_1", "status": "captured", "wal_offset": 1, "lifecycle_stream": "/x"}
    script = Script(envelope("RATE_LIMITED", 429, True, **{"Retry-After": "3"}), httpx.ReadError("reset"),
                    httpx.Response(202, json=receipt))  # fmt: skip
    sleeps = Sleeps()
    async with AsyncCortexClient(URL, transport=httpx.MockTransport(script), sleep=sleeps.asleep, jitter=lambda: 0.5,
                                 now=lambda: NOW, actor="user:alice") as sdk:  # fmt: skip
        result = await sdk.experience("Alice likes tea", scope="org:acme/user:alice")
    assert result.event_id == "evt_1" and sleeps.pauses == [3.0, 0.5]
    assert len({body["idempotency_key"] for body in script.bodies()}) == 1
