"""The server's error envelope (reference §6.6) as the matching ``cortexdb.errors`` class.

``cortexdb.errors`` is plain (it imports nothing of the engine), so the SDK raises the very
classes the server raised: ``except cortexdb.errors.PolicyDenied`` works on both sides.  Each
error carries ``error_code``, ``message``, ``details``, ``retriable``, ``http_status``,
``request_id`` (the envelope's, else the ``X-Cortex-Request-ID`` header) and ``retry_after``
(seconds, from ``Retry-After``, or None).  A code this SDK does not know (a newer server)
is a plain ``CortexError`` with that ``error_code``.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import ConnectionFailed, CortexError, Internal

_CLASSES: dict[str, type[CortexError]] | None = None


def _error_classes() -> dict[str, type[CortexError]]:
    """Every error class by its code: one class per code, the first found (the base of a code's
    refinements) wins."""
    found: dict[str, type[CortexError]] = {}
    stack = [CortexError]
    while stack:
        cls = stack.pop(0)
        found.setdefault(cls.error_code, cls)
        stack.extend(cls.__subclasses__())
    found["INTERNAL"] = Internal  # the base class's own code: its named subclass reads better
    return found


def error_from_envelope(status: int, body: Any, *, request_id: str | None = None,
                        retry_after: float | None = None) -> CortexError:  # fmt: skip
    """The envelope ``body`` of an HTTP ``status`` answer as its ``CortexError`` subclass."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _error_classes()
    if not isinstance(body, dict) or not isinstance(body.get("error_code"), str):
        body = {"error_code": "INTERNAL", "message": f"HTTP {status} without an error envelope",
                "retriable": status >= 500}  # fmt: skip
    code = body["error_code"]
    cls = _CLASSES.get(code, CortexError)
    error = cls.__new__(cls)
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    retriable = body.get("retriable") if isinstance(body.get("retriable"), bool) else None
    CortexError.__init__(error, str(body.get("message", "")), details=details, retriable=retriable)
    if cls.error_code != code:
        error.error_code = code  # type: ignore[misc]
    error.http_status = status  # type: ignore[misc]
    error.request_id = body.get("request_id") or request_id  # type: ignore[attr-defined]
    error.retry_after = retry_after  # type: ignore[attr-defined]
    error.documentation = body.get("documentation")  # type: ignore[attr-defined]
    return error


def error_from_response(response: httpx.Response, retry_after: float | None) -> CortexError:
    """A read error answer as its error (the body must have been read)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    return error_from_envelope(response.status_code, body, request_id=response.headers.get("X-Cortex-Request-ID"),
                               retry_after=retry_after)  # fmt: skip


def connection_failed(exc: httpx.TransportError, method: str, path: str) -> ConnectionFailed:
    error = ConnectionFailed(f"{method} {path}: {type(exc).__name__}: {exc}", details={"transport": type(exc).__name__})
    error.request_id = None  # type: ignore[attr-defined]
    error.retry_after = None  # type: ignore[attr-defined]
    return error
