"""Scope-partition leases with fencing tokens, in a table beside the KV table.

``t_leases (part text PRIMARY KEY, owner text, token bigint, expires_at timestamptz)``: one row
per partition, kept forever so that its token only ever grows.  Time is the database server's
``now()`` alone, so the nodes' clocks never have to agree.

- ``acquire(part, owner, ttl)``: the lease if the partition is free, expired, or already this
  owner's (then renewed, same token); a new owner gets the next token.  None if another owner
  holds it unexpired.  One statement (``INSERT ... ON CONFLICT DO UPDATE ... WHERE``): of
  concurrent acquirers exactly one wins.
- ``renew(lease, ttl)``: pushes the expiry on while the lease is still this token's and
  unexpired; None once it is lost (the owner must stop writing).
- ``release(lease)``: expires it now; the next owner gets the next token.
- ``write_fenced`` (``PostgresStore``): a write batch whose transaction first locks the lease row
  ``FOR SHARE`` and checks owner, token and expiry; a takeover's update of that row waits for the
  batch to commit, so a batch lands only while its token is current (else ``LeaseLost``, and
  nothing of it is written).

- ``expired()``: the partitions whose lease ran out or was released (a takeover's candidates).
- ``take(name, count)``: ``count`` numbers of a shared counter (``t_counters``), contiguous and
  never handed out twice, in one ``UPDATE ... RETURNING``; ``raise_to(name, floor)`` moves a
  counter up to a floor.  The engine takes its WAL offsets in blocks from it, so that the nodes
  of one table never give two events one offset (engine/placement.py).

- ``advertise(node, address)`` / ``address(node)``: where a node answers HTTP (``t_nodes``), so
  that a node can forward a request to a partition's owner.

The engine's half of placement is ``engine/placement.py`` (docs/scale-out.md).
"""

from __future__ import annotations

import datetime

import attrs
import psycopg
from psycopg import sql

from .pool import Pool


@attrs.frozen
class Lease:
    part: str
    owner: str
    token: int
    expires_at: datetime.datetime  # the database server's clock


class LeaseSql:
    def __init__(self, table: str) -> None:
        t = sql.Identifier(f"{table}_leases")
        self.create = sql.SQL("CREATE TABLE IF NOT EXISTS {} (part text PRIMARY KEY, owner text NOT NULL, "
                              "token bigint NOT NULL, expires_at timestamptz NOT NULL)").format(t)  # fmt: skip
        self.acquire = sql.SQL(
            "INSERT INTO {t} AS l (part, owner, token, expires_at) VALUES (%(part)s, %(owner)s, 1, now() + make_interval(secs => %(ttl)s)) "
            "ON CONFLICT (part) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, "
            "token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > now() THEN l.token ELSE l.token + 1 END "
            "WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner "
            "RETURNING token, expires_at"
        ).format(t=t)
        self.renew = sql.SQL(
            "UPDATE {} SET expires_at = now() + make_interval(secs => %(ttl)s) "
            "WHERE part = %(part)s AND owner = %(owner)s AND token = %(token)s AND expires_at > now() "
            "RETURNING expires_at"
        ).format(t)
        self.release = sql.SQL("UPDATE {} SET expires_at = '-infinity' WHERE part = %(part)s AND owner = %(owner)s "
                               "AND token = %(token)s").format(t)  # fmt: skip
        self.check = sql.SQL("SELECT 1 FROM {} WHERE part = %(part)s AND owner = %(owner)s AND token = %(token)s "
                             "AND expires_at > now() FOR SHARE").format(t)  # fmt: skip
        self.expired = sql.SQL("SELECT part FROM {} WHERE expires_at <= now() ORDER BY part").format(t)
        c = sql.Identifier(f"{table}_counters")
        self.create_counters = sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, value bigint NOT NULL)").format(c)
        self.raise_to = sql.SQL("INSERT INTO {c} AS c (name, value) VALUES (%(name)s, %(floor)s) ON CONFLICT (name) "
                                "DO UPDATE SET value = GREATEST(c.value, EXCLUDED.value)").format(c=c)  # fmt: skip
        self.take = sql.SQL("INSERT INTO {c} AS c (name, value) VALUES (%(name)s, %(count)s) ON CONFLICT (name) "
                            "DO UPDATE SET value = c.value + EXCLUDED.value RETURNING value").format(c=c)  # fmt: skip
        n = sql.Identifier(f"{table}_nodes")
        self.create_nodes = sql.SQL("CREATE TABLE IF NOT EXISTS {} (node text PRIMARY KEY, address text NOT NULL, "
                                    "seen_at timestamptz NOT NULL)").format(n)  # fmt: skip
        self.advertise = sql.SQL("INSERT INTO {} (node, address, seen_at) VALUES (%(node)s, %(address)s, now()) "
                                 "ON CONFLICT (node) DO UPDATE SET address = EXCLUDED.address, seen_at = now()").format(n)  # fmt: skip
        self.address = sql.SQL("SELECT address FROM {} WHERE node = %s").format(n)
        self.holder = sql.SQL("SELECT owner, token, expires_at, expires_at > now() FROM {} WHERE part = %s").format(t)


