"""Idempotency of the server's own writes (reference §6.3): a scope registration repeated with
its ``idempotency_key`` answers the first registration's response (``X-Cortex-Replay: true``);
the same key with another body is 409 ``IDEMPOTENCY_CONFLICT``.

The engine's writes keep their keys in the node's idempotency table, keyed (tenant, caller,
endpoint family, key) with the request's digest and ``created_at``; these records have the same
shape in the same table, so they expire with the engine's (``idempotency_ttl_seconds``, 24 h)
and its periodic prune removes them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from ..engine import jsoncodec
from ..engine.temporal import format_ts, parse_rfc3339
from ..errors import IdempotencyConflict


def digest(body: Any) -> str:
    return hashlib.sha256(jsoncodec.encode_canonical(body)).hexdigest()


class Replays:
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def _live(self, record: dict[str, Any]) -> bool:
        ttl = dt.timedelta(seconds=self.engine.config.idempotency_ttl_seconds)
        return parse_rfc3339(record["created_at"]) + ttl > self.engine.clock.now()

    async def earlier(self, tenant: str, caller: str, family: str, key: str, body: Any) -> Any:
        """The first response of this key, or None; 409 when it was used with another body."""
        record = await self.engine.tables.idempotency.get((tenant, caller, family, key))
        if record is None or not self._live(record):
            return None
        if record["body_hash"] != digest(body):
            raise IdempotencyConflict("this idempotency key was already used with a different body",
                                      details={"idempotency_key": key, "endpoint_family": family})  # fmt: skip
        return record["response"]

    async def seen(self, tenant: str, caller: str, family: str, key: str) -> bool:
        """Whether this key has a live record (the engine's writes keep theirs here too): the
        request is a replay, or a conflict the engine refuses."""
        record = await self.engine.tables.idempotency.get((tenant, caller, family, key))
        return record is not None and self._live(record)

    async def remember(self, tenant: str, caller: str, family: str, key: str, body: Any, response: Any) -> None:
        record = {"response": response, "body_hash": digest(body), "created_at": format_ts(self.engine.clock.now())}
        await self.engine.tables.idempotency.put((tenant, caller, family, key), record, sync=True)
