"""Sending calls: retries with back-off, error envelopes as exceptions, cursors followed, and
Server-Sent Events (with resume for the lifecycle feed) — once for ``httpx.Client`` and once
for ``httpx.AsyncClient`` (Trio or asyncio: httpx picks the running library).

A ``Call`` is a request described as data by the operations (``_ops``), so every operation is
written once for both clients: the sync transport returns its result, the async one a
coroutine (or an async iterator) of it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import attrs
import httpx
from httpx_sse import EventSource, ServerSentEvent

from ._errors import connection_failed, error_from_response
from ._models import LifecycleEvent, StreamChunk
from ._records import Page
from ._settings import IDEMPOTENT_METHODS, Settings, auth_headers, clean_params, retry_after_seconds

USER_AGENT = "cortexdb-python/0.1"
CHUNK = 64 * 1024


def json_body(response: httpx.Response) -> Any:
    return response.json() if response.content else None


@attrs.frozen
class Call:
    """One request: where, what, how to read the answer, and whether repeating it is safe."""

    method: str
    path: str
    params: Mapping[str, Any] = attrs.field(factory=dict)
    json: Any = None
    body: Any = None  # raw bytes or a binary file (a blob upload)
    headers: Mapping[str, str] = attrs.field(factory=dict)
    parse: Callable[[httpx.Response], Any] = json_body
    safe: bool | None = None  # None: GET/PUT/DELETE, or a body carrying an idempotency key
    stream: bool = False

    @property
    def retry_safe(self) -> bool:
        if self.safe is not None:
            return self.safe
        keyed = isinstance(self.json, dict) and bool(self.json.get("idempotency_key"))
        return self.method in IDEMPOTENT_METHODS or keyed or "X-Cortex-Idempotency-Key" in self.headers


class _Base:
    def __init__(self, settings: Settings, *, jitter: Callable[[], float] | None,
                 now: Callable[[], dt.datetime] | None) -> None:  # fmt: skip
        self.settings = settings
        self.jitter = jitter or random.random
        self.now = now or (lambda: dt.datetime.now(dt.UTC))

    def _args(self, call: Call) -> dict[str, Any]:
        headers = {**auth_headers(self.settings, USER_AGENT), **call.headers}
        args: dict[str, Any] = {"method": call.method, "url": call.path, "params": clean_params(call.params),
                                "headers": headers,
                                "timeout": self.settings.stream_timeout if call.stream else self.settings.timeout}  # fmt: skip
        if call.json is not None:
            args["json"] = call.json
        if call.body is not None:
            if isinstance(call.body, bytes | bytearray | memoryview):
                args["content"] = bytes(call.body)
            else:  # a binary file, sent whole (a retry sends it again from its start)
                call.body.seek(0, os.SEEK_END)
                headers["Content-Length"] = str(call.body.tell())
                call.body.seek(0)
                args["content"] = self._file_body(call.body)
        return args

    def _file_body(self, file: Any) -> Any:
        return file

    def _after_error(self, call: Call, attempt: int, exc: httpx.TransportError) -> float | None:
        return self.settings.retry.after_error(attempt, call.retry_safe, exc, self.jitter())

    def _after_answer(self, call: Call, attempt: int, response: httpx.Response) -> tuple[float | None, Exception]:
        retry_after = retry_after_seconds(response.headers.get("Retry-After"), self.now)
        error = error_from_response(response, retry_after)
        delay = self.settings.retry.after_answer(attempt, call.retry_safe, response.status_code,
                                                 error.retriable, retry_after, self.jitter())  # fmt: skip
        return delay, error


_LAGGING = object()


class Resume:
    """A lifecycle subscription across connections: the ``Last-Event-ID`` to resume from (the
    last ``lce_`` id delivered), and the consecutive failures so far."""

    def __init__(self, since: str | None, reconnects: int) -> None:
        self.last, self.reconnects, self.failures = since, reconnects, 0

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        if self.last:
            headers["Last-Event-ID"] = self.last
        return headers

    def take(self, sse: ServerSentEvent) -> Any:
        if sse.event == "lagging":  # the server dropped us: reconnect from the last id at once
            return _LAGGING
        data = json.loads(sse.data) if sse.data else {}
        if sse.id:
            self.last = sse.id
        self.failures = 0
        return LifecycleEvent.from_wire(data if isinstance(data, dict) else {"data": data}, event=sse.event)

    def failed(self) -> bool:
        """One more failure in a row: True when that is more than allowed."""
        self.failures += 1
        return self.failures > self.reconnects


def _page(call: Call, cursor: str | None) -> Call:
    return attrs.evolve(call, params={**call.params, "cursor": cursor}) if cursor else call


class SyncTransport(_Base):
    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], Any] | None = None, jitter: Callable[[], float] | None = None,
                 now: Callable[[], dt.datetime] | None = None) -> None:  # fmt: skip
        super().__init__(settings, jitter=jitter, now=now)
        self.sleep = sleep or time.sleep
        self.http = httpx.Client(base_url=settings.base_url, transport=transport, timeout=settings.timeout)

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call) -> httpx.Response:
        """The answer to ``call`` (unread when ``call.stream``), after the retries it earns; an
        error answer raised as its ``CortexError``, a lost connection as ``ConnectionFailed``."""
        attempt = 0
        while True:
            try:
                response = self.http.send(self.http.build_request(**self._args(call)), stream=call.stream)
            except httpx.TransportError as exc:
                delay = self._after_error(call, attempt, exc)
                if delay is None:
                    raise connection_failed(exc, call.method, call.path) from exc
            else:
                if response.status_code < 400:
                    return response
                if call.stream:
                    response.read()
                    response.close()
                delay, error = self._after_answer(call, attempt, response)
                if delay is None:
                    raise error
            self.sleep(delay)  # the back-off between attempts (injectable: tests never sleep)
            attempt += 1

    def execute(self, call: Call) -> Any:
        return call.parse(self.send(call))

    def paginate(self, call: Call) -> Iterator[Any]:
        cursor = None
        while True:
            page: Page = self.execute(_page(call, cursor))
            yield from page.items
            if not (page.has_more and page.next_cursor):
                return
            cursor = page.next_cursor

    def poll(self, call: Call, until: Callable[[Any], bool], pauses: Iterator[float],
             on_result: Callable[[Any], None] | None = None, timeout: float | None = None) -> Any:  # fmt: skip
        """Run ``call`` until ``until(result)``, pausing ``next(pauses)`` seconds between runs;
        ``on_result`` sees every result.  ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            result = self.execute(call)
            if on_result is not None:
                on_result(result)
            if until(result):
                return result
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{call.method} {call.path}: not done after {timeout} s")
            self.sleep(next(pauses))

    def download(self, call: Call, out: Any) -> int:
        """Write the answer's body to the binary file ``out`` as it arrives: the bytes written."""
        response = self.send(attrs.evolve(call, stream=True))
        written = 0
        try:
            for chunk in response.iter_bytes(CHUNK):
                out.write(chunk)
                written += len(chunk)
        finally:
            response.close()
        return written

    def events(self, call: Call) -> Iterator[ServerSentEvent]:
        response = self.send(attrs.evolve(call, stream=True))
        try:
            yield from EventSource(response).iter_sse()
        finally:
            response.close()

    def chunks(self, call: Call) -> Iterator[StreamChunk]:
        events = self.events(call)
        try:
            for sse in events:
                yield StreamChunk.from_sse(sse.event, sse.data)
        finally:
            events.close()

    def lifecycle(self, call: Call, resume: Resume) -> Iterator[LifecycleEvent]:
        """The lifecycle feed, reconnecting after a dropped or closed connection (and after
        ``lagging``) from the last delivered id; ends after ``policy_revoked``."""
        while True:
            lagged = False
            try:
                events = self.events(attrs.evolve(call, headers={**call.headers, **resume.headers()}))
                try:
                    for sse in events:
                        item = resume.take(sse)
                        if item is _LAGGING:
                            lagged = True
                            break
                        yield item
                        if item.event == "policy_revoked":
                            return
                finally:
                    events.close()
            except httpx.TransportError as exc:
                if resume.failed():
                    raise connection_failed(exc, call.method, call.path) from exc
            else:
                if not lagged and resume.failed():
                    return  # the server keeps closing the stream: stop following it
            if not lagged:
                self.sleep(self.settings.retry.backoff(resume.failures - 1, self.jitter()))


