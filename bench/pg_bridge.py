"""PostgreSQL from Trio: blocking psycopg in worker threads (what backends/postgres does) against
asyncpg through a trio-asyncio bridge, on one throwaway server, in the same run.

    python bench/pg_bridge.py [--ops 3000] [--batches 300] [--batch-size 100] [--tasks 8] [--trials 3]

Each row is the median of ``--trials`` runs, in operations per second:
- get: point reads of existing keys, one task, then ``--tasks`` concurrent tasks;
- put: single-key upserts (autocommit), one task;
- batch: transactions of ``--batch-size`` upserts (``unnest`` arrays), one task;
and the ratio to *baseline*: the same psycopg calls made directly on the event loop (blocking
it: what a thread hop or a bridge costs on top of the round trip).  asyncpg and trio-asyncio are
not dependencies of CortexDB: when they are missing the bridge rows say so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

from cortexdb.testing.pgserver import TemporaryPostgres  # noqa: E402

UPSERT = "INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
BATCH = ("INSERT INTO kv (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) "
         "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")  # fmt: skip
GET = "SELECT v FROM kv WHERE k = $1"


def pg(query: str) -> str:  # psycopg's placeholders
    for n in (2, 1):
        query = query.replace(f"${n}", "%s")
    return query


def keys(n: int) -> list[bytes]:
    return [b"key:%08d" % i for i in range(n)]


class Direct:
    """psycopg on the event loop, blocking it: the baseline."""

    name = "baseline (psycopg, blocking the loop)"

    def __init__(self, dsn: str, tasks: int) -> None:
        self.conns = [psycopg.connect(dsn, autocommit=True) for _ in range(tasks)]

    async def call(self, slot: int, fn):
        return fn(self.conns[slot])

    def close(self):
        for conn in self.conns:
            conn.close()


class Threaded(Direct):
    """psycopg in a Trio worker thread per call (backends/postgres/pool.py)."""

    name = "psycopg in worker threads"

    async def call(self, slot: int, fn):
        return await trio.to_thread.run_sync(fn, self.conns[slot])


async def run_sync_side(impl, args, ks):
    value = b"x" * 100
    rows = {}
    t = time.perf_counter()
    for k in ks[: args.ops]:
        await impl.call(0, lambda c, k=k: c.execute(pg(UPSERT), (k, value), binary=True))
    rows["put"] = args.ops / (time.perf_counter() - t)
    t = time.perf_counter()
    for k in ks[: args.ops]:
        await impl.call(0, lambda c, k=k: c.execute(pg(GET), (k,), binary=True).fetchone())
    rows["get"] = args.ops / (time.perf_counter() - t)

    async def reader(slot):
        for k in ks[slot :: args.tasks][: args.ops // args.tasks]:
            await impl.call(slot, lambda c, k=k: c.execute(pg(GET), (k,), binary=True).fetchone())

    t = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for slot in range(args.tasks):
            nursery.start_soon(reader, slot)
    rows[f"get x{args.tasks} tasks"] = (args.ops // args.tasks * args.tasks) / (time.perf_counter() - t)

    def batch(c, start):
        chunk = ks[start : start + args.batch_size]
        with c.transaction():
            c.execute(pg(BATCH), (chunk, [value] * len(chunk)), binary=True)

    t = time.perf_counter()
    for b in range(args.batches):
        await impl.call(0, lambda c, b=b: batch(c, (b * args.batch_size) % max(1, len(ks) - args.batch_size)))
    rows[f"batch of {args.batch_size}"] = args.batches / (time.perf_counter() - t)
    return rows


async def run_bridge(dsn_uri, args, ks):
    try:
        import asyncpg
        import trio_asyncio
    except ImportError as exc:
        return f"not measured ({exc.name} is not installed)"
    value = b"x" * 100
    rows = {}
    async with trio_asyncio.open_loop():
        aio = trio_asyncio.aio_as_trio
        conns = [await aio(asyncpg.connect)(dsn_uri) for _ in range(args.tasks)]
        c0 = conns[0]
        t = time.perf_counter()
        for k in ks[: args.ops]:
            await aio(c0.execute)(UPSERT, k, value)
        rows["put"] = args.ops / (time.perf_counter() - t)
        t = time.perf_counter()
        for k in ks[: args.ops]:
            await aio(c0.fetchval)(GET, k)
        rows["get"] = args.ops / (time.perf_counter() - t)

        async def reader(slot):
            for k in ks[slot :: args.tasks][: args.ops // args.tasks]:
                await aio(conns[slot].fetchval)(GET, k)

        t = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for slot in range(args.tasks):
                nursery.start_soon(reader, slot)
        rows[f"get x{args.tasks} tasks"] = (args.ops // args.tasks * args.tasks) / (time.perf_counter() - t)

        async def batch(start):
            chunk = ks[start : start + args.batch_size]
            async with c0.transaction():
                await c0.execute(BATCH, chunk, [value] * len(chunk))

        t = time.perf_counter()
        for b in range(args.batches):
            await aio(batch)((b * args.batch_size) % max(1, len(ks) - args.batch_size))
        rows[f"batch of {args.batch_size}"] = args.batches / (time.perf_counter() - t)
        for conn in conns:
            await aio(conn.close)()
    return rows


async def main(args) -> None:
    server = TemporaryPostgres()
    server.start()
    try:
        dsn = server.dsn()
        uri = f"postgresql://cortex@/postgres?host={server.base}&port=5432"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kv (k bytea PRIMARY KEY, v bytea NOT NULL)")
        ks = keys(max(args.ops, args.batch_size * 2))
        results: dict[str, list[dict] | str] = {}
        for _ in range(args.trials):
            for cls in (Direct, Threaded):
                impl = cls(dsn, args.tasks)
                try:
                    results.setdefault(cls.name, []).append(await run_sync_side(impl, args, ks))
                finally:
                    impl.close()
            bridge = await run_bridge(uri, args, ks)
            name = "asyncpg over trio-asyncio"
            if isinstance(bridge, str):
                results[name] = bridge
            else:
                results.setdefault(name, []).append(bridge)
    finally:
        server.stop()
    base = {k: statistics.median(r[k] for r in results[Direct.name]) for k in results[Direct.name][0]}
    print(f"PostgreSQL {psycopg.pq.version()} (libpq), unix socket, {args.trials} trials, median ops/s "
          "(ratio to the baseline in the same run)")  # fmt: skip
    for name, runs in results.items():
        if isinstance(runs, str):
            print(f"  {name:42s} {runs}")
            continue
        cells = []
        for key, ref in base.items():
            value = statistics.median(r[key] for r in runs)
            cells.append(f"{key}: {value:8.0f}/s ({value / ref:4.2f})")
        print(f"  {name:42s} " + "  ".join(cells))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--trials", type=int, default=3)
    trio.run(main, parser.parse_args())
