"""The lifecycle fan-out (issue 10 part 8): many subscribers keep up, in order, none lost; a slow
one still gets ``lagging``; a stream batches, encodes each record once, and ends on shutdown."""

from __future__ import annotations

import contextlib
import math

import pytest
import trio
import trio.testing

from cortexdb import ManualClock
from cortexdb.backends.memory.store import MemoryStore
from cortexdb.engine.actors.bus import LifecycleBus, LifecycleFilter
from cortexdb.engine.ids import IdGenerator
from cortexdb.engine.storage import NodeTables
from cortexdb.server.policy import Principal
from cortexdb.server.streams import FrameCache, lifecycle_batches

from .server_support import body, server

SCOPES = ["org:acme/user:alice", "org:acme/user:bob", "org:acme/team:core"]


def new_bus() -> LifecycleBus:
    clock = ManualClock("2026-05-13T15:42:09Z")
    return LifecycleBus(NodeTables(MemoryStore()).lifecycle, IdGenerator(clock, seed=3), clock)


async def publish(bus: LifecycleBus, total: int, per_commit: int) -> list:
    """``total`` records over the three scopes, committed ``per_commit`` at a time; between two
    commits every consumer runs until it blocks again."""
    published = []
    for start in range(0, total, per_commit):
        records = [bus.reserve("captured", scope=SCOPES[i % 3], event_id=f"evt_{i}")
                   for i in range(start, min(total, start + per_commit))]  # fmt: skip
        bus.commit(reversed(records))  # commit order does not matter: publication is in id order
        published += records
        await trio.testing.wait_all_tasks_blocked()
    return published


@pytest.mark.parametrize("per_commit", [1, 7, 50])
async def test_many_subscribers_receive_every_record_in_order(per_commit):
    bus = new_bus()
    filters = [None, "org:acme", *SCOPES] * 8  # 40 subscribers: firehose, a parent, each scope
    subscriptions = [await bus.subscribe(LifecycleFilter(scope=f), capacity=64) for f in filters]
    received: list[list] = [[] for _ in subscriptions]
    done = trio.Event()

    async def consume(n: int) -> None:
        subscription = subscriptions[n]
        while not subscription.ended:
            await subscription.wait(done)
            if done.is_set() and not subscription.buffered:
                return
            received[n] += subscription.take()

    async with trio.open_nursery() as nursery:
        for n in range(len(subscriptions)):
            nursery.start_soon(consume, n)
        await trio.testing.wait_all_tasks_blocked()
        published = await publish(bus, 600, per_commit)
        done.set()
    for n, wanted in enumerate(filters):
        expected = [r.lifecycle_id for r in published if wanted is None or r.scope.startswith(wanted)]
        assert [r.lifecycle_id for r in received[n]] == expected
        assert not subscriptions[n].lagged
    assert bus.statistics()["subscribers"] == len(filters)


async def test_a_subscriber_that_does_not_read_still_gets_lagging_and_the_others_carry_on():
    bus = new_bus()
    slow = await bus.subscribe(capacity=5)
    fast = await bus.subscribe(capacity=5)
    given = (await publish(bus, 2, 2))[-1]
    assert slow.take()[-1] is given and len(fast.take()) == 2
    for _ in range(3):
        await publish(bus, 4, 4)
        assert len(fast.take()) == 4
    taken = slow.take()
    assert [r.stage for r in taken] == ["lagging"]
    # resuming after the last record it was given loses nothing
    assert taken[0].payload == {"behind_by": 5, "resume_from": given.lifecycle_id}
    assert slow.ended and slow.lagged and not fast.ended
    assert bus.statistics()["subscribers"] == 1  # the lagging one left the fan-out


