"""The Python SDK: ``CortexClient`` (sync) and ``AsyncCortexClient`` (Trio or asyncio) over the
HTTP API.

    client = CortexClient("http://127.0.0.1:8077", actor="user:alice", token=token)
    receipt = client.experience(text="Alice prefers tea", scope="org:acme/user:alice")
    pack = client.recall(scope="org:acme/user:alice", query="what does Alice drink?")
    for event in client.lifecycle(scope="org:acme/user:alice"):
        ...

Errors are raised as the server's ``CortexError`` codes (``err.error_code``, ``err.details``,
``err.request_id``).  Writes carry an idempotency key unless the caller gives one, so a retried
write is a replay, never a duplicate.  ``lifecycle()`` resumes after a dropped connection from
the last ``lce_`` id it delivered.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import attrs
import httpx

from ..errors import CortexError

__all__ = ["AsyncCortexClient", "CortexClient", "ExperienceReceipt", "LifecycleEvent", "Pack", "Page",
           "error_from_envelope"]  # fmt: skip


# -- typed results ---------------------------------------------------------------------------
@attrs.frozen
class ExperienceReceipt:
    event_id: str
    status: str
    wal_offset: int
    lifecycle_stream: str
    replay: bool = False
    stages_completed: tuple[str, ...] = ()
    derives: tuple[str, ...] = ()
    elapsed_ms: dict[str, float] = attrs.field(factory=dict)

    @classmethod
    def from_wire(cls, data: dict[str, Any], replay: bool) -> ExperienceReceipt:
        return cls(event_id=data["event_id"], status=data["status"], wal_offset=data["wal_offset"],
                   lifecycle_stream=data["lifecycle_stream"], replay=replay,
                   stages_completed=tuple(data.get("stages_completed") or ()),
                   derives=tuple(data.get("derives") or ()), elapsed_ms=data.get("elapsed_ms") or {})  # fmt: skip


@attrs.frozen
class Layers:
    events: list[dict[str, Any]] = attrs.field(factory=list)
    episodes: list[dict[str, Any]] = attrs.field(factory=list)
    facts: list[dict[str, Any]] = attrs.field(factory=list)
    beliefs: list[dict[str, Any]] = attrs.field(factory=list)
    understanding: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.frozen
class Pack:
    pack_id: str
    scope: str
    view: str
    context_block: str
    layers: Layers
    provenance: dict[str, Any]
    diagnostics: dict[str, Any] | None
    raw: dict[str, Any]

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Pack:
        layers = data.get("layers") or {}
        return cls(pack_id=data["pack_id"], scope=data["scope"], view=data["view"],
                   context_block=data.get("context_block", ""),
                   layers=Layers(**{k: list(layers.get(k, [])) for k in attrs.fields_dict(Layers)}),
                   provenance=data.get("provenance", {}), diagnostics=data.get("diagnostics"), raw=data)  # fmt: skip


@attrs.frozen
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None
    has_more: bool
    raw: dict[str, Any]

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Page:
        return cls(items=data.get("items", []), next_cursor=data.get("next_cursor"),
                   has_more=bool(data.get("has_more")), raw=data)  # fmt: skip


@attrs.frozen
class LifecycleEvent:
    event: str  # the SSE event name: captured, extracted, ..., policy_changed, lagging
    lifecycle_id: str | None
    data: dict[str, Any]

    @property
    def event_id(self) -> str | None:
        return self.data.get("event_id")

    @property
    def scope(self) -> str | None:
        return self.data.get("scope")


# -- errors ----------------------------------------------------------------------------------
def _error_classes() -> dict[str, type[CortexError]]:
    """Every error class by its code: ``cortexdb.errors`` holds them all (one class per code)."""
    found: dict[str, type[CortexError]] = {}
    stack = [CortexError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.error_code, cls)
        stack.extend(cls.__subclasses__())
    return found


_CLASSES: dict[str, type[CortexError]] | None = None


def error_from_envelope(status: int, body: Any) -> CortexError:
    """The server's error envelope as the matching ``CortexError`` subclass."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _error_classes()
    if not isinstance(body, dict) or "error_code" not in body:
        body = {"error_code": "INTERNAL", "message": f"HTTP {status} without an error envelope",
                "retriable": status >= 500}  # fmt: skip
    cls = _CLASSES.get(body["error_code"], CortexError)
    error = cls.__new__(cls)
    CortexError.__init__(error, body.get("message", ""), details=body.get("details"),
                         retriable=body.get("retriable"))  # fmt: skip
    if cls is CortexError or cls.error_code != body["error_code"]:
        error.error_code = body["error_code"]  # type: ignore[misc]
    error.http_status = status  # type: ignore[misc]
    error.request_id = body.get("request_id")  # type: ignore[attr-defined]
    return error


