"""The pack cache (reference §18.2 items 20, 21): a pack can be fetched by ``pack_id`` for
``pack_ttl_seconds`` (60 s), and a recall repeated with the same ``idempotency_key`` by the same
caller within that time gets the same pack.  At most ``pack_cache_max`` packs, and at most
``pack_cache_bytes`` of them encoded, are kept: a recall burst evicts the oldest first.  A pack is
kept as its JSON (a pack of a grown scope is ~80 KB of JSON and about three times that as Python
objects; held as objects for their minute, five recalls a second kept ~70 MB and it grew with
the scope: issue 10's soak), and decoded again when it is fetched.  A forget empties the cache (``purge``); a recall that started
before it does not put its pack in afterwards (``epoch``).  A pack remembers who recalled it: an
answer may reuse only its caller's own packs (``get(pack_id, now, caller)``).  A key remembers the
digest of the request that made its pack: the same key with another request is a 409
``IDEMPOTENCY_CONFLICT`` (§6.6), not someone else's pack."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...errors import IdempotencyConflict, NotFound
from .. import jsoncodec

DEFAULT_PACK_CACHE_BYTES = 16 << 20


class PackCache:
    def __init__(self, ttl_seconds: float, max_packs: int, max_bytes: int = DEFAULT_PACK_CACHE_BYTES) -> None:
        self.ttl = dt.timedelta(seconds=ttl_seconds)
        self.max_packs, self.max_bytes = max_packs, max_bytes
        self._packs: dict[str, tuple[dt.datetime, bytes, str | None]] = {}  # id -> (expiry, JSON, caller)
        self._keys: dict[tuple[str, str], tuple[str, str]] = {}  # (caller, key) -> (pack id, digest)
        self.bytes = 0  # the kept packs' JSON
        self.epoch = 0  # bumped by every purge
        # expiries rise in insertion order while every put's moment is at least the last one's:
        # then ``expire`` looks at the oldest packs only, not at all of them every recall
        self._ordered, self._last_expiry, self._dropped = True, None, False

    def __len__(self) -> int:
        return len(self._packs)

    def put(self, pack: dict[str, Any], now: dt.datetime, key: tuple[str, str] | None = None,
            epoch: int | None = None, caller: str | None = None, digest: str = "") -> None:  # fmt: skip
        """Keep a pack; not when a purge came since its recall began (at ``epoch``), nor one
        larger than the whole byte budget."""
        if epoch is not None and epoch != self.epoch:
            return
        raw = jsoncodec.encode(pack)
        if len(raw) > self.max_bytes:
            return
        self._drop(pack["pack_id"])
        expiry = now + self.ttl
        if self._last_expiry is not None and expiry < self._last_expiry:
            self._ordered = False  # a clock set back: expire scans every pack until the cache empties
        self._last_expiry = expiry if self._last_expiry is None else max(expiry, self._last_expiry)
        self._packs[pack["pack_id"]] = (expiry, raw, caller)
        self.bytes += len(raw)
        while len(self._packs) > self.max_packs or self.bytes > self.max_bytes:  # a burst: oldest out
            self._drop(next(iter(self._packs)))
        if key is not None:
            self._keys[key] = (pack["pack_id"], digest)

    def _drop(self, pack_id: str) -> None:
        entry = self._packs.pop(pack_id, None)
        if entry is not None:
            self.bytes -= len(entry[1])
            self._dropped = True

    def by_key(self, key: tuple[str, str], digest: str = "") -> dict[str, Any] | None:
        """The pack an earlier recall with this (caller, idempotency key) made, if still cached
        (``expire`` first); 409 when that recall's request had another ``digest``."""
        pack_id, made_by = self._keys.get(key, (None, ""))
        entry = self._packs.get(pack_id) if pack_id is not None else None
        if entry is None:
            return None
        if made_by != digest:
            raise IdempotencyConflict("this idempotency key was already used with a different recall request",
                                      details={"idempotency_key": key[1], "endpoint_family": "/v1/recall",
                                               "pack_id": pack_id})  # fmt: skip
        return jsoncodec.decode(entry[1])

    def get(self, pack_id: str, now: dt.datetime, caller: str | None = None) -> dict[str, Any]:
        """The pack; with ``caller``, only when that caller recalled it (else: no such pack)."""
        self.expire(now)
        entry = self._packs.get(pack_id)
        if entry is None or (caller is not None and entry[2] not in (None, caller)):
            raise NotFound("no such pack (packs live 60 seconds)", details={"pack_id": pack_id})
        return jsoncodec.decode(entry[1])

    def purge(self) -> None:
        """Drop every pack (a forget: no pack may still cite what it removed)."""
        self._packs.clear()
        self._keys.clear()
        self.bytes = 0
        self.epoch += 1
        self._ordered, self._last_expiry, self._dropped = True, None, False

    def expire(self, now: dt.datetime) -> None:
        if self._ordered:  # the oldest first, up to the first that has not expired
            while self._packs:
                pack_id, (expires, _, _) = next(iter(self._packs.items()))
                if expires > now:
                    break
                self._drop(pack_id)
        else:
            for pack_id in [p for p, (expires, _, _) in self._packs.items() if expires <= now]:
                self._drop(pack_id)
        if not self._packs:
            self._ordered, self._last_expiry = True, None
        if self._dropped:  # the keys of packs gone (expired, or evicted by a burst)
            self._dropped = False
            for key in [k for k, (p, _) in self._keys.items() if p not in self._packs]:
                del self._keys[key]