async def test_wait_ends_on_a_record_on_the_until_event_on_close_and_after_the_timeout(autojump_clock):
    bus = new_bus()
    subscription = await bus.subscribe()
    until = trio.Event()
    started = trio.current_time()
    await subscription.wait(until, 10.0)  # nothing happens: the timeout ends it
    assert trio.current_time() - started == pytest.approx(10.0)

    async def later(action) -> None:
        await trio.sleep(1)  # virtual time (autojump_clock): the record comes 1 s into the wait
        action()

    async with trio.open_nursery() as nursery:  # a record ends it
        nursery.start_soon(later, lambda: bus.commit([bus.reserve("captured", scope="a", event_id="evt_1")]))
        started = trio.current_time()
        await subscription.wait(until, math.inf)
        assert trio.current_time() - started == pytest.approx(1.0)
    assert [r.event_id for r in subscription.take()] == ["evt_1"]
    async with trio.open_nursery() as nursery:  # so does the event (server shutdown)
        nursery.start_soon(later, until.set)
        started = trio.current_time()
        await subscription.wait(until, math.inf)
        assert trio.current_time() - started == pytest.approx(1.0)
    assert subscription.take() == [] and not subscription.ended
    async with trio.open_nursery() as nursery:
        nursery.start_soon(later, subscription.close)
        await subscription.wait(None)
    assert subscription.ended


async def test_take_resumes_after_the_last_record_taken():
    bus = new_bus()
    first = await bus.subscribe()
    published = await publish(bus, 6, 3)
    assert [r.lifecycle_id for r in first.take(4)] == [r.lifecycle_id for r in published[:4]]
    assert first.last_id == published[3].lifecycle_id
    assert [r.lifecycle_id for r in first.take()] == [r.lifecycle_id for r in published[4:]]
    # a subscriber resuming after the 4th record replays the last two from the store
    for record in published:
        await bus.table.write([bus.put_op(record)])
    resumed = await bus.subscribe(since_lifecycle_id=published[3].lifecycle_id)
    assert [r.lifecycle_id for r in resumed.take()] == [r.lifecycle_id for r in published[4:]]


def test_the_frame_cache_encodes_a_record_once_and_stays_bounded():
    bus = new_bus()
    cache = FrameCache(capacity=3)
    records = [bus.reserve("captured", scope="org:acme/user:alice", event_id=f"evt_{i}") for i in range(5)]
    first = cache.sse(records[0])
    assert cache.sse(records[0]) is first and cache.encoded == 1
    assert first.startswith(f"id: {records[0].lifecycle_id}\nevent: captured\ndata: {{".encode())
    assert first.endswith(b"}\n\n")
    for record in records:
        cache.sse(record)
        cache.ws(record)
    assert len(cache._sse) == 3 and len(cache._ws) == 3
    assert cache.sse(records[0]) == first  # evicted, encoded again: the same bytes
    assert cache.encoded == 1 + 4 + 5 + 1
    # a chunk: the records' cached frames and control frames, in order, nothing encoded again
    control = (None, "policy_changed", {"version": 2})
    chunk = cache.sse_chunk([records[3], control, records[4]])
    assert chunk == cache.sse(records[3]) + b'event: policy_changed\ndata: {"version":2}\n\n' + cache.sse(records[4])
    assert cache.encoded == 1 + 4 + 5 + 1
    assert cache.ws(records[4]) is cache.ws(records[4]) and cache.encoded == 1 + 4 + 5 + 1


async def test_a_stream_batches_what_arrived_filters_and_ends_on_shutdown(tmp_path):
    async with server(tmp_path) as h:
        state = h.app.cortex
        alice = Principal(actor="user:alice", tenant="acme")
        batches = lifecycle_batches(state, alice, "org:acme", None, {"events": "captured"})
        first = batches.__anext__()
        results: list = []

        async def take_one() -> None:
            results.append(await first)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(take_one)
            await trio.testing.wait_all_tasks_blocked()  # the stream is subscribed and waiting
            items = [{k: v for k, v in body(f"bulk {i}").items() if k != "scope"} for i in range(12)]
            await h.engine.experience_bulk({"scope": "org:acme/user:alice", "items": items})
            await h.engine.experience(body("elsewhere", scope="org:other/user:zed"))
        batch = results[0]
        assert [r.stage for r in batch] == ["captured"] * 12  # one batch, the other scope filtered
        assert [r.lifecycle_id for r in batch] == sorted(r.lifecycle_id for r in batch)
        rest: list = []

        async def drain() -> None:
            async for more in batches:
                rest.append(more)
            rest.append("ended")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await trio.testing.wait_all_tasks_blocked()
            state.closing.set()  # shutdown ends the waiting stream at once
        assert rest == ["ended"]
        assert h.engine._ctx.bus.statistics()["subscribers"] == 0


