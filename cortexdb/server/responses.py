"""How answers read: JSON bodies, and the reference's error envelope (§6.6) for every failure —
a route's, the framework's (404/405/413, bad JSON), and the HTTP server's own refusals
(``error_body``, which ``cortexdb serve`` gives to ``cortexdb.http``)."""

from __future__ import annotations

from typing import Any

from quart import Response

from ..engine import jsoncodec
from ..errors import CortexError, HttpError, RateLimited
from ..http import Refusal

JSON = "application/json; charset=utf-8"
HTTP_CODES = {
    400: ("INVALID_BODY", "the request could not be read"),
    404: ("NOT_FOUND", "no such route"),
    405: ("METHOD_NOT_ALLOWED", "this route does not accept that method"),
    413: ("PAYLOAD_TOO_LARGE", "the request body is larger than the server accepts"),
    415: ("UNSUPPORTED_MEDIA_TYPE", "send application/json"),
}


def json_response(data: Any, status: int = 200) -> Response:
    return Response(jsoncodec.encode(data), status=status, content_type=JSON)


def envelope_response(error: CortexError, request_id: str) -> Response:
    response = Response(jsoncodec.encode(error.to_envelope(request_id)), status=error.http_status,
                        content_type=JSON)  # fmt: skip
    if isinstance(error, RateLimited):
        response.headers["Retry-After"] = str(error.details.get("retry_after", 1))
    return response


def http_error(status: int | None, method: str, path: str) -> CortexError:
    """The envelope's error for a framework answer (an unknown route, a wrong method, ...)."""
    code, message = HTTP_CODES.get(status or 500, ("INTERNAL", "unexpected server error"))
    if status == 405:
        message = f"{method} is not allowed on {path}"
    elif status == 404:
        message = f"no route {method} {path}"
    return HttpError(status or 500, code, message, retriable=False)


def error_body(refusal: Refusal, request_id: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The HTTP server's own refusals (``cortexdb.http``) as the API's error envelope."""
    error = HttpError(refusal.status, refusal.code, refusal.message, retriable=refusal.retriable)
    return ([(b"x-cortex-request-id", request_id.encode()), (b"content-type", JSON.encode())],
            jsoncodec.encode(error.to_envelope(request_id)))  # fmt: skip
