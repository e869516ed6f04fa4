"""An import's memory is bounded by its windows, whatever the file's length (issue 14): counted in
records held, never in time or bytes of a loaded machine."""

from __future__ import annotations

import itertools

import orjson
import pytest
import trio
import trio.testing

from cortexdb import EngineConfig, open_engine
from cortexdb.engine.transfer import imports, window

WINDOW, BULK = 10, 5


def mem0_file(n: int) -> bytes:
    results = [{"id": f"9d1c{i:08d}-0000-4000-8000-000000000000", "memory": f"note number {i}",
                "hash": f"{i:032x}", "metadata": None, "user_id": "alice",
                "created_at": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
                "updated_at": None} for i in range(n)]  # fmt: skip
    return orjson.dumps({"results": results})


async def held_at_most(monkeypatch, n: int, ordering: str) -> tuple[int, int]:
    """(the most records holding a mapped envelope at any bulk request, trims) of an import of
    ``n`` Mem0 records."""
    prepared: list = []
    original = window.prepare

    def register(item, strict):
        prepared.append(item)  # a strong reference: counted while it holds its envelope
        return original(item, strict)

    monkeypatch.setattr(imports, "prepare", register)
    trims: list[int] = []

    async def trim() -> bool:
        trims.append(len(prepared))
        return False

    monkeypatch.setattr(imports, "release_free_memory_soon", trim)
    most = 0
    config = EngineConfig(import_window=WINDOW, bulk_max_items=BULK, episode_idle_check=3600.0)
    async with open_engine("memory", id_seed=1, config=config) as engine:
        writes = engine.imports._writes  # the import's bulk write path
        bulk = writes.bulk

        async def counted(request, **kwargs):
            nonlocal most
            most = max(most, sum(1 for item in prepared if item.envelope is not None))
            return await bulk(request, **kwargs)

        monkeypatch.setattr(writes, "bulk", counted)
        started = await engine.imports.start("mem0", mem0_file(n), {"scope_template": "org:acme/user:{user_id}",
                                                                     "options": {"ordering": ordering}})  # fmt: skip
        status = await engine.imports.wait(started["import_id"])
        assert status["status"] == "completed" and status["items"]["written"] == n, status
    assert len(prepared) == n
    assert all(item.envelope is None for item in prepared)  # every written record released
    return most, len(trims)


async def test_the_records_an_import_holds_stay_under_a_window_and_a_piece_whatever_the_file_length(monkeypatch):
    # batch_throughput (strict_temporal sorts on disk: tests/test_import_sort.py)
    ordering, window_size = "batch_throughput", BULK
    short, short_trims = await held_at_most(monkeypatch, 3 * WINDOW, ordering)
    long, long_trims = await held_at_most(monkeypatch, 30 * WINDOW, ordering)
    # the window being written (shrinking as each request is written) and the next, read a
    # piece (a bulk request's records) at a time as it shrinks: not two whole windows
    assert 0 < short <= window_size + BULK
    assert 0 < long <= window_size + BULK
    # what the windows freed is given back to the OS once every import_window records
    assert (short_trims, long_trims) == (3, 30)


async def test_the_pacer_lets_the_next_window_grow_only_as_this_one_is_written():
    source = iter(range(25))

    def read(count):
        got = [window.Item(position) for position in itertools.islice(source, count)]
        return got, len(got)

    async def inline(function, *args):  # the job reads in a thread; here on the loop, to be awaited
        await trio.lowlevel.checkpoint()
        return function(*args)

    pacer = window.Pacer(10 + 5)
    first, _ = await window.read_window(read, 10, 5, pacer, inline)
    assert len(first) == 10 and pacer.free == 5
    async with trio.open_nursery() as nursery:
        box: list = []

        async def ahead():
            box.append(await window.read_window(read, 10, 5, pacer, inline))

        nursery.start_soon(ahead)
        await trio.testing.wait_all_tasks_blocked()
        assert pacer.free == 0 and not box  # one piece read ahead, the rest waits for writes
        pacer.written(5)  # the first request of this window written
        await trio.testing.wait_all_tasks_blocked()
        assert box and len(box[0][0]) == 10 and pacer.free == 0
        pacer.window_done(10)  # the first window is done: its other 5 records freed
    assert pacer.free == 5
    pacer.window_done(10)  # and the second (none of it written: all freed at once)
    last, _ = await window.read_window(read, 10, 5, pacer, inline)
    assert [item.position for item in last] == [20, 21, 22, 23, 24] and pacer.free == 10  # a short piece gives back


def test_prepare_takes_the_scope_out_and_orders_by_observed_time():
    from cortexdb.engine.transfer.mapping import Item

    later = Item(1, envelope={"scope": "org:a", "context": {"observed_at": "2026-01-02T00:00:00Z"}})
    earlier = Item(2, envelope={"scope": "org:a", "context": {"observed_at": "2026-01-01T00:00:00Z"}})
    timeless = Item(0, envelope={"scope": "org:b", "context": {}})
    items = [window.prepare(item, True) for item in (later, earlier, timeless)]
    assert [item.scope for item in items] == ["org:a", "org:a", "org:b"]
    assert all("scope" not in item.envelope for item in items)
    assert [item.position for item in sorted(items, key=lambda item: item.order)] == [2, 1, 0]
    window.release(items)
    assert all(item.envelope is None for item in items)



def test_collections_are_rarer_while_imports_write_and_the_last_one_puts_the_thresholds_back():
    import gc

    from cortexdb.engine.transfer import collector

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with collector.Thresholds((5000, 10, 15)):
            assert gc.get_threshold() == (5000, 10, 15) and collector.holders() == 1
            with collector.Thresholds((100, 5, 50)):  # a second import: the first's stay
                assert gc.get_threshold() == (5000, 10, 15) and collector.holders() == 2
            assert gc.get_threshold() == (5000, 10, 15)  # the first is still writing
        assert gc.get_threshold() == (700, 10, 10) and collector.holders() == 0
        gc.set_threshold(700, 20, 500)
        with collector.Thresholds((5000, 10, 15)):  # each never below what the application set
            assert gc.get_threshold() == (5000, 20, 500)
        with collector.Thresholds(None):  # None: the collector is left alone
            assert gc.get_threshold() == (700, 20, 500) and collector.holders() == 0
        assert gc.get_threshold() == (700, 20, 500)
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("fails", [False, True])
async def test_an_import_raises_the_thresholds_only_while_it_writes(monkeypatch, fails):
    import gc

    from cortexdb.engine.transfer import collector

    seen: list[tuple] = []
    config = EngineConfig(import_window=WINDOW, bulk_max_items=BULK, episode_idle_check=3600.0,
                          import_gc_thresholds=(7777, 11, 77))  # fmt: skip
    before = gc.get_threshold()
    async with open_engine("memory", id_seed=1, config=config) as engine:
        writes = engine.imports._writes  # the import's bulk write path
        bulk = writes.bulk

        async def observed(request, **kwargs):
            seen.append(gc.get_threshold())
            if fails:
                raise RuntimeError("the store broke")
            return await bulk(request, **kwargs)

        monkeypatch.setattr(writes, "bulk", observed)
        started = await engine.imports.start("mem0", mem0_file(3 * WINDOW), {"scope_template": "org:acme/user:{user_id}"})
        status = await engine.imports.wait(started["import_id"])
        assert status["status"] == ("failed" if fails else "completed"), status
    wanted = tuple(max(now, raised) for now, raised in zip(before, (7777, 11, 77), strict=True))
    assert seen and all(thresholds == wanted for thresholds in seen)
    assert gc.get_threshold() == before and collector.holders() == 0  # put back, failed or not