# -- bounds on what a long-running server keeps -----------------------------------------------
async def test_recall_packs_are_bounded_by_count_oldest_first(engine_factory):
    from cortexdb import EngineConfig
    from cortexdb.errors import NotFound

    from .conftest import envelope

    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", pack_cache_max=3)
    async with engine_factory(config=config) as engine:
        await engine.experience(envelope("I live in Paris."), wait="indexed")
        packs = [await engine.recall({"scope": "org:acme/user:alice", "query": f"where {i}"}) for i in range(5)]
        for old in packs[:2]:
            with pytest.raises(NotFound):
                engine.get_pack(old["pack_id"])
        assert [engine.get_pack(p["pack_id"])["pack_id"] for p in packs[2:]] == [p["pack_id"] for p in packs[2:]]
        assert len(engine._recall.cache) == 3


def test_the_pack_cache_is_bounded_by_the_bytes_of_its_packs_too():
    """Packs are kept as JSON within ``max_bytes`` (``pack_cache_bytes``): the oldest go first
    once their encoded sizes add up to more, whatever the count; a pack larger than the whole
    budget is not kept; a kept pack reads back equal, and expiry and purge keep the count."""
    import datetime as dt

    from cortexdb.engine import jsoncodec
    from cortexdb.engine.recall.cache import PackCache
    from cortexdb.errors import NotFound

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    packs = [{"pack_id": f"pk_{n}", "layers": {"events": [{"text": "x" * 1000}]}, "n": n} for n in range(4)]
    size = len(jsoncodec.encode(packs[0]))
    cache = PackCache(60.0, 1000, max_bytes=2 * size + size // 2)  # room for two of them
    for pack in packs:
        cache.put(pack, now)
    assert len(cache) == 2 and cache.bytes == 2 * size
    for old in packs[:2]:
        with pytest.raises(NotFound):
            cache.get(old["pack_id"], now)
    assert [cache.get(p["pack_id"], now) for p in packs[2:]] == packs[2:]
    cache.put({"pack_id": "pk_big", "text": "y" * 3 * size}, now)  # larger than the whole budget
    with pytest.raises(NotFound):
        cache.get("pk_big", now)
    assert len(cache) == 2 and cache.bytes == 2 * size
    cache.expire(now + dt.timedelta(seconds=61))
    assert len(cache) == 0 and cache.bytes == 0
    cache.put(packs[0], now)
    cache.purge()
    assert len(cache) == 0 and cache.bytes == 0


async def test_a_recall_pack_is_kept_as_its_json(engine):
    from cortexdb.engine import jsoncodec

    from .conftest import envelope

    await engine.experience(envelope("I live in Paris."), wait="indexed")
    pack = await engine.recall({"scope": "org:acme/user:alice", "query": "where"})
    assert engine._recall.cache.bytes == len(jsoncodec.encode(pack))
    assert engine.get_pack(pack["pack_id"]) == jsoncodec.decode(jsoncodec.encode(pack))


async def test_a_replayed_write_leaves_no_stage_waiter_behind(engine):
    from .conftest import envelope

    first = await engine.experience(envelope("I live in Paris.", key="k1"), wait="consolidated")
    again = await engine.experience(envelope("I live in Paris.", key="k1"), wait="consolidated")
    assert again.replay and again.event_id == first.event_id and again.status == "consolidated"
    assert engine._ctx.bus.statistics()["waiters"] == 0


async def test_several_sse_subscribers_over_http_each_get_every_record_in_order(tmp_path):
    """Over the real HTTP server: 6 streams (firehose, parent, one scope) follow 4 bulk writes of
    10 each; each receives exactly the captured records of its filter, in lce order."""
    import httpx

    from .test_server_e2e import anchor, auth, live, read_sse

    scopes = ["org:acme/user:alice", "org:acme/team:shared"]
    async with live(tmp_path) as (url, keys), httpx.AsyncClient(base_url=url, timeout=60) as http:
        since = await anchor(http, keys, scopes[0])
        filters = [None, "org:acme", scopes[0], scopes[1], None, "org:acme"]
        async with contextlib.AsyncExitStack() as stack:
            responses = [await stack.enter_async_context(http.stream(
                "GET", f"/v1/lifecycle/stream?events=captured&since_lifecycle_id={since}" + (f"&scope={f}" if f else ""),
                headers=auth(keys)))
                for f in filters]  # fmt: skip
            for round_ in range(3):
                for scope in scopes[: 1 + round_ % 2]:
                    items = [{k: v for k, v in body(f"bulk {round_} {i}").items() if k != "scope"} for i in range(10)]
                    r = await http.post("/v1/experience/bulk", json={"scope": scope, "items": items}, headers=auth(keys))
                    assert r.status_code == 202, r.text
            rows = (await http.get(f"/v1/lifecycle?events=captured&since_lifecycle_id={since}&limit=1000",
                                   headers=auth(keys))).json()["items"]  # fmt: skip
            assert len(rows) == 40
            for f, response in zip(filters, responses, strict=True):
                wanted = [r["lifecycle_id"] for r in rows if f is None or r["scope"].startswith(f)]
                frames = await read_sse(response, len(wanted))
                assert [frame[0] for frame in frames] == wanted
                assert all(frame[1] == "captured" and frame[2]["lifecycle_id"] == frame[0] for frame in frames)



# -- one tick for every busy stream; one match per distinct filter ------------------------------
async def test_a_busy_stream_waits_for_the_shared_tick_and_then_sends_what_arrived_as_one_batch(tmp_path):
    """After a batch, a stream waits for the tick the server's streams share (``state.pacer``;
    here a gate the test opens): what arrives meanwhile goes out as one batch at the tick; a
    tick with nothing new sends nothing, and the next record after it goes out at once."""
    from cortexdb.server.pacing import Pacer

    class Gated(Pacer):
        def __init__(self) -> None:
            super().__init__()
            self.gate, self.waiting = trio.Event(), 0

        async def tick(self, period: float, until: trio.Event) -> None:
            assert period == 0.05  # stream_coalesce
            self.waiting += 1
            try:
                await self.gate.wait()
            finally:
                self.waiting -= 1

    async with server(tmp_path) as h:
        state = h.app.cortex
        state.pacer = pacer = Gated()
        alice = Principal(actor="user:alice", tenant="acme")
        got: list[list] = [[], []]

        async def follow(n: int) -> None:
            async for batch in lifecycle_batches(state, alice, "org:acme", None, {"events": "captured"}):
                got[n].append(batch)

        async def write(count: int, start: int) -> None:
            items = [{k: v for k, v in body(f"bulk {i}").items() if k != "scope"} for i in range(start, start + count)]
            await h.engine.experience_bulk({"scope": "org:acme/user:alice", "items": items})
            await trio.testing.wait_all_tasks_blocked()

        async with trio.open_nursery() as nursery:
            for n in range(2):
                nursery.start_soon(follow, n)
            await trio.testing.wait_all_tasks_blocked()
            await write(3, 0)  # quiet streams send at once
            assert [[len(b) for b in g] for g in got] == [[3], [3]] and pacer.waiting == 2
            await write(2, 3)
            await write(2, 5)  # busy: both wait for the tick
            assert [[len(b) for b in g] for g in got] == [[3], [3]]
            pacer.gate.set()
            await trio.testing.wait_all_tasks_blocked()
            assert [[len(b) for b in g] for g in got] == [[3, 4], [3, 4]]
            assert [r.lifecycle_id for r in got[0][0] + got[0][1]] == sorted(r.lifecycle_id for r in got[1][0] + got[1][1])
            pacer.gate = trio.Event()
            await trio.testing.wait_all_tasks_blocked()  # through the tick: nothing new, nothing sent
            assert pacer.waiting == 0 and [len(g) for g in got] == [2, 2]
            await write(1, 7)  # the next record goes out at once, then the tick again
            assert [[len(b) for b in g] for g in got] == [[3, 4, 1], [3, 4, 1]] and pacer.waiting == 2
            state.closing.set()
            pacer.gate.set()


async def test_the_pacer_ticks_for_all_waiters_at_once_and_survives_a_cancelled_timekeeper(autojump_clock):
    from cortexdb.server.pacing import Pacer

    pacer, until = Pacer(), trio.Event()
    woke: list[float] = []

    async def waiter() -> None:
        await pacer.tick(0.05, until)
        woke.append(trio.current_time())

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(waiter)
    assert woke == [pytest.approx(started + 0.05)] * 5 and pacer.ticks == 1
    async with trio.open_nursery() as nursery:  # the timekeeper leaves: the others go on at once
        keeper = trio.CancelScope()

        async def timekeeper() -> None:
            with keeper:
                await pacer.tick(60.0, until)

        nursery.start_soon(timekeeper)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        at = trio.current_time()
        keeper.cancel()
    assert woke[-1] == pytest.approx(at) and pacer.ticks == 2
    until.set()  # shutdown: a tick comes at once
    at = trio.current_time()
    await pacer.tick(60.0, until)
    assert trio.current_time() == pytest.approx(at)


async def test_a_record_is_matched_once_per_distinct_filter_and_a_lagging_member_leaves_alone(monkeypatch):
    """Subscribers with equal filters share one match per record; one of them lagging leaves
    the fan-out without taking the others of its filter along."""
    bus = new_bus()
    calls = []
    matches = LifecycleFilter.matches
    monkeypatch.setattr(LifecycleFilter, "matches", lambda self, record: calls.append(self) or matches(self, record))
    filters = [None, "org:acme", SCOPES[0]] * 4
    subscriptions = [await bus.subscribe(LifecycleFilter(scope=f), capacity=8) for f in filters]
    published = await publish(bus, 6, 3)
    assert len(calls) == 6 * 3  # 6 records, 3 distinct filters (12 subscribers)
    for f, subscription in zip(filters, subscriptions, strict=True):
        wanted = [r.lifecycle_id for r in published if f is None or r.scope.startswith(f)]
        assert [r.lifecycle_id for r in subscription.take()] == wanted
    slow, others = subscriptions[0], subscriptions[1:]
    more = await publish(bus, 6, 6)
    for subscription in others:
        subscription.take()
    more += await publish(bus, 3, 3)  # the slow firehose holds 9 > its capacity of 8: lagging
    assert [r.stage for r in slow.take()] == ["lagging"] and bus.statistics()["subscribers"] == 11
    for subscription in [s for s in others if s.filter.scope is None]:  # the rest of its filter
        assert [r.lifecycle_id for r in subscription.take()] == [r.lifecycle_id for r in more[6:]]
    assert not any(s.lagged for s in others)


async def test_a_filter_that_cannot_be_hashed_still_subscribes_and_receives():
    bus = new_bus()
    odd = await bus.subscribe(LifecycleFilter(event_id=["evt_1"]))  # an embedding caller's list  # type: ignore[arg-type]
    every = await bus.subscribe()
    await publish(bus, 3, 3)  # no record's event id equals a list: the odd one matches none
    assert odd.take() == [] and len(every.take()) == 3 and bus.statistics()["subscribers"] == 2