class Leases:
    """The lease table of one KV table (``PostgresStore.leases``)."""

    def __init__(self, pool: Pool, table: str) -> None:
        self._pool = pool
        self.sql = LeaseSql(table)

    async def setup(self) -> None:
        statements = (self.sql.create, self.sql.create_counters, self.sql.create_nodes)

        def call(conn):
            for statement in statements:
                try:
                    conn.execute(statement)
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):  # another node, at once
                    pass

        await self._pool.run(call)

    async def acquire(self, part: str, owner: str, ttl: float) -> Lease | None:
        if ttl <= 0:
            raise ValueError("a lease's ttl must be positive (seconds)")
        query, args = self.sql.acquire, {"part": part, "owner": owner, "ttl": ttl}
        row = await self._pool.run(lambda conn: conn.execute(query, args).fetchone())
        return None if row is None else Lease(part, owner, row[0], row[1])

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        if ttl <= 0:
            raise ValueError("a lease's ttl must be positive (seconds)")
        query, args = self.sql.renew, {**_args(lease), "ttl": ttl}
        row = await self._pool.run(lambda conn: conn.execute(query, args).fetchone())
        return None if row is None else attrs.evolve(lease, expires_at=row[0])

    async def release(self, lease: Lease) -> None:
        query, args = self.sql.release, _args(lease)
        await self._pool.run(lambda conn: conn.execute(query, args))

    async def holder(self, part: str) -> tuple[str, int, bool] | None:
        """(owner, token, still valid?) of a partition's lease row, or None if never leased."""
        query = self.sql.holder
        row = await self._pool.run(lambda conn: conn.execute(query, (part,)).fetchone())
        return None if row is None else (row[0], row[1], row[3])


    async def expired(self) -> list[str]:
        """The partitions whose lease has expired or was released."""
        query = self.sql.expired
        rows = await self._pool.run(lambda conn: conn.execute(query).fetchall())
        return [row[0] for row in rows]

    async def take(self, name: str, count: int) -> int:
        """The last of ``count`` fresh numbers of counter ``name`` (so ``value - count + 1`` is
        the first); a counter starts at 0, and no number is ever handed out twice."""
        if count <= 0:
            raise ValueError("take at least one number")
        query, args = self.sql.take, {"name": name, "count": count}
        return (await self._pool.run(lambda conn: conn.execute(query, args).fetchone()))[0]

    async def raise_to(self, name: str, floor: int) -> None:
        """Move counter ``name`` up to ``floor`` (never down): numbers up to it are taken."""
        query, args = self.sql.raise_to, {"name": name, "floor": floor}
        await self._pool.run(lambda conn: conn.execute(query, args))


    async def advertise(self, node: str, address: str) -> None:
        """Record where ``node`` answers HTTP (its base URL)."""
        query, args = self.sql.advertise, {"node": node, "address": address}
        await self._pool.run(lambda conn: conn.execute(query, args))

    async def address(self, node: str) -> str | None:
        query = self.sql.address
        row = await self._pool.run(lambda conn: conn.execute(query, (node,)).fetchone())
        return None if row is None else row[0]


def _args(lease: Lease) -> dict:
    return {"part": lease.part, "owner": lease.owner, "token": lease.token}