# -- request building (shared by both clients) -----------------------------------------------
def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def _envelope(scope: str, text: str | None, content: dict | None, modality: str, context: dict | None,
              idempotency_key: str | None, extra: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    if content is None:
        if text is None:
            raise ValueError("give text= or content=")
        content = {"kind": "message", "role": "user", "text": text}
    body: dict[str, Any] = {"scope": scope, "modality": modality, "content": content,
                            "context": {"observed_at": _now(), **(context or {})},
                            "idempotency_key": idempotency_key or f"sdk-{uuid.uuid4()}"}  # fmt: skip
    body.update(extra)
    return body


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


class _Base:
    def __init__(self, base_url: str, *, actor: str | None = None, token: str | None = None,
                 token_provider: Callable[[], str] | None = None, timeout: float = 30.0,
                 retries: int = 2) -> None:  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.actor = actor
        self._token = token
        self._token_provider = token_provider
        self.timeout = timeout

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"User-Agent": "cortexdb-py/0.1", "Accept": "application/json"}
        token = self._token_provider() if self._token_provider else self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self.actor:
            headers["X-Cortex-Actor"] = self.actor
        headers.update(extra or {})
        return headers

    @staticmethod
    def _backoff(attempt: int, response: httpx.Response | None) -> float:
        if response is not None and response.headers.get("Retry-After", "").isdigit():
            return min(30.0, float(response.headers["Retry-After"]))
        return min(5.0, 0.1 * 2**attempt)

    @staticmethod
    def _result(response: httpx.Response) -> Any:
        if response.status_code == 204:
            return None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise error_from_envelope(response.status_code, body)
        return body


def _parse_sse(lines: Iterator[str] | None = None):
    """A small SSE parser: feed lines, get (id, event, data) on each blank line."""
    state = {"id": None, "event": "message", "data": []}

    def feed(line: str):
        if line == "":
            if not state["data"]:
                state.update(id=None, event="message")
                return None
            frame = (state["id"], state["event"], "\n".join(state["data"]))
            state.update(id=None, event="message", data=[])
            return frame
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            state["data"].append(value)
        elif field in ("id", "event"):
            state[field] = value
        return None

    return feed


_LAGGING = object()


class _Resume:
    """Turns SSE lines into ``LifecycleEvent``s and remembers the last ``lce_`` id delivered."""

    def __init__(self, last: str | None) -> None:
        self.last = last
        self._feed = _parse_sse()

    def feed(self, line: str) -> Any:
        frame = self._feed(line)
        if frame is None:
            return None
        lce, name, data = frame
        if name == "lagging":
            return _LAGGING
        if lce:
            self.last = lce
        return LifecycleEvent(name, lce, json.loads(data))


RESUMABLE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.ReadTimeout, httpx.ConnectError)


