"""The CortexError tree: every failure a caller can see, backend-neutral.

Each error carries the reference's UPPER_SNAKE ``error_code`` (§16), the HTTP status the API
layer will use, whether retrying may succeed, and structured ``details``.  Nothing outside this
module invents error codes; drivers' exceptions are translated at the backend boundary.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "CortexError",
    "DataDirLocked",
    "DerivedLayerUnavailable",
    "HttpError",
    "IdempotencyConflict",
    "Internal",
    "InvalidBody",
    "InvalidEnvelope",
    "InvalidScopeGrammar",
    "InvalidTimestamp",
    "NotAMember",
    "NotFound",
    "OriginNotAllowed",
    "PayloadTooLarge",
    "PolicyDenied",
    "PolicyLockout",
    "ResourceDeleted",
    "StoreClosed",
    "UnsupportedMediaType",
    "WalUnavailable",
]


class CortexError(Exception):
    """Base of every error CortexDB raises on purpose."""

    error_code: ClassVar[str] = "INTERNAL"
    http_status: ClassVar[int] = 500
    default_retriable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retriable = self.default_retriable if retriable is None else retriable

    def to_envelope(self, request_id: str) -> dict[str, Any]:
        """The reference's error envelope (§6.6)."""
        body: dict[str, Any] = {
            "error_code": self.error_code,
            "message": self.message,
            "request_id": request_id,
            "retriable": self.retriable,
            "documentation": f"https://docs.cortexdb.ai/errors/{self.error_code}",
        }
        if self.details:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.error_code}: {self.message!r}, details={self.details!r})"
        )


class InvalidBody(CortexError):
    error_code = "INVALID_BODY"
    http_status = 400


class InvalidEnvelope(CortexError):
    """The experience envelope failed validation; ``details.field`` and ``details.reason`` say where."""

    error_code = "INVALID_ENVELOPE"
    http_status = 422

    def __init__(self, field: str, reason: str, **extra: Any) -> None:
        super().__init__(f"{field}: {reason}", details={"field": field, "reason": reason, **extra})


class InvalidScopeGrammar(CortexError):
    error_code = "INVALID_SCOPE_GRAMMAR"
    http_status = 422


class InvalidTimestamp(CortexError):
    error_code = "INVALID_TIMESTAMP"
    http_status = 422


class PolicyDenied(CortexError):
    error_code = "POLICY_DENIED"
    http_status = 403


class NotAMember(PolicyDenied):
    """The caller's role on the scope does not allow the operation (the scope tier's ACL, §3.4.4);
    a ``PolicyDenied``, so whoever handles policy denials handles it too."""

    error_code = "NOT_A_MEMBER"
    http_status = 403


class PolicyLockout(CortexError):
    """A policy change that would take away the caller's own right to administer that policy."""

    error_code = "POLICY_LOCKOUT"
    http_status = 409


class OriginNotAllowed(CortexError):
    """A browser request from a web origin that is neither loopback nor configured (CSRF guard)."""

    error_code = "ORIGIN_NOT_ALLOWED"
    http_status = 403


class UnsupportedMediaType(CortexError):
    error_code = "UNSUPPORTED_MEDIA_TYPE"
    http_status = 415


class NotFound(CortexError):
    error_code = "NOT_FOUND"
    http_status = 404


class PayloadTooLarge(CortexError):
    """A write carries more than an event may hold (``details``: field, limit, size in bytes)."""

    error_code = "PAYLOAD_TOO_LARGE"
    http_status = 413

    def __init__(self, field: str, limit: int, size: int, **extra: Any) -> None:
        super().__init__(
            f"{field} is {size} bytes of UTF-8; an event may carry at most {limit}",
            details={"field": field, "limit": limit, "size": size, **extra},
        )


class ResourceDeleted(CortexError):
    error_code = "RESOURCE_DELETED"
    http_status = 410


class IdempotencyConflict(CortexError):
    error_code = "IDEMPOTENCY_CONFLICT"
    http_status = 409


class Internal(CortexError):
    """Unexpected failure inside the engine (e.g. a scope actor crashed); retrying may succeed."""

    error_code = "INTERNAL"
    http_status = 500
    default_retriable = True


class WalUnavailable(CortexError):
    error_code = "WAL_UNAVAILABLE"
    http_status = 503
    default_retriable = True


class StoreClosed(WalUnavailable):
    """The storage backend was closed; no further reads or writes are possible on this handle."""

    default_retriable = False


class DataDirLocked(CortexError):
    """Another process (or another open engine) already holds this data directory."""

    error_code = "DATA_DIR_LOCKED"
    http_status = 503


class DerivedLayerUnavailable(CortexError):
    error_code = "DERIVED_LAYER_UNAVAILABLE"
    http_status = 503
    default_retriable = True


class HttpError(CortexError):
    """A failure at the HTTP layer (unknown route, wrong method, oversize body, malformed request)
    as an envelope: the status and code are the instance's."""

    def __init__(self, status: int, code: str, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.http_status = status  # type: ignore[misc]
        self.error_code = code  # type: ignore[misc]
