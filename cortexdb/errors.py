"""The CortexError tree: every failure a caller can see, backend-neutral.  Each error carries the
reference's ``error_code`` (§16), its HTTP status, whether retrying may succeed, and ``details``.
One class per code lives here (a subclass may refine its parent's status or retriability); drivers'
exceptions are translated at the backend boundary.  Grouped by where they arise."""

from __future__ import annotations

from typing import Any, ClassVar


class CortexError(Exception):
    """Base of every error CortexDB raises on purpose."""
    error_code: ClassVar[str] = "INTERNAL"
    http_status: ClassVar[int] = 500
    default_retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, details: dict[str, Any] | None = None,
                 retriable: bool | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retriable = self.default_retriable if retriable is None else retriable

    def to_envelope(self, request_id: str) -> dict[str, Any]:
        """The reference's error envelope (§6.6)."""
        body: dict[str, Any] = {
            "error_code": self.error_code, "message": self.message, "request_id": request_id,
            "retriable": self.retriable,
            "documentation": f"https://docs.cortexdb.ai/errors/{self.error_code}",
        }  # fmt: skip
        if self.details:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.error_code}: {self.message!r}, details={self.details!r})"


class InvalidBody(CortexError):
    error_code = "INVALID_BODY"
    http_status = 400


class InvalidScopeRequest(InvalidBody):
    """A malformed scope registration, member list, deletion or prune: INVALID_BODY with 422."""
    http_status = 422


class UnknownField(InvalidBody):
    """A body field its endpoint does not take, at any depth (``details.field``: its path)."""
    error_code = "UNKNOWN_FIELD"
    http_status = 422


class InvalidRequest(InvalidBody):  # a malformed signal, proposal or review: details.field, details.reason
    error_code, http_status = "INVALID_REQUEST", 422


class InvalidQuery(CortexError):
    """An unknown or malformed query parameter or read filter, or a limit out of range."""
    error_code = "INVALID_QUERY"
    http_status = 400


class MissingRequiredField(CortexError):
    error_code = "MISSING_REQUIRED_FIELD"
    http_status = 400


class InvalidCursor(CortexError):
    """A layer-read cursor this server did not issue."""
    error_code = "INVALID_CURSOR"
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


class UnparseableTemporal(CortexError):
    """``temporal.natural`` (a time phrase) was not understood."""
    error_code = "UNPARSEABLE_TEMPORAL"
    http_status = 422


class InvalidTemporal(CortexError):
    """A recall's ``temporal`` block is malformed."""
    error_code = "INVALID_TEMPORAL"
    http_status = 422


class InvalidFilter(CortexError):
    """A recall's ``filters`` tree is malformed."""
    error_code = "INVALID_FILTER"
    http_status = 422


class InvalidRecall(CortexError):
    """A recall request is malformed; ``details.field`` and ``details.reason`` say where."""
    error_code = "INVALID_RECALL"
    http_status = 422

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}", details={"field": field, "reason": reason})


class InvalidAnswer(InvalidRecall):
    """A malformed answer request (§8.4), e.g. an ``answer_model`` not served here."""
    error_code = "INVALID_ANSWER"


class InvalidForget(CortexError):
    """A forget request is malformed (§8.5); ``details.field`` and ``details.reason`` say where."""
    error_code = "INVALID_FORGET"
    http_status = 422

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}", details={"field": field, "reason": reason})


class EmptySelectorWithoutConfirmation(CortexError):
    """A forget with an empty selector sent without ``confirm_all: true`` (§8.5)."""
    error_code = "EMPTY_SELECTOR_WITHOUT_CONFIRMATION"
    http_status = 422


class InvalidPolicy(CortexError):
    """A policy document (a preset, PUT /v1/policy/...) is malformed."""
    error_code = "INVALID_POLICY"
    http_status = 422


class UnknownPreset(CortexError):
    error_code = "UNKNOWN_PRESET"
    http_status = 422


class UnregisteredScopeType(CortexError):
    error_code = "UNREGISTERED_SCOPE_TYPE"
    http_status = 422


class PolicyDenied(CortexError):
    error_code = "POLICY_DENIED"
    http_status = 403


class NotAMember(PolicyDenied):
    """The caller's role on the scope does not allow the operation (the scope tier's ACL, §3.4.4)."""
    error_code = "NOT_A_MEMBER"
    http_status = 403


class ExperimentalDisabled(CortexError):
    """An experimental endpoint on a deployment that has not enabled them."""
    error_code = "EXPERIMENTAL_DISABLED"
    http_status = 403


class PolicyLockout(CortexError):
    """A policy change that would take away the caller's own right to administer that policy."""
    error_code = "POLICY_LOCKOUT"
    http_status = 409


class OriginNotAllowed(CortexError):
    """A browser request from a web origin that is neither loopback nor configured (CSRF guard)."""
    error_code = "ORIGIN_NOT_ALLOWED"
    http_status = 403


# -- authentication (§4.3): every failure is a 401 ---------------------------------------------
class AuthError(CortexError):
    """Base of the authentication failures (not raised itself)."""
    http_status = 401


class MissingToken(AuthError):
    error_code = "MISSING_TOKEN"


class InvalidTokenSignature(AuthError):
    error_code = "INVALID_TOKEN_SIGNATURE"


class InvalidToken(AuthError):
    """A verified token whose claims are unusable (missing, non-finite, in the future, too long-lived)."""
    error_code = "INVALID_TOKEN"


class ExpiredToken(AuthError):
    error_code = "EXPIRED_TOKEN"


class RevokedToken(AuthError):
    error_code = "REVOKED_TOKEN"


