"""A chat-completions server on loopback for the ``openai_compatible`` provider's tests: the
OpenAI wire format (``POST /v1/chat/completions``, JSON or Server-Sent Events ending in
``data: [DONE]``), served by the built-in HTTP server on 127.0.0.1 and an ephemeral port.

Its "model" is small and deterministic: it answers with the passage of the prompt that shares
the most words with the question, citing its marker (or says the memory does not say).  A test
scripts failures first (``script``): a status with headers, a hang, a stream cut short.
"""

from __future__ import annotations

import json
import re
from contextlib import asynccontextmanager
from typing import Any

import trio

from cortexdb import http

KEY = "sk-test-0123456789abcdefSECRET"  # what the provider must send and never show
_PASSAGE = re.compile(r"^(\[\d+\]) \((\w+)\) (.*)$", re.M)
_WORD = re.compile(r"[a-z0-9]+")


def chat_answer(messages: list[dict[str, Any]]) -> str:
    """The passage sharing the most words with the question, cited; else 'the memory does not say'."""
    user = messages[-1]["content"]
    question = set(_WORD.findall(user.rpartition("Question:")[2].lower()))
    best, best_overlap = None, 0
    for marker, _, text in _PASSAGE.findall(user):
        overlap = len(question & set(_WORD.findall(text.lower())))
        if overlap > best_overlap:
            best, best_overlap = (marker, text), overlap
    if best is None:
        return "The memory does not say."
    return f"According to memory, {best[1].rstrip('.')}. {best[0]}"


class ChatServer:
    """The ASGI app; ``requests`` records what arrived (headers lower-cased, body decoded)."""

    def __init__(self) -> None:
        self.script: list[tuple[Any, ...]] = []  # one behaviour per request, then ("answer",)
        self.requests: list[dict[str, Any]] = []
        self.release = trio.Event()  # a "hang" waits for it
        self.url = ""

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                done = "lifespan.startup.complete" if message["type"] == "lifespan.startup" else "lifespan.shutdown.complete"
                await send({"type": done})
                if done.endswith("shutdown.complete"):
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        self.requests.append({"path": scope["path"], "body": request,
                              "headers": {k.decode().lower(): v.decode() for k, v in scope["headers"]}})  # fmt: skip
        behaviour = self.script.pop(0) if self.script else ("answer",)
        if behaviour[0] == "status":
            _, status, headers = (*behaviour, {})[:3]
            error = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error",
                               "code": "rate_limit_exceeded" if status == 429 else "invalid_api_key"}}  # fmt: skip
            await _json(send, status, error, headers)
            return
        if behaviour[0] == "hang":
            await self.release.wait()
        text = chat_answer(request["messages"])
        usage = {"prompt_tokens": sum(len(m["content"].split()) for m in request["messages"]),
                 "completion_tokens": len(text.split())}  # fmt: skip
        if not request.get("stream"):
            await _json(send, 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": request["model"],
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "finish_reason": "stop"}], "usage": usage})  # fmt: skip
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        words = re.findall(r"\s*\S+", text)
        chunks = [{"role": "assistant", "content": ""}] + [{"content": w} for w in words]
        if behaviour[0] == "cut":
            chunks = chunks[: behaviour[1]]
        for delta in chunks:
            await _event(send, {"object": "chat.completion.chunk", "model": request["model"],
                                "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})  # fmt: skip
        if behaviour[0] == "cut":
            return  # the model went away mid-answer: the server drops the connection
        await _event(send, {"object": "chat.completion.chunk", "model": request["model"],
                            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})  # fmt: skip
        if (request.get("stream_options") or {}).get("include_usage"):
            await _event(send, {"object": "chat.completion.chunk", "model": request["model"], "choices": [],
                                "usage": usage})  # fmt: skip
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _json(send, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
    raw = [(b"content-type", b"application/json")] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": json.dumps(data).encode()})


async def _event(send, data: Any) -> None:
    await send({"type": "http.response.body", "body": b"data: " + json.dumps(data).encode() + b"\n\n",
                "more_body": True})  # fmt: skip


@asynccontextmanager
async def chat_server():
    """A ``ChatServer`` listening on 127.0.0.1 (``.url`` is its ``/v1`` base URL)."""
    app = ChatServer()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: http.serve(app, "127.0.0.1:0", shutdown_trigger=stop.wait,
                                                                   task_status=task_status))  # fmt: skip
        app.url = binds[0] + "/v1"
        try:
            yield app
        finally:
            app.release.set()
            stop.set()
