"""The episodes table (``EP``) and its open episodes' member rows (``EK``).

A sealed episode's row holds the whole record, as it always did.  An open episode grows by an
event at every commit that adds one, and writing its row whole each time cost what the episode
holds (up to ``episode_max_events`` ids twice and as many causal links: ~45 KB an event at the
default 500; docs/decisions.md, "An open episode's members as rows of their own").  So the episode
step writes an open episode as a *header* — its row with its three lists empty and
``"open_members": n`` — and one ``EK`` row per member (``scope, ep_id, position``: the member's
event id and its causal role), each written once, when the event joins.

Every read here gives the episode whole, whatever form its row is in: a row with
``open_members`` has its lists filled from its first ``n`` member rows (``events`` and
``supports`` are the members' ids, ``causal_chain`` their links), a row without it is read as
stored (every row written before this form existed, and every sealed episode).

Writes keep one rule: member rows exist exactly under a header that counts them.  ``open_ops``
writes the header and the rows from the first position the stored header did not hold;
``whole_ops`` (a seal, a cancel, a forget, resegmentation: anything that is not an append)
writes the row whole and deletes the member rows; ``delete_ops`` deletes both.  Each returns
operations for the caller's one atomic write, so a crash keeps either the old form or the new —
except in a forget, which writes in chunks of ``CHUNK_OPS``: a rewrite torn between two chunks
leaves a header with its first rows deleted.  A read then gives the rows there are (and says so
in the log), never fails, and the episode's next write writes all its rows again (``held``).

A header also holds ``"members_gen"``: a random token written with the rows whenever they are
written from position 0, and kept by every append.  A scope actor's reads keep the rows they
read decoded under that token (``episode_rows.MemberRows``) and read again only the rows past
those, for as long as the stored header carries the same token (docs/decisions.md, "An open
episode's member rows read once").  A header without one (an older build's) is read whole each
time, and gets one at its next append.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from functools import cached_property
from typing import Any

from .. import jsoncodec
from ..model import Episode, converter
from ..model.converter import episode_header_wire
from ..spi.kv import Delete, KVStore, Op, Put
from . import keys
from .episode_rows import MemberRows, new_generation
from .table import JSON, Records, Table

log = logging.getLogger(__name__)

MEMBERS = "open_members"  # the header's count of member rows
GENERATION = "members_gen"  # the header's token of its rows' generation (episode_rows.py)
OPEN_MEMBERS = b'"open_members":'  # in the stored bytes of a header (and of no whole row but by chance)
LISTS = ("events", "supports", "causal_chain")
RETRIES = 8  # reads of a header changing under a reader (each retry means a commit came between)
WIDTH = 10  # a member row's position, zero-padded: rows sort in the order events joined


def position(index: int) -> str:
    return str(index).zfill(WIDTH)


class _Filled(Table[Any]):
    """The episodes' rows as wire dicts (the JSON of a whole record), member rows filled in."""

    def __init__(self, store: KVStore, prefix: bytes, members: Table[Any]) -> None:
        super().__init__(store, prefix, JSON)
        self.members = members
        self.cache: MemberRows | None = None  # a scope actor's (EpisodeTable.keep_rows)

    async def fill(self, name: str, wire: dict[str, Any]) -> dict[str, Any] | None:
        """``wire`` (the decoded row of ``name``) whole, or None when the row is gone.  A header
        and its rows are two reads: a commit between them (the lane goes on while a recall
        reads) is seen as a header that changed when it is read again, and the read is made
        again from the new one; after ``RETRIES`` of those, from one snapshot."""
        cache = self.cache
        for _ in range(RETRIES):
            count = wire.get(MEMBERS)
            if count is None:
                if cache is not None:
                    cache.drop(name)
                return wire
            generation = wire.get(GENERATION)
            rows = await self._member_rows(name, count, generation)
            raw = await self.store.get(self.key(name))
            again = jsoncodec.decode(raw) if raw is not None else None
            if again is None:  # deleted meanwhile (a forget, a rebuild): no such episode now
                if cache is not None:
                    cache.drop(name)
                return None
            if again == wire:
                if cache is not None and generation is not None and len(rows) == count:
                    cache.put(name, generation, rows)
                return _whole(name, wire, rows)
            wire = again
        return await self._consistent(name)

    async def _member_rows(self, name: str, count: int, generation: str | None) -> list[Any]:
        """The first ``count`` member rows of ``name``, decoded: those cached under
        ``generation`` and the ones past them, or all of them read.  The cached rows are used
        only while the first row is still stored: a forget's rewrite torn between its chunks
        deletes the rows first to last under an unchanged header, and a read then gives the rows
        there are, as it does uncached."""
        under = self.members.key((name, ""))
        cached = None
        if self.cache is not None and generation is not None:
            cached = self.cache.get(name, generation)
        if cached is not None and len(cached) <= count and \
                await self.store.get(self.members.key((name, position(0)))) is not None:  # fmt: skip
            if len(cached) == count:
                return cached
            start = self.members.key((name, position(len(cached))))
            return cached + _rows([value async for _, value in
                                   self.store.scan(prefix=under, start=start, limit=count - len(cached))])  # fmt: skip
        return _rows([value async for _, value in self.store.scan(prefix=under, limit=count)])

    async def _consistent(self, name: str) -> dict[str, Any] | None:
        """The row and its members read from one snapshot (a scope appending faster than the
        retries above could read)."""
        snapshot = await self.store.snapshot()
        try:
            raw = await snapshot.get(self.key(name))
            if raw is None:
                return None
            wire = jsoncodec.decode(raw)
            if wire.get(MEMBERS) is None:
                return wire
            rows = _rows([value async for _, value in
                          snapshot.scan(prefix=self.members.key((name, "")), limit=wire[MEMBERS])])  # fmt: skip
            return _whole(name, wire, rows)
        finally:
            await snapshot.close()

    async def get(self, key: Any) -> Any:
        wire = await super().get(key)
        return None if wire is None else await self.fill(key, wire)

    async def get_many(self, names: Collection[str]) -> dict[str, Any]:
        found = await super().get_many(names)
        filled = {name: await self.fill(name, wire) for name, wire in found.items()}
        return {name: wire for name, wire in filled.items() if wire is not None}

    async def scan(self, under: Any = (), **bounds: Any) -> AsyncIterator[tuple[str, Any]]:
        async for name, wire in super().scan(under, **bounds):
            whole = await self.fill(name, wire)
            if whole is not None:
                yield name, whole


