"""Scope-partition leases with fencing tokens (backends/postgres/leases.py).  Time passing is
simulated by moving a lease's expiry into the past on the server (never by sleeping)."""

from __future__ import annotations

import psycopg
import pytest
import trio

from cortexdb.backends.postgres import PostgresStore
from cortexdb.engine.spi.kv import Put
from cortexdb.errors import LeaseLost

from .pg_support import fresh_dsn

PART = "org:acme/*"


@pytest.fixture
def dsn(live_pg_server):
    return fresh_dsn(live_pg_server)


@pytest.fixture
async def nodes(dsn):
    """Two stores on one table: two nodes."""
    a = await PostgresStore.open(dsn, table="kv")
    b = await PostgresStore.open(dsn, table="kv")
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def expire(dsn: str, part: str = PART) -> None:
    """What the lease's ttl running out looks like to the server."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE kv_leases SET expires_at = now() - interval '1 second' WHERE part = %s", (part,))


async def test_one_owner_at_a_time_and_every_new_owner_gets_a_greater_token(nodes, dsn):
    a, b = nodes
    first = await a.leases.acquire(PART, "node-a", ttl=30)
    assert first is not None and first.token == 1
    assert await b.leases.acquire(PART, "node-b", ttl=30) is None  # held, unexpired
    again = await a.leases.acquire(PART, "node-a", ttl=30)  # the owner re-acquiring renews
    assert again is not None and again.token == 1
    expire(dsn)
    second = await b.leases.acquire(PART, "node-b", ttl=30)
    assert second is not None and second.token == 2
    assert await a.leases.renew(first, ttl=30) is None  # node-a learns it lost the partition
    await b.leases.release(second)
    third = await a.leases.acquire(PART, "node-a", ttl=30)
    assert third is not None and third.token == 3  # tokens never go back, even after a release
    assert await a.leases.holder(PART) == ("node-a", 3, True)
    assert await a.leases.holder("never-leased") is None


async def test_of_concurrent_acquirers_exactly_one_wins(nodes):
    a, b = nodes
    won: list[str] = []

    async def contend(store, owner):
        if await store.leases.acquire(PART, owner, ttl=30) is not None:
            won.append(owner)

    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(contend, (a, b)[i % 2], f"node-{i}")
    assert len(won) == 1
    assert (await a.leases.holder(PART))[:2] == (won[0], 1)


async def test_a_write_fenced_by_a_stale_token_writes_nothing(nodes, dsn):
    a, b = nodes
    old = await a.leases.acquire(PART, "node-a", ttl=30)
    await a.write_fenced(old, [Put(b"k1", b"from a")], sync=True)
    expire(dsn)
    new = await b.leases.acquire(PART, "node-b", ttl=30)
    with pytest.raises(LeaseLost) as info:  # node-a, paused past its lease, tries to go on
        await a.write_fenced(old, [Put(b"k1", b"late a"), Put(b"k2", b"late a")])
    assert info.value.error_code == "WAL_UNAVAILABLE" and not info.value.retriable
    assert info.value.details == {"partition": PART, "token": 1}
    await b.write_fenced(new, [Put(b"k2", b"from b")])
    assert [pair async for pair in b.scan()] == [(b"k1", b"from a"), (b"k2", b"from b")]


async def test_an_expired_lease_fences_even_before_anyone_takes_over(nodes, dsn):
    a, _ = nodes
    lease = await a.leases.acquire(PART, "node-a", ttl=30)
    renewed = await a.leases.renew(lease, ttl=60)
    assert renewed is not None and renewed.token == lease.token and renewed.expires_at > lease.expires_at
    expire(dsn)
    with pytest.raises(LeaseLost):
        await a.write_fenced(renewed, [Put(b"k", b"v")])
    assert await a.get(b"k") is None
    with pytest.raises(ValueError):
        await a.leases.acquire(PART, "node-a", ttl=0)


async def test_a_takeover_waits_for_a_fenced_batch_in_flight(nodes, dsn):
    """The batch's transaction holds the lease row FOR SHARE: a takeover's UPDATE of that row
    blocks until the batch commits, so the batch is never applied after the takeover."""
    a, b = nodes
    lease = await a.leases.acquire(PART, "node-a", ttl=30)
    with psycopg.connect(dsn) as blocker:  # an open transaction holding the same row lock
        blocker.execute("SELECT 1 FROM kv_leases WHERE part = %s FOR SHARE", (PART,))
        expire_sql = "UPDATE kv_leases SET expires_at = now() - interval '1 second' WHERE part = %s"
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(expire_sql, (PART,))  # the row is locked while a batch holds it
        blocker.rollback()
    await a.write_fenced(lease, [Put(b"k", b"v")])
    assert await b.get(b"k") == b"v"
