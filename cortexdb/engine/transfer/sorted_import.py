"""The ``strict_temporal`` import job's write phase: sort the file into runs, then merge and write.

Two steps in the ``write`` phase, each resumable from the job's record (``state["sort"]``):

1. **Sort.** The source is read once, ``import_window`` records at a time in a thread; each chunk
   is encoded, sorted and written as a run file (``extsort.Runs.spill``: fsynced before the record
   names it); a record that cannot be mapped is reported (or aborts the job) here, before anything
   is written.  After each run the job persists, in one write, the runs, the source records
   consumed and the counts (``read``, ``skipped``, ``failed``).  A job resumed in this step
   removes the files its record does not name and skips the records consumed.
2. **Merge.** The runs are merged in key order (``extsort``: by scope, then ``observed_at``, then
   file order) into bulk requests of one scope and at most ``bulk_max_items`` records, the next
   request read (in a thread) while one is written.  After each request the job persists how many
   merged records it has committed (``state["committed"]``): a resumed job skips exactly those in
   the same order (the key is a total order) and re-writes at most one request, which replays.

``fraction_complete`` gives the sort ``SORT_SHARE`` of the write phase (by bytes of the source
read) and the merge the rest (by records committed).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import outcome
import trio

from ...errors import Internal
from ..memtrim import release_free_memory_soon
from . import extsort, spool
from .mapping import Item

SORT_SHARE = 0.15  # of the write phase: reading and mapping is about a tenth of a record's cost


def runs_of(ctx: Any, run: Any) -> extsort.Runs:
    config = ctx.config
    directory = extsort.runs_dir(spool.transfer_dir(ctx), run.id)
    return extsort.Runs(directory, config.import_sort_max_bytes, config.import_sort_fan_in)


@attrs.frozen
class Service:
    """What the import service lends this step: its context, and its writing of mapped records
    (``write(run, items)``), learning of committed ones (``learn``) and reporting of bad ones
    (``failed(run, item, code, detail)``)."""

    ctx: Any
    write: Callable[[Any, list[Item]], Awaitable[None]]
    learn: Callable[[Any, list[Item]], Awaitable[None]]
    failed: Callable[[Any, Item, str, str], None]


async def write_sorted(service: Service, run: Any, source: Any) -> None:
    """The ``strict_temporal`` write phase (``source(fh)``: the importer's records of the open
    file)."""
    runs = runs_of(service.ctx, run)
    state = run.state.setdefault("sort", {"runs": [], "records": 0, "next": 0, "done": False})
    await _disk(runs.prune, state["runs"])
    if not state["done"]:
        await _sort(service, run, runs, state, source)
        if run.record["cancel_requested_at"] is not None:
            return
        state["done"] = True
        await run.tick(SORT_SHARE)
    await _merge(service, run, runs, state)


async def _sort(service: Service, run: Any, runs: extsort.Runs, state: dict[str, Any], source: Any) -> None:
    params, progress = run.params, run.progress
    size = max(1, params["size"])
    window = max(1, service.ctx.config.import_window)
    with open(params["path"], "rb") as fh:
        records = source(fh)
        consumed = state["records"]
        scopes: dict[Any, bytes] = {}

        def read_chunk() -> tuple[extsort.Chunk, list[Item], int, int]:
            chunk = extsort.Chunk()
            bad: list[Item] = []
            count = 0
            for ordinal, item in enumerate(itertools.islice(records, window), start=state["records"]):
                count += 1
                if item.envelope is None:  # an error, or a record the importer skips
                    bad.append(item)
                    continue
                chunk.add(*extsort.encode(item, ordinal, scopes))
                item.envelope = None  # the mapped record is not held: its frame is
            return chunk, bad, count, fh.tell()

        if consumed:  # a resumed job: the records its runs hold (or it reported) are read past
            await trio.to_thread.run_sync(_skip, records, consumed)
        while run.record["cancel_requested_at"] is None:
            chunk, bad, count, position = await trio.to_thread.run_sync(read_chunk)
            if not count:
                break
            if chunk:  # spilled before anything is counted: a retried phase counts each record once
                spilled = await _disk(runs.spill, f"run-{state['next']:06d}", chunk, state["runs"])
                state["next"] += 1
                state["runs"].append(spilled)
            chunk = None  # noqa: F841 (not alive while the next chunk is read)
            progress["read"] += count
            for item in bad:
                if item.error is not None:
                    service.failed(run, item, item.error, item.detail)
                else:
                    progress["skipped"] += 1
            state["records"] += count
            await run.tick(SORT_SHARE * position / size)
            while len(state["runs"]) > runs.fan_in:
                await _merge_pass(run, runs, state, position / size)
            await release_free_memory_soon()


async def _merge_pass(run: Any, runs: extsort.Runs, state: dict[str, Any], fraction: float) -> None:
    """The ``fan_in`` smallest runs merged into one: durable, then named by the record, then
    the inputs removed."""
    ordered = sorted(state["runs"], key=lambda r: (r["bytes"], r["name"]))
    inputs, rest = ordered[: runs.fan_in], ordered[runs.fan_in :]
    name = f"run-{state['next']:06d}"
    state["next"] += 1
    merged = await _disk(runs.merge_pass, name, inputs + rest)
    state["runs"] = [*rest, merged]
    await run.tick(SORT_SHARE * fraction)
    for old in inputs:
        await trio.to_thread.run_sync(spool.remove, runs.path(old["name"]))


async def _disk(work: Any, *args: Any) -> Any:
    """``work(*args)`` on the runs, in a thread; a failing disk (full, unwritable) is an error
    the job names, retried as the runner retries (``job_retry_limit``), then ``failed``."""
    try:
        return await trio.to_thread.run_sync(work, *args)
    except OSError as exc:
        raise Internal(f"the import's sorted runs could not be written or read: {exc}") from None


def _skip(records: Any, count: int) -> None:
    for _ in itertools.islice(records, count):
        pass


async def _merge(service: Service, run: Any, runs: extsort.Runs, state: dict[str, Any]) -> None:
    config = service.ctx.config
    limit, trim_every = config.bulk_max_items, max(1, config.import_window)
    total = max(1, sum(r["count"] for r in state["runs"]))
    done = run.state.get("committed", 0)
    frames = runs.merged(state["runs"])
    pending: list[tuple[bytes, Item]] = []  # a record read past the end of a request (another scope's)
    shared: dict[str, str] = {}  # the strings the decoded records repeat, one object each (extsort.share)

    def next_request() -> list[Item]:
        """The next records of one scope, at most ``limit``, decoded as read (in a thread: a
        frame's payload is valid only until the next is read)."""
        group = [item for _, item in pending]
        scope = pending[0][0] if pending else None
        pending.clear()
        for key, payload in frames:
            item = extsort.decode(payload, shared)
            if group and (key[0] != scope or len(group) >= limit):
                pending.append((key[0], item))
                break
            group.append(item)
            scope = key[0]
        return group

    read = functools.partial(trio.to_thread.run_sync, next_request)
    seq, ahead = 0, await read()
    try:
        while ahead and run.record["cancel_requested_at"] is None:
            items, start = ahead, seq
            seq += len(items)
            if seq <= done:  # committed before an interruption
                await service.learn(run, items)
                ahead = await read()
                continue
            if start < done:
                await service.learn(run, items[: done - start])
                items = items[done - start :]
            async with trio.open_nursery() as nursery:
                box: list[outcome.Outcome] = []
                nursery.start_soon(_read_ahead, read, box)
                written = await outcome.acapture(service.write, run, items)
            written.unwrap()
            items = ahead = None  # type: ignore[assignment]
            run.state["committed"] = seq
            await run.tick(SORT_SHARE + (1 - SORT_SHARE) * seq / total)
            ahead = box[0].unwrap()
            if seq // trim_every > start // trim_every:
                await release_free_memory_soon()
    finally:
        frames.close()  # type: ignore[attr-defined]  (the run files' readers)


async def _read_ahead(read: Any, box: list[outcome.Outcome]) -> None:
    box.append(await outcome.acapture(read))