def _rows(raws: list[bytes]) -> list[Any]:
    """Member rows decoded from their stored JSON: as one array (a recall reads an open
    episode's rows, up to ``episode_max_events`` of them, and a decode each cost three times
    as much: docs/decisions.md, "The open episode's header without its lists"), or one by one
    when a row was written by the fallback encoder (``jsoncodec.decode``'s rule)."""
    if any(raw[:1] in jsoncodec.EXACT_MARKS for raw in raws):
        return [jsoncodec.decode(raw) for raw in raws]
    return jsoncodec.decode(b"[" + b",".join(raws) + b"]")


def _whole(name: str, wire: dict[str, Any], rows: list[Any]) -> dict[str, Any]:
    """A header's wire form with its lists filled from its member rows.  Fewer rows than it
    counts (a write torn between them: a forget's rewrite writes in chunks) is said in the log
    and read as the rows there are, never a failed read; the next write of the episode writes
    all its rows again (``EpisodeTable.held``)."""
    count = wire.pop(MEMBERS)
    wire.pop(GENERATION, None)
    if len(rows) != count:
        log.warning("episode %s: its header counts %d member rows, %d are stored; read with those",
                    name, count, len(rows))  # fmt: skip
    ids = [row[0] for row in rows]
    wire["events"], wire["supports"] = ids, list(ids)
    wire["causal_chain"] = [{"event": event, "role": role} for event, role in rows]
    return wire


def header_wire(episode: Episode) -> dict[str, Any]:
    """An open episode's header as wire: the episode with its three lists empty, unstructured
    without them (unstructuring the lists and then emptying them cost what the episode holds at
    every commit that grew it: up to ``episode_max_events`` links; docs/decisions.md, "The open
    episode's header without its lists")."""
    return episode_header_wire(episode)