class ActorMismatch(AuthError):
    error_code = "ACTOR_MISMATCH"


class WrongTenant(AuthError):
    error_code = "WRONG_TENANT"


class UnsupportedMediaType(CortexError):
    error_code = "UNSUPPORTED_MEDIA_TYPE"
    http_status = 415


class NotFound(CortexError):
    error_code = "NOT_FOUND"
    http_status = 404


class PayloadTooLarge(CortexError):
    """A write carries more than an event or a blob may hold (``details``: field, limit, size)."""
    error_code = "PAYLOAD_TOO_LARGE"
    http_status = 413

    def __init__(self, field: str, limit: int, size: int, *, message: str | None = None, **extra: Any) -> None:
        super().__init__(
            message or f"{field} is {size} bytes of UTF-8; an event may carry at most {limit}",
            details={"field": field, "limit": limit, "size": size, **extra},
        )


class ExportNotReady(CortexError):
    """An export's file asked for before the export completed (``details.status``)."""
    error_code = "EXPORT_NOT_READY"
    http_status = 409


class ResourceDeleted(CortexError):
    error_code = "RESOURCE_DELETED"
    http_status = 410


class IdempotencyConflict(CortexError):
    error_code = "IDEMPOTENCY_CONFLICT"
    http_status = 409


class UnsupportedFormat(CortexError):
    error_code = "UNSUPPORTED_FORMAT"
    http_status = 422


class ScopeRegistrationExists(CortexError):
    error_code = "SCOPE_REGISTRATION_EXISTS"
    http_status = 409


class VocabularyExists(CortexError):  # PUT /v1/vocabularies/{name} replaces one
    error_code = "VOCABULARY_EXISTS"
    http_status = 409


class ErasurePreviewStale(CortexError):
    """More events under the scope since ``from_preview_id`` than the drift threshold (§8.6.3)."""
    error_code = "ERASURE_PREVIEW_STALE"
    http_status = 409


class EmbedderMismatch(CortexError):
    """The data dir's vectors were made by another embedder (or dimension)."""
    error_code = "EMBEDDER_MISMATCH"
    http_status = 409


class RateLimited(CortexError):
    """A caller's token bucket is empty (``details.retry_after`` seconds)."""
    error_code = "RATE_LIMITED"
    http_status = 429
    default_retriable = True


class Internal(CortexError):
    """Unexpected failure inside the engine (e.g. a scope actor crashed); retrying may succeed."""
    http_status = 500
    default_retriable = True


class NotImplementedYet(CortexError):
    """A reference endpoint this server does not implement yet."""
    error_code = "NOT_IMPLEMENTED"
    http_status = 501


class NotYetAvailable(CortexError):
    """An option whose prerequisite is not implemented yet (``records=forget`` needs erasure)."""
    error_code = "NOT_YET_AVAILABLE"
    http_status = 501


class WalUnavailable(CortexError):
    error_code = "WAL_UNAVAILABLE"
    http_status = 503
    default_retriable = True


class StoreClosed(WalUnavailable):
    """The storage backend was closed; no further reads or writes are possible on this handle."""
    default_retriable = False


class LeaseLost(WalUnavailable):  # a write fenced by a stale lease: nothing written (postgres/leases.py)
    default_retriable = False


class ScopeOwnedElsewhere(CortexError):
    """Multi-node: another node holds the lease of this scope's partition (``details.partition``,
    ``details.owner``); ask that node, or retry once its lease expires (docs/scale-out.md)."""
    error_code = "SCOPE_OWNED_ELSEWHERE"
    http_status = 503
    default_retriable = True


class DataDirLocked(CortexError):
    """Another process (or another open engine) already holds this data directory."""
    error_code = "DATA_DIR_LOCKED"
    http_status = 503


class DerivedLayerUnavailable(CortexError):
    error_code = "DERIVED_LAYER_UNAVAILABLE"
    http_status = 503
    default_retriable = True


class EmbedderUnavailable(CortexError):
    error_code = "EMBEDDER_UNAVAILABLE"
    http_status = 503


class LLMUnavailable(CortexError):
    """The LLM provider did not answer (down, timed out, overloaded, refused): ``details.reason``."""
    error_code = "LLM_UNAVAILABLE"
    http_status = 503
    default_retriable = True


# -- command line only (printed by ``cortexdb``, exit status 2; never served) -------------------
class IssuerConfigError(CortexError):
    """``serve``: an issuer directory, PEM or JWKS that cannot be loaded."""
    error_code = "INVALID_ISSUER_CONFIG"
    http_status = 500


class InvalidMintRequest(CortexError):
    """``cortexdb token mint`` refuses to sign what the server would refuse (never served)."""
    error_code = "INVALID_MINT_REQUEST"
    http_status = 422


# -- the Python SDK only (``cortexdb.client``; never served) ---------------------------------------
class ConnectionFailed(CortexError):
    """No answer came (unreachable, broken connection, timeout); the cause is ``__cause__``."""
    error_code = "CONNECTION_FAILED"
    http_status = 503  # what a gateway would answer; no server sends this code
    default_retriable = True


class HttpError(CortexError):
    """A failure at the HTTP layer as an envelope: the status and code are the instance's."""
    def __init__(self, status: int, code: str, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.http_status = status  # type: ignore[misc]
        self.error_code = code  # type: ignore[misc]


#: every error class of this module, by name (the list is made, so a new class cannot be missed)
__all__ = sorted(name for name, value in list(globals().items())
                 if isinstance(value, type) and issubclass(value, CortexError))  # fmt: skip