class CortexClient(_Base):
    """Synchronous client."""

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._http = httpx.Client(base_url=self.base_url, timeout=self.timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CortexClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def request(self, method: str, path: str, *, params: dict | None = None, json_body: Any = None,
                headers: dict | None = None) -> httpx.Response:  # fmt: skip
        """One call, retried (same body, so the same idempotency key) after a transport error or
        a retriable 429/503 answer."""
        import time

        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, params=_clean(params or {}), json=json_body,
                                              headers=self._headers(headers))  # fmt: skip
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                time.sleep(self._backoff(attempt, None))  # deliberate client back-off between retries
                continue
            if response.status_code not in (429, 503) or attempt == self.retries:
                return response
            time.sleep(self._backoff(attempt, response))  # Retry-After, or the same back-off
        raise AssertionError("unreachable")

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        return self._result(self.request(method, path, **kw))

    # writes
    def experience(self, *, scope: str, text: str | None = None, content: dict | None = None,
                   modality: str = "conversation", context: dict | None = None, wait: str | None = None,
                   idempotency_key: str | None = None, **extra: Any) -> ExperienceReceipt:  # fmt: skip
        body = _envelope(scope, text, content, modality, context, idempotency_key, extra)
        response = self.request("POST", "/v1/experience", params={"wait": wait}, json_body=body)
        return ExperienceReceipt.from_wire(self._result(response), response.headers.get("X-Cortex-Replay") == "true")

    def experience_bulk(self, *, scope: str, items: list[dict], ordering: str = "strict_temporal",
                        **extra: Any) -> dict[str, Any]:  # fmt: skip
        return self._call("POST", "/v1/experience/bulk",
                          json_body={"scope": scope, "items": items, "ordering": ordering, **extra})  # fmt: skip

    # reads
    def recall(self, *, scope: str, query: str = "", **request: Any) -> Pack:
        return Pack.from_wire(self._call("POST", "/v1/recall", json_body={"scope": scope, "query": query, **request}))

    def events(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(self._call("GET", "/v1/events", params={"scope": scope, **filters}))

    def episodes(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(self._call("GET", "/v1/episodes", params={"scope": scope, **filters}))

    def facts(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(self._call("GET", "/v1/facts", params={"scope": scope, **filters}))

    def beliefs(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(self._call("GET", "/v1/beliefs", params={"scope": scope, **filters}))

    def beliefs_why(self, scope: str, belief_id: str) -> dict[str, Any]:
        return self._call("GET", "/v1/beliefs/why", params={"scope": scope, "belief_id": belief_id})

    def get_event(self, event_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/events/{event_id}")

    def memory_event(self, event_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/lifecycle/memory-event/{event_id}")

    def whoami(self) -> dict[str, Any]:
        return self._call("GET", "/v1/auth/whoami")

    def register_scope(self, path: str, members: list[dict] | None = None, **policies: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"path": path, "members": members or []}
        if policies:
            body["policies"] = policies
        return self._call("POST", "/v1/scopes", json_body=body)

    def revoke(self, jti: str, reason: str | None = None) -> None:
        self._call("POST", "/v1/auth/revoke", json_body={"jti": jti, "reason": reason})

    def lifecycle(self, *, since_lifecycle_id: str | None = None, reconnects: int = 5,
                  **filters: Any) -> Iterator[LifecycleEvent]:  # fmt: skip
        """Lifecycle events over SSE; resumes after a dropped connection (and after ``lagging``)
        from the last delivered ``lce_`` id.  Ends on ``policy_revoked``."""
        last = since_lifecycle_id
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last else {})}
            try:
                with self._http.stream("GET", "/v1/lifecycle/stream", params=_clean(filters),
                                       headers=self._headers(headers), timeout=None) as response:  # fmt: skip
                    if response.status_code >= 400:
                        response.read()
                        self._result(response)
                    resume = _Resume(last)
                    for line in response.iter_lines():
                        event = resume.feed(line)
                        if event is _LAGGING:
                            break  # reconnect from the last delivered id
                        if event is not None:
                            failures, last = 0, resume.last
                            yield event
                            if event.event == "policy_revoked":
                                return
            except RESUMABLE:
                failures += 1
                if failures > reconnects:
                    raise


class AsyncCortexClient(_Base):
    """Asynchronous client (httpx over anyio: works under Trio and asyncio)."""

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncCortexClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, *, params: dict | None = None, json_body: Any = None,
                      headers: dict | None = None) -> httpx.Response:  # fmt: skip
        import anyio

        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(method, path, params=_clean(params or {}), json=json_body,
                                                     headers=self._headers(headers))  # fmt: skip
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                await anyio.sleep(self._backoff(attempt, None))  # deliberate client back-off
                continue
            if response.status_code not in (429, 503) or attempt == self.retries:
                return response
            await anyio.sleep(self._backoff(attempt, response))  # Retry-After, or the same back-off
        raise AssertionError("unreachable")

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        return self._result(await self.request(method, path, **kw))

    async def experience(self, *, scope: str, text: str | None = None, content: dict | None = None,
                         modality: str = "conversation", context: dict | None = None, wait: str | None = None,
                         idempotency_key: str | None = None, **extra: Any) -> ExperienceReceipt:  # fmt: skip
        body = _envelope(scope, text, content, modality, context, idempotency_key, extra)
        response = await self.request("POST", "/v1/experience", params={"wait": wait}, json_body=body)
        return ExperienceReceipt.from_wire(self._result(response), response.headers.get("X-Cortex-Replay") == "true")

    async def experience_bulk(self, *, scope: str, items: list[dict], ordering: str = "strict_temporal",
                              **extra: Any) -> dict[str, Any]:  # fmt: skip
        return await self._call("POST", "/v1/experience/bulk",
                                json_body={"scope": scope, "items": items, "ordering": ordering, **extra})  # fmt: skip

    async def recall(self, *, scope: str, query: str = "", **request: Any) -> Pack:
        return Pack.from_wire(await self._call("POST", "/v1/recall", json_body={"scope": scope, "query": query, **request}))

    async def events(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(await self._call("GET", "/v1/events", params={"scope": scope, **filters}))

    async def episodes(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(await self._call("GET", "/v1/episodes", params={"scope": scope, **filters}))

    async def facts(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(await self._call("GET", "/v1/facts", params={"scope": scope, **filters}))

    async def beliefs(self, scope: str, **filters: Any) -> Page:
        return Page.from_wire(await self._call("GET", "/v1/beliefs", params={"scope": scope, **filters}))

    async def beliefs_why(self, scope: str, belief_id: str) -> dict[str, Any]:
        return await self._call("GET", "/v1/beliefs/why", params={"scope": scope, "belief_id": belief_id})

    async def get_event(self, event_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/events/{event_id}")

    async def memory_event(self, event_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/lifecycle/memory-event/{event_id}")

    async def whoami(self) -> dict[str, Any]:
        return await self._call("GET", "/v1/auth/whoami")

    async def register_scope(self, path: str, members: list[dict] | None = None, **policies: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"path": path, "members": members or []}
        if policies:
            body["policies"] = policies
        return await self._call("POST", "/v1/scopes", json_body=body)

    async def revoke(self, jti: str, reason: str | None = None) -> None:
        await self._call("POST", "/v1/auth/revoke", json_body={"jti": jti, "reason": reason})

    async def lifecycle(self, *, since_lifecycle_id: str | None = None, reconnects: int = 5,
                        **filters: Any) -> AsyncIterator[LifecycleEvent]:  # fmt: skip
        last = since_lifecycle_id
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last else {})}
            try:
                async with self._http.stream("GET", "/v1/lifecycle/stream", params=_clean(filters),
                                             headers=self._headers(headers), timeout=None) as response:  # fmt: skip
                    if response.status_code >= 400:
                        await response.aread()
                        self._result(response)
                    resume = _Resume(last)
                    async for line in response.aiter_lines():
                        event = resume.feed(line)
                        if event is _LAGGING:
                            break  # reconnect from the last delivered id
                        if event is not None:
                            failures, last = 0, resume.last
                            yield event
                            if event.event == "policy_revoked":
                                return
            except RESUMABLE:
                failures += 1
                if failures > reconnects:
                    raise
