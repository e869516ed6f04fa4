"""``CortexClient`` (sync) and ``AsyncCortexClient`` (Trio or asyncio): the same operations
(``_ops``, ``_admin_ops``) over a blocking or an async transport (``_transport``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ._admin_ops import Admin, Audit, Auth, Blobs, Erasures, Forgetting, Phrases, Policy, Scopes
from ._memory_ops import Intake, Proposals, Signals
from ._ops import Beliefs, Episodes, Events, Facts, Lifecycle, Writes
from ._relations import Relationships
from ._settings import Settings
from ._transfer import Transfers
from ._transport import AsyncTransport, SyncTransport
from ._understanding import Understanding, Vocabularies


class _Client(Writes, Forgetting, Transfers):
    """Writes, recall, forget, imports and exports on the client itself; every other family as a
    namespace."""

    def __init__(self, transport: Any) -> None:
        super().__init__(transport)
        self.events, self.episodes, self.facts = Events(transport), Episodes(transport), Facts(transport)
        self.beliefs, self.understanding = Beliefs(transport), Understanding(transport)
        self.lifecycle, self.erasures, self.blobs = Lifecycle(transport), Erasures(transport), Blobs(transport)
        self.scopes, self.policy, self.audit = Scopes(transport), Policy(transport), Audit(transport)
        self.auth, self.phrases, self.admin = Auth(transport), Phrases(transport), Admin(transport)
        self.vocabularies = Vocabularies(transport)
        self.relationships = Relationships(transport)  # client.relationships.walk / .create
        self.signals, self.proposals, self.intake = Signals(transport), Proposals(transport), Intake(transport)

    @property
    def settings(self) -> Settings:
        return self.transport.settings

    @property
    def base_url(self) -> str:
        return self.settings.base_url

    @property
    def scope(self) -> str | None:
        """The default scope: the one given (or ``CORTEX_SCOPE``), else the actor's own."""
        return self.settings.default_scope()

    @property
    def actor(self) -> str | None:
        return self.settings.credentials()[1]


def _settings(base_url: str | None, kw: dict[str, Any]) -> Settings:
    return Settings.resolve(base_url, token=kw.pop("token", None), token_provider=kw.pop("token_provider", None),
                            actor=kw.pop("actor", None), scope=kw.pop("scope", None), timeout=kw.pop("timeout", None),
                            max_retries=kw.pop("max_retries", 3), backoff_base=kw.pop("backoff_base", 0.5),
                            backoff_max=kw.pop("backoff_max", 8.0), max_retry_after=kw.pop("max_retry_after", 60.0),
                            stream_reconnects=kw.pop("stream_reconnects", 5), headers=kw.pop("headers", None),
                            env=kw.pop("env", None))  # fmt: skip


class CortexClient(_Client):
    """The blocking client.

    ``CortexClient()`` talks to ``CORTEX_URL`` (default ``http://127.0.0.1:8077``) as
    ``CORTEX_ACTOR`` (default: the token's ``sub``, or ``user:local`` without a token) with
    ``CORTEX_TOKEN``; calls that take a scope default to ``scope=`` / ``CORTEX_SCOPE`` / the
    actor's own.  Keywords: ``token``, ``token_provider`` (called before each request),
    ``actor``, ``scope``, ``timeout`` (30 s; 5 s to connect), ``max_retries`` (3),
    ``backoff_base`` (0.5 s), ``backoff_max`` (8 s), ``max_retry_after`` (60 s),
    ``stream_reconnects`` (5), ``headers``; for tests ``transport`` (an httpx transport),
    ``sleep``, ``jitter`` and ``now``.
    """

    def __init__(self, base_url: str | None = None, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], Any] | None = None, jitter: Callable[[], float] | None = None,
                 now: Callable[[], dt.datetime] | None = None, **kw: Any) -> None:  # fmt: skip
        settings = _settings(base_url, kw)
        _no_leftovers(kw)
        super().__init__(SyncTransport(settings, transport=transport, sleep=sleep, jitter=jitter, now=now))

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> CortexClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncCortexClient(_Client):
    """The async client: every call is awaited, every iterator is ``async for``.  Same settings
    as ``CortexClient``; ``sleep`` is an async function here."""

    def __init__(self, base_url: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Any] | None = None, jitter: Callable[[], float] | None = None,
                 now: Callable[[], dt.datetime] | None = None, **kw: Any) -> None:  # fmt: skip
        settings = _settings(base_url, kw)
        _no_leftovers(kw)
        super().__init__(AsyncTransport(settings, transport=transport, sleep=sleep, jitter=jitter, now=now))

    async def aclose(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> AsyncCortexClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _no_leftovers(kw: Mapping[str, Any]) -> None:
    if kw:
        raise TypeError(f"unexpected keyword argument {sorted(kw)[0]!r}")


Memory = CortexClient
AsyncMemory = AsyncCortexClient
