"""Capture throughput and latency, embedded, on each backend, against raw plyvel in the same run.

    python bench/capture.py [--events 30000] [--writers 4] [--trials 3] [--backends memory,leveldb]
                            [--dsn DSN]
    python bench/capture.py --backend postgres --nodes 1|3 [--events N] [--writers W] [--dsn DSN]

``--nodes N``: N postgres nodes (processes with ``node_id``, one partition each, on one store)
against one LevelDB process in the same run, the same captures per node (bench/nodes.py).

``--backends ...,postgres`` adds the PostgreSQL backend: on ``--dsn`` (each run in a schema of
its own), else on a throwaway server started from the local PostgreSQL binaries
(``cortexdb.testing.pgserver``, fsync off); its rows also give the ratio to LevelDB's in the
same run (list leveldb before postgres).

For each backend it prints the median (and best) of ``--trials`` runs of:
- ``Engine.experience`` with ``wait`` omitted: N events into one scope from W concurrent writers,
  with idempotency keys (what the SDK sends) and without; captures/s, p50 and p99 latency;
- the same with ``wait=captured`` (each acknowledgement waits for a synced write);
- a single sequential writer's p50;
- derivation: a backlog of captured events drained by the pipeline (extract → index →
  consolidate → compress, default rule extractor), in events/s;
- sustained: N events captured while the pipeline runs, timed until every event is derived;
and the ratio of captures/s to raw plyvel ``WriteBatch`` puts measured in the same run.
Targets (issue 2): LevelDB, one scope, wait omitted: >= 10,000 captures/s and p50 <= 0.5 ms;
derivation >= 2,000 events/s.  This machine is a noisy 2-core VM: compare medians, not single runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import trio

# bench/http.py would shadow the stdlib package `http` for a script run from this directory
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

SCOPE = "org:bench/user:alice"
TEXTS = [
    "I live in Lisbon and I work at Acme Corp.",
    "My favorite color is green.",
    "We talked about the quarterly roadmap for a while.",
    "I really love hiking in the mountains.",
    "Acme moved to 200 seats after the pilot.",
    "Can you remind me what we decided yesterday?",
    "I'm 34 years old.",
    "The meeting ran long but it went well.",
]


def body(i: int, keyed: bool = True) -> dict:
    envelope = {
        "scope": SCOPE,
        "modality": "conversation",
        "content": {"kind": "message", "role": "user", "text": f"{TEXTS[i % len(TEXTS)]} (note {i})"},
        "context": {"observed_at": f"2026-05-{1 + (i // 86400) % 28:02d}T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z"},
    }  # fmt: skip
    if keyed:
        envelope["idempotency_key"] = f"bench-{i}"
    return envelope


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raw_plyvel(n: int, value_size: int) -> float:
    import plyvel

    path = tempfile.mkdtemp(prefix="bench-plyvel-")
    try:
        db = plyvel.DB(path, create_if_missing=True)
        value = b"x" * value_size
        start = time.perf_counter()
        batch = db.write_batch()
        for i in range(n):
            batch.put(b"E\x00" + SCOPE.encode() + b"\x00" + f"evt_{i:036d}".encode(), value)
        batch.write()
        elapsed = time.perf_counter() - start
        db.close()
        return n / elapsed
    finally:
        shutil.rmtree(path, ignore_errors=True)


PG: dict = {"dsn": None, "schemas": 0}


def pg_dsn() -> str:
    """A DSN on a new schema of the postgres server (``--dsn`` or a throwaway one)."""
    import psycopg

    PG["schemas"] += 1
    schema = f"bench_{os.getpid()}_{PG['schemas']}"
    with psycopg.connect(PG["dsn"], autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{PG['dsn']} options='-c search_path={schema}'"


class DataDir:
    def __init__(self, backend: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-capture-") if backend == "leveldb" else None
        self.path = pg_dsn() if backend == "postgres" else self.dir

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


async def write_concurrently(
    engine, n: int, writers: int, keyed: bool, wait, latencies: list[float]
) -> float:
    """Write events 0..n-1 from ``writers`` concurrent tasks; per-call latencies go to ``latencies``.
    Returns the elapsed seconds."""
    next_index = 0

    async def writer() -> None:
        nonlocal next_index
        while next_index < n:
            i = next_index
            next_index += 1
            started = time.perf_counter()
            await engine.experience(body(i, keyed), wait=wait)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(writers):
            nursery.start_soon(writer)
    return time.perf_counter() - started


async def capture_run(backend: str, n: int, writers: int, wait: str | None, keyed: bool) -> dict:
    latencies: list[float] = []
    with DataDir(backend) as path:
        async with cortexdb.open_engine(
            backend, path=path, config=EngineConfig(idle_timeout=3600)
        ) as engine:
            for i in range(200):  # warm up the actor and the code paths
                await engine.experience(body(10_000_000 + i, keyed), wait=wait)
            elapsed = await write_concurrently(engine, n, writers, keyed, wait, latencies)
    return {
        "rate": n / elapsed,
        "p50": pct(latencies, 0.50) * 1000,
        "p99": pct(latencies, 0.99) * 1000,
    }


async def derivation_run(backend: str, n: int) -> dict:
    """Capture a backlog with derivation parked, then time the pipeline draining it."""
    config = EngineConfig(idle_timeout=3600)
    with DataDir(backend) as path:
        store = None
        if backend == "memory":
            from cortexdb.backends.memory import MemoryStore

            store = MemoryStore()
        kwargs = {"store": store} if store is not None else {"path": path}
        async with cortexdb.open_engine(backend, config=config, **kwargs) as engine:
            await engine.ping(SCOPE)
            await engine.pause_derivation(SCOPE)  # park derivation; P markers stay
            items = [{k: v for k, v in body(i).items() if k != "scope"} for i in range(n)]
            for start in range(0, n, 1000):
                await engine.experience_bulk({"scope": SCOPE, "items": items[start : start + 1000]})
        async with cortexdb.open_engine(backend, config=config, **kwargs) as engine:
            started = time.perf_counter()
            await engine.flush(SCOPE)
            elapsed = time.perf_counter() - started
            stats = engine.statistics().scopes[SCOPE]
    return {"rate": n / elapsed, "seconds": elapsed, "processed": stats.processed}


async def sustained_run(backend: str, n: int, writers: int) -> dict:
    """Capture while deriving; time until the last event is derived."""
    with DataDir(backend) as path:
        async with cortexdb.open_engine(
            backend, path=path, config=EngineConfig(idle_timeout=3600)
        ) as engine:
            started = time.perf_counter()
            captured = await write_concurrently(engine, n, writers, True, None, [])
            await engine.flush(SCOPE)
            total = time.perf_counter() - started
    return {"capture_rate": n / captured, "rate": n / total, "seconds": total}


def summary(runs: list[dict], key: str = "rate") -> tuple[dict, float]:
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[len(ordered) // 2], ordered[-1][key]


def bench_nodes():
    """bench/nodes.py (this directory is off sys.path: bench/http.py would shadow ``http``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_nodes", os.path.join(_HERE, "nodes.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--derive-events", type=int, default=10_000)
    parser.add_argument("--backends", default="memory,leveldb")
    parser.add_argument("--dsn", help="the postgres backend's server (default: a throwaway one)")
    parser.add_argument("--backend", choices=["postgres"], help="with --nodes: the multi-node comparison")
    parser.add_argument("--nodes", type=int, help="run N postgres nodes (processes, one partition each) against "
                                                  "one LevelDB process, --events captures each (bench/nodes.py)")
    args = parser.parse_args()
    if args.nodes:
        args.backends = "postgres"
    server = None
    if "postgres" in args.backends.split(","):
        if args.dsn:
            PG["dsn"] = args.dsn
        else:
            from cortexdb.testing.pgserver import TemporaryPostgres

            server = TemporaryPostgres()
            PG["dsn"] = server.start()
    try:
        if args.nodes:
            nodes = bench_nodes()
            print(f"capture, wait omitted, keyed: {args.events} events per node from {args.writers} writers each")
            nodes.run("capture", {"count": args.events, "writers": args.writers}, args.nodes, pg_dsn())
        else:
            await measure(args)
    finally:
        if server is not None:
            server.stop()


async def measure(args) -> None:

    value_size = len(str(body(1))) + 250  # an event record is about this large on disk
    baseline = raw_plyvel(max(args.events, 10_000), value_size)
    print(f"raw plyvel WriteBatch puts: {baseline:,.0f}/s ({value_size} B values)")
    print(
        f"events={args.events} writers={args.writers} trials={args.trials} scope=1 cpu_count={os.cpu_count()}"
    )
    print("median of trials (best in brackets)")
    leveldb: dict[str, float] = {}  # label -> LevelDB's median in this run

    def versus(backend: str, label: str, rate: float) -> str:
        if backend == "leveldb":
            leveldb[label] = rate
        elif label in leveldb:
            return f"  ratio to leveldb {rate / leveldb[label]:.3f}"
        return ""

    for backend in args.backends.split(","):
        for label, writers, wait, keyed in (
            ("wait omitted, keyed  ", args.writers, None, True),
            ("wait omitted, no key ", args.writers, None, False),
            ("wait omitted, 1 writer", 1, None, True),
            ("wait=captured, keyed ", args.writers, "captured", True),
        ):
            runs = [
                await capture_run(backend, args.events, writers, wait, keyed)
                for _ in range(args.trials)
            ]
            median, best = summary(runs)
            print(
                f"{backend:8s} {label}: {median['rate']:>8,.0f} captures/s [{best:,.0f}]  "
                f"p50 {median['p50']:.3f} ms  p99 {median['p99']:.3f} ms  "
                f"ratio to raw plyvel {median['rate'] / baseline:.3f}"
                + versus(backend, label, median["rate"])
            )
        runs = [await derivation_run(backend, args.derive_events) for _ in range(args.trials)]
        median, best = summary(runs)
        print(
            f"{backend:8s} derivation (backlog drain): {median['rate']:>8,.0f} events/s [{best:,.0f}]"
            + versus(backend, "derivation", median["rate"])
        )
        runs = [
            await sustained_run(backend, args.derive_events, args.writers)
            for _ in range(args.trials)
        ]
        median, best = summary(runs)
        print(
            f"{backend:8s} sustained capture+derivation: {median['rate']:>8,.0f} events/s [{best:,.0f}] "
            f"(captures acknowledged at {median['capture_rate']:,.0f}/s)"
            + versus(backend, "sustained", median["rate"])
        )


if __name__ == "__main__":
    trio.run(main)
