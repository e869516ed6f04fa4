"""The client's settings and their defaults, who the client speaks as, and when it retries.

| setting | default | environment |
|---|---|---|
| ``base_url`` | ``http://127.0.0.1:8077`` (``make serve``) | ``CORTEX_URL`` |
| ``token`` | none (only ``dev_local`` accepts unsigned callers) | ``CORTEX_TOKEN`` |
| ``actor`` | the token's ``sub``; without a token ``user:local`` | ``CORTEX_ACTOR`` |
| ``scope`` (the default scope) | the actor itself (a personal scope) | ``CORTEX_SCOPE`` |
| ``timeout`` | 30 s (5 s to connect) | |
| ``max_retries`` | 3 | |
| ``backoff_base`` / ``backoff_max`` | 0.5 s / 8 s (full jitter) | |
| ``max_retry_after`` | 60 s | |
| ``stream_reconnects`` | 5 | |

The names are ``CORTEX_*``, as the server's and ``cortexdb erase``'s.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx

DEFAULT_URL = "http://127.0.0.1:8077"
LOCAL_ACTOR = "user:local"
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
RETRY_STATUSES = frozenset({502, 503, 504})  # a gateway's or an overloaded server's answers
# no byte of the request reached the server: safe to retry whatever it was
UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@attrs.frozen
class RetryPolicy:
    """Exponential back-off with full jitter, ``Retry-After`` honoured.

    Retried: a 429 (the rate limiter refused it before it ran) and a connection that was never
    made, whatever the call; a 502/503/504, an answer marked ``retriable``, or a connection
    lost mid-call only for calls that are safe to repeat — GET/PUT/DELETE, reads sent as POST
    (recall), and writes that carry an idempotency key (the SDK adds one to every write that
    takes one).  A ``Retry-After`` longer than ``max_retry_after`` is not waited out: the
    error is raised (its ``retry_after`` says how long the server asked for)."""

    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    max_retry_after: float = 60.0

    def backoff(self, attempt: int, jitter: float) -> float:
        """The pause before retry ``attempt + 1``: uniform in [0, min(max, base·2^attempt))."""
        return min(self.backoff_max, self.backoff_base * 2**attempt) * jitter

    def after_error(self, attempt: int, safe: bool, error: Exception, jitter: float) -> float | None:
        if attempt >= self.max_retries or not (safe or isinstance(error, UNSENT)):
            return None
        return self.backoff(attempt, jitter)

    def after_answer(self, attempt: int, safe: bool, status: int, retriable: bool | None,
                     retry_after: float | None, jitter: float) -> float | None:  # fmt: skip
        if attempt >= self.max_retries:
            return None
        if status != 429 and not (safe and (status in RETRY_STATUSES or retriable is True)):
            return None
        if retry_after is None:
            return self.backoff(attempt, jitter)
        return retry_after if retry_after <= self.max_retry_after else None


def retry_after_seconds(value: str | None, now: Callable[[], dt.datetime]) -> float | None:
    """``Retry-After`` as seconds: delta-seconds, or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now()).total_seconds())


def token_subject(token: str | None) -> str | None:
    """The ``sub`` claim of a PASETO v4.public or JWT token, read without verifying it (the
    server verifies; the SDK only needs the name to send as ``X-Cortex-Actor``)."""
    if not token:
        return None
    try:
        if token.startswith("v4.public."):
            body = _b64(token.split(".")[2])[:-64]  # the message, then a 64-byte signature
        elif token.count(".") == 2:
            body = _b64(token.split(".")[1])
        else:
            return None
        sub = json.loads(body).get("sub")
    except (ValueError, AttributeError, IndexError):
        return None
    return sub if isinstance(sub, str) else None


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@attrs.frozen
class Settings:
    base_url: str
    token: str | None
    token_provider: Callable[[], str] | None
    actor: str | None
    scope: str | None
    timeout: httpx.Timeout
    stream_timeout: httpx.Timeout
    retry: RetryPolicy
    stream_reconnects: int
    headers: Mapping[str, str]

    @classmethod
    def resolve(cls, base_url: str | None, *, token: str | None, token_provider: Callable[[], str] | None,
                actor: str | None, scope: str | None, timeout: float | httpx.Timeout | None,
                max_retries: int, backoff_base: float, backoff_max: float, max_retry_after: float,
                stream_reconnects: int, headers: Mapping[str, str] | None,
                env: Mapping[str, str] | None = None) -> Settings:  # fmt: skip
        """Arguments first, then the environment, then the defaults (the table above)."""
        env = os.environ if env is None else env
        if token is None and token_provider is None:
            token = env.get("CORTEX_TOKEN") or None
        if timeout is None:
            timeout = httpx.Timeout(30.0, connect=5.0)
        elif not isinstance(timeout, httpx.Timeout):
            timeout = httpx.Timeout(timeout)
        return cls(base_url=(base_url or env.get("CORTEX_URL") or DEFAULT_URL).rstrip("/"), token=token,
                   token_provider=token_provider, actor=actor or env.get("CORTEX_ACTOR") or None,
                   scope=scope or env.get("CORTEX_SCOPE") or None, timeout=timeout,
                   stream_timeout=httpx.Timeout(timeout.connect, read=None),
                   retry=RetryPolicy(max_retries, backoff_base, backoff_max, max_retry_after),
                   stream_reconnects=stream_reconnects, headers=dict(headers or {}))  # fmt: skip

    def credentials(self) -> tuple[str | None, str | None]:
        """(token, actor) for the next request: the provider asked afresh each time; the actor
        given, else the token's subject, else ``user:local`` when there is no token at all."""
        token = self.token_provider() if self.token_provider is not None else self.token
        if self.actor:
            return token, self.actor
        if token:
            return token, token_subject(token)
        return None, LOCAL_ACTOR

    def default_scope(self) -> str | None:
        return self.scope or self.credentials()[1]


def auth_headers(settings: Settings, user_agent: str) -> dict[str, str]:
    token, actor = settings.credentials()
    headers = {"User-Agent": user_agent, "Accept": "application/json", **settings.headers}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if actor:
        headers["X-Cortex-Actor"] = actor
    return headers


def clean_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Query parameters without the unset ones; booleans as ``true``/``false``; lists joined."""
    out: dict[str, Any] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, list | tuple | set | frozenset):
            value = ",".join(str(v) for v in value)
        out[key] = value
    return out