class EpisodeTable(Table[Episode]):
    """``Table[Episode]`` over ``EP`` whose reads give whole episodes (module docstring)."""

    def __init__(self, store: KVStore, scope: str) -> None:
        super().__init__(store, keys.prefix(keys.EPISODES, scope), Records(Episode))
        self.members: Table[Any] = Table(store, keys.prefix(keys.EPISODE_MEMBERS, scope), JSON)
        self._structure = converter.get_structure_hook(Episode)

    @cached_property
    def json(self) -> Table[Any]:
        return _Filled(self.store, self.prefix, self.members)

    def _record(self, wire: dict[str, Any]) -> Episode:
        return self._structure(wire, Episode)

    # -- reading: every method a reader of episodes uses gives them whole -----------------------
    async def get(self, key: Any) -> Episode | None:
        wire = await self.json.get(key)
        return None if wire is None else self._record(wire)

    async def get_many(self, names: Collection[str]) -> dict[str, Episode]:
        return {name: self._record(wire) for name, wire in (await self.json.get_many(names)).items()}

    async def scan(self, under: Any = (), **bounds: Any) -> AsyncIterator[tuple[str, Episode]]:
        async for name, wire in self.json.scan(under, **bounds):
            yield name, self._record(wire)

    async def items(self, under: Any = (), **bounds: Any) -> AsyncIterator[tuple[tuple[str, ...], Episode]]:
        async for name, episode in self.scan(under, **bounds):
            yield (name,), episode

    async def page(self, cursor: str | None, *, limit: int, under: Any = (),
                   convert: Callable[[str, Episode], Awaitable[Any]] | None = None,
                   keep: Callable[[Any], bool] | None = None) -> dict[str, Any]:  # fmt: skip
        filled = self.json

        async def whole(name: str, wire: Any) -> Any:
            found = await filled.fill(name, wire)
            if found is None:  # deleted since the page's scan read it
                return None
            episode = self._record(found)
            return await convert(name, episode) if convert is not None else episode

        return await Table(self.store, self.prefix, JSON).page(cursor, limit=limit, under=under, convert=whole, keep=keep)

    async def page_many(self, cursor: str | None, *, limit: int, under: Any = (),
                        expand: Callable[[str, Episode | None], Awaitable[list[Any]]],
                        more: AsyncIterator[str] | None = None) -> dict[str, Any]:  # fmt: skip
        filled = self.json

        async def whole(name: str, wire: Any) -> list[Any]:
            found = None if wire is None else await filled.fill(name, wire)
            return await expand(name, None if found is None else self._record(found))

        return await Table(self.store, self.prefix, JSON).page_many(
            cursor, limit=limit, under=under, expand=whole, more=more)  # fmt: skip

    # -- writing ---------------------------------------------------------------------------------
    def keep_rows(self, most: int) -> None:
        """Keep up to ``most`` member rows of open episodes decoded between reads (a scope
        actor's partition: ``EngineConfig.episode_rows_cached``; 0: none)."""
        self.json.cache = MemberRows(most) if most > 0 else None

    @property
    def rows_cache(self) -> MemberRows | None:
        return self.json.cache

    async def held(self, episode_id: str) -> int:
        """How many member rows the stored row of ``episode_id`` counts (0 for a row stored
        whole, or none)."""
        return (await self._held(episode_id))[0]

    async def _held(self, episode_id: str) -> tuple[int, str | None]:
        """``held`` and the stored header's generation of rows (None: none, or no rows held)."""
        raw = await self.store.get(self.key(episode_id))
        if raw is None or OPEN_MEMBERS not in raw:
            return 0, None
        header = jsoncodec.decode(raw)
        count = int(header.get(MEMBERS, 0))
        ends = (self.members.key((episode_id, position(0))), self.members.key((episode_id, position(count - 1))))
        for key in ends if count else ():
            if await self.store.get(key) is None:
                return 0, None  # rows missing (a torn rewrite deletes them first to last): write them all again
        return count, header.get(GENERATION) if count else None

    async def open_ops(self, episode: Episode) -> list[Op]:
        """The writes of an open episode that grew by appends only since it was stored: its
        header, and the member rows the stored header does not count yet.  An episode whose
        lists are not one member per position (a cancel or a forget rewrote them) is written
        whole.  Rows written from position 0 get a new generation; an append keeps the stored
        one (a header without one, an older build's, gets one: its rows are all there)."""
        ids = episode.events
        if ids != episode.supports or ids != [link.event for link in episode.causal_chain]:
            return await self.whole_ops(episode)
        held, generation = await self._held(episode.id)
        if held > len(ids):  # not an append (cannot happen: a removal writes the row whole)
            held = 0
        wire = header_wire(episode)
        wire[MEMBERS] = len(ids)
        wire[GENERATION] = generation if held and generation is not None else new_generation()
        ops: list[Op] = [Put(self.key(episode.id), jsoncodec.encode(wire))]
        ops += [self.members.put_op((episode.id, position(i)), [link.event, link.role])
                for i, link in enumerate(episode.causal_chain[held:], held)]  # fmt: skip
        return ops

    async def member_deletes(self, episode_id: str) -> list[Op]:
        return [Delete(key) async for key, _ in self.store.scan(prefix=self.members.key((episode_id, "")))]

    async def whole_ops(self, episode: Episode) -> list[Op]:
        """The row of ``episode`` written whole (its closed form), and its member rows gone."""
        return [*await self.member_deletes(episode.id), self.put_op(episode.id, episode)]

    async def delete_ops(self, episode_id: str) -> list[Op]:
        return [*await self.member_deletes(episode_id), self.delete_op(episode_id)]
