"""Two engines (nodes) on one PostgreSQL store: scope partitions, leases, fencing, takeover
(engine/storage/placement.py).  A lease running out is simulated by moving its expiry into the
past on the server, never by sleeping."""

from __future__ import annotations

import psycopg
import pytest
import trio

import cortexdb
from cortexdb.backends.postgres import PostgresStore
from cortexdb.engine.config import EngineConfig
from cortexdb.engine.spi.kv import Put
from cortexdb.errors import LeaseLost, ScopeOwnedElsewhere

from .pg_support import fresh_dsn
from .test_engine import envelope

ALICE = "org:acme/user:alice"
BOB = "org:beta/user:bob"


@pytest.fixture
def dsn(live_pg_server):
    return fresh_dsn(live_pg_server)


def config(node: str) -> EngineConfig:
    # a renewal interval far beyond the test: leases change only when the test says so
    return EngineConfig(node_id=node, lease_ttl=600.0, lease_renew_interval=3600.0, wal_block=16,
                        episode_idle_check=3600.0, default_caller="user:alice")  # fmt: skip


def sql(dsn: str, query: str, *args):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def expire(dsn: str, part: str) -> None:
    """What a lease's ttl running out looks like to the server."""
    sql(dsn, "UPDATE kv_leases SET expires_at = now() - interval '1 second' WHERE part = %s RETURNING part", part)


def rows(dsn: str) -> int:
    return sql(dsn, "SELECT count(*) FROM kv")[0][0]


async def test_a_partition_has_one_writer_and_moves_with_its_lease(dsn, clock):
    store_a = await PostgresStore.open(dsn, table="kv")
    store_b = await PostgresStore.open(dsn, table="kv")
    try:
        async with (cortexdb.open_engine(store=store_a, config=config("node-a"), clock=clock, id_seed=1) as a,
                    cortexdb.open_engine(store=store_b, config=config("node-b"), clock=clock, id_seed=2) as b):  # fmt: skip
            first = await a.experience(envelope("I live in Paris.", scope=ALICE), wait="consolidated")
            assert a.placement.partitions() == ["org:acme"]

            # node-b can neither write nor read a partition node-a holds, and writes nothing trying
            await a.flush(ALICE)
            before = rows(dsn)
            with pytest.raises(ScopeOwnedElsewhere) as refused:
                await b.experience(envelope("I live in Rome.", scope=ALICE), wait="captured")
            assert refused.value.details == {"scope": ALICE, "partition": "org:acme", "owner": "node-a"}
            assert refused.value.http_status == 503 and refused.value.retriable
            with pytest.raises(ScopeOwnedElsewhere):
                await b.get_event(ALICE, first.event_id)
            assert rows(dsn) == before
            # ... and serves its own partitions meanwhile
            bob = await b.experience(envelope("I work at Initech.", scope=BOB), wait="captured")
            assert b.placement.partitions() == ["org:beta"]

            # node-a captures three events whose derivations it never runs, then stalls
            await a.pause_derivation(ALICE)
            pending = [await a.experience(envelope(text, scope=ALICE), wait="captured")
                       for text in ("I moved to Lyon.", "My sister is Carol.", "I like tea.")]  # fmt: skip
            offsets = [first.wal_offset, *(p.wal_offset for p in pending)]
            assert len(set(offsets + [bob.wal_offset])) == 5  # offsets are unique across nodes

            # its lease runs out; node-b's sweep takes the partition over and finishes the slice
            expire(dsn, "org:acme")
            assert await b.placement.sweep() == ["org:acme"]
            assert b.placement.partitions() == ["org:acme", "org:beta"]
            assert (await store_b.leases.holder("org:acme"))[:2] == ("node-b", 2)
            await b.flush(ALICE)
            for captured in pending:
                state = await b.memory_event(captured.event_id, scope=ALICE)
                assert state["stages_completed"][-1] == "consolidated", state
            facts = await b.facts(ALICE)
            assert any("Lyon" in str(f["object"]) for f in facts["items"] if f["predicate"] == "lives_in"), facts

            # node-a has not noticed yet: its write is refused by the fence, and nothing lands
            before = rows(dsn)
            with pytest.raises(LeaseLost) as fenced:
                await a.experience(envelope("I live in Oslo.", scope=ALICE), wait="captured")
            assert fenced.value.details["partition"] == "org:acme" and fenced.value.details["token"] == 1
            assert rows(dsn) == before
            assert a.placement.partitions() == []  # it dropped the partition at once
            with pytest.raises(ScopeOwnedElsewhere) as moved:
                await a.experience(envelope("I live in Oslo.", scope=ALICE), wait="captured")
            assert moved.value.details["owner"] == "node-b"

            # the new owner goes on above every offset the old one gave out; each event once
            later = await b.experience(envelope("I live in Nice.", scope=ALICE), wait="consolidated")
            assert later.wal_offset > max(offsets)
            page = await b.events(ALICE, limit=100)
            ids = [event["id"] for event in page["items"]]
            assert sorted(ids) == sorted([first.event_id, *(p.event_id for p in pending), later.event_id])
    finally:
        await store_a.close()
        await store_b.close()