class AsyncTransport(_Base):
    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Any] | None = None, jitter: Callable[[], float] | None = None,
                 now: Callable[[], dt.datetime] | None = None) -> None:  # fmt: skip
        super().__init__(settings, jitter=jitter, now=now)
        self.sleep = sleep or _async_sleep
        self.http = httpx.AsyncClient(base_url=settings.base_url, transport=transport, timeout=settings.timeout)

    async def close(self) -> None:
        await self.http.aclose()

    def _file_body(self, file: Any) -> Any:
        async def chunks() -> AsyncIterator[bytes]:
            while chunk := file.read(CHUNK):
                yield chunk

        return chunks()

    async def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self.http.send(self.http.build_request(**self._args(call)), stream=call.stream)
            except httpx.TransportError as exc:
                delay = self._after_error(call, attempt, exc)
                if delay is None:
                    raise connection_failed(exc, call.method, call.path) from exc
            else:
                if response.status_code < 400:
                    return response
                if call.stream:
                    await response.aread()
                    await response.aclose()
                delay, error = self._after_answer(call, attempt, response)
                if delay is None:
                    raise error
            await self.sleep(delay)
            attempt += 1

    async def execute(self, call: Call) -> Any:
        return call.parse(await self.send(call))

    async def paginate(self, call: Call) -> AsyncIterator[Any]:
        cursor = None
        while True:
            page: Page = await self.execute(_page(call, cursor))
            for item in page.items:
                yield item
            if not (page.has_more and page.next_cursor):
                return
            cursor = page.next_cursor

    async def poll(self, call: Call, until: Callable[[Any], bool], pauses: Iterator[float],
                   on_result: Callable[[Any], None] | None = None, timeout: float | None = None) -> Any:  # fmt: skip
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            result = await self.execute(call)
            if on_result is not None:
                on_result(result)
            if until(result):
                return result
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{call.method} {call.path}: not done after {timeout} s")
            await self.sleep(next(pauses))

    async def download(self, call: Call, out: Any) -> int:
        response = await self.send(attrs.evolve(call, stream=True))
        written = 0
        try:
            async for chunk in response.aiter_bytes(CHUNK):
                out.write(chunk)
                written += len(chunk)
        finally:
            await response.aclose()
        return written

    async def events(self, call: Call) -> AsyncIterator[ServerSentEvent]:
        response = await self.send(attrs.evolve(call, stream=True))
        try:
            async for sse in EventSource(response).aiter_sse():
                yield sse
        finally:
            await response.aclose()

    async def chunks(self, call: Call) -> AsyncIterator[StreamChunk]:
        events = self.events(call)
        try:
            async for sse in events:
                yield StreamChunk.from_sse(sse.event, sse.data)
        finally:
            await events.aclose()

    async def lifecycle(self, call: Call, resume: Resume) -> AsyncIterator[LifecycleEvent]:
        while True:
            lagged = False
            try:
                events = self.events(attrs.evolve(call, headers={**call.headers, **resume.headers()}))
                try:
                    async for sse in events:
                        item = resume.take(sse)
                        if item is _LAGGING:
                            lagged = True
                            break
                        yield item
                        if item.event == "policy_revoked":
                            return
                finally:
                    await events.aclose()
            except httpx.TransportError as exc:
                if resume.failed():
                    raise connection_failed(exc, call.method, call.path) from exc
            else:
                if not lagged and resume.failed():
                    return
            if not lagged:
                await self.sleep(self.settings.retry.backoff(resume.failures - 1, self.jitter()))


async def _async_sleep(seconds: float) -> None:
    import anyio  # httpx's own dependency: sleeps under Trio and asyncio alike

    await anyio.sleep(seconds)