async def test_a_stale_token_fences_every_write_of_an_actor(dsn, clock):
    """The fence is in the store: a batch written under an old token is refused whole."""
    store = await PostgresStore.open(dsn, table="kv")
    try:
        async with cortexdb.open_engine(store=store, config=config("node-a"), clock=clock, id_seed=1) as a:
            await a.experience(envelope("I live in Paris.", scope=ALICE), wait="captured")
            lease = a.placement.lease(ALICE)
            await store.leases.release(lease)
            taken = await store.leases.acquire("org:acme", "node-z", ttl=60)
            assert taken.token == lease.token + 1
            with pytest.raises(LeaseLost):
                await store.write_fenced(lease, [Put(b"probe", b"x")])
            assert await store.get(b"probe") is None
    finally:
        await store.close()


async def test_node_id_needs_a_store_with_leases(clock):
    with pytest.raises(ValueError, match="no leases"):
        async with cortexdb.open_engine("memory", config=EngineConfig(node_id="n1"), clock=clock):
            pass


async def test_a_subscriber_on_any_node_sees_every_stage_in_order_and_resumes(dsn, clock):
    store_a = await PostgresStore.open(dsn, table="kv")
    store_b = await PostgresStore.open(dsn, table="kv")
    stages = ["captured", "extracted", "indexed", "consolidated"]
    try:
        async with (cortexdb.open_engine(store=store_a, config=config("node-a"), clock=clock, id_seed=1) as a,
                    cortexdb.open_engine(store=store_b, config=config("node-b"), clock=clock, id_seed=2) as b):  # fmt: skip
            async with b.subscribe(scope=ALICE) as on_b, a.subscribe(scope=ALICE) as on_a, b.subscribe() as every:
                written, theirs = [], []

                async def write(engine, scope, into):
                    for text in ("I live in Paris.", "I work at Initech."):
                        into.append(await engine.experience(envelope(text, scope=scope), wait="consolidated"))

                async def heard(subscription, count, into=None):
                    got = [] if into is None else into
                    with trio.fail_after(60):  # a hang guard only: records arrive as they commit
                        async for record in subscription:
                            got.append(record)
                            if len(got) == count:
                                return got

                mixed: list = []
                async with trio.open_nursery() as both:  # node-b writes its own at the same time,
                    both.start_soon(heard, every, 16, mixed)  # and a reader takes them as they come
                    both.start_soon(write, a, ALICE, written)
                    both.start_soon(write, b, BOB, theirs)

                local = await heard(on_a, 8)
                remote = await heard(on_b, 8)  # node-b, which owns nothing of org:acme
            for result in written + theirs:
                assert [r.stage for r in mixed if r.event_id == result.event_id] == stages
            assert [r.lifecycle_id for r in remote] == [r.lifecycle_id for r in local]
            for result in written:
                assert [r.stage for r in remote if r.event_id == result.event_id] == stages

            # a subscriber of node-b resuming after the first record gets the rest from the table
            async with b.subscribe(scope=ALICE, since_lifecycle_id=remote[0].lifecycle_id) as resumed:
                again = resumed.take()
            assert [r.lifecycle_id for r in again] == [r.lifecycle_id for r in remote[1:]]
    finally:
        await store_a.close()
        await store_b.close()


async def test_a_request_claims_an_expired_partition_and_the_sweep_resumes_its_other_scopes(dsn, clock):
    carol = "org:acme/user:carol"
    store_a = await PostgresStore.open(dsn, table="kv")
    store_b = await PostgresStore.open(dsn, table="kv")
    try:
        async with (cortexdb.open_engine(store=store_a, config=config("node-a"), clock=clock, id_seed=1) as a,
                    cortexdb.open_engine(store=store_b, config=config("node-b"), clock=clock, id_seed=2) as b):  # fmt: skip
            pending = []
            for scope in (ALICE, carol):
                await a.experience(envelope("I live in Paris.", scope=scope), wait="captured")
                await a.pause_derivation(scope)
                pending.append((scope, await a.experience(envelope("I moved to Lyon.", scope=scope), wait="captured")))
            expire(dsn, "org:acme")
            # a request for one scope claims the partition at once; the sweep resumes the others
            await b.experience(envelope("I like tea.", scope=ALICE), wait="captured")
            assert b.placement.partitions() == ["org:acme"]
            assert carol not in b.statistics().scopes
            assert await b.placement.sweep() == []  # nothing expired is left to take...
            assert carol in b.statistics().scopes  # ... but carol's actor was started, to derive
            for scope, captured in pending:
                await b.flush(scope)
                state = await b.memory_event(captured.event_id, scope=scope)
                assert state["stages_completed"][-1] == "consolidated", (scope, state)
    finally:
        await store_a.close()
        await store_b.close()
