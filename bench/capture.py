"""Capture throughput and latency, embedded, on both backends, against raw plyvel in the same run.

    python bench/capture.py [--events 20000] [--writers 32] [--backends memory,leveldb]

Prints, per backend:
- captures/s and p50/p99 latency of ``Engine.experience`` with ``wait`` omitted (N events into one
  scope from W concurrent writers), and a single writer's sequential p50;
- the same with ``wait=captured`` (synced);
- derivation throughput: a backlog of N captured events drained by the pipeline
  (extract -> index -> consolidate -> compress) with the default rule extractor;
and the ratio of captures/s to raw plyvel ``WriteBatch`` puts of the same byte volume.
Targets (issue 2): >= 10,000 captures/s and p50 <= 0.5 ms on LevelDB; derivation >= 2,000 events/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import trio

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

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


def body(i: int) -> dict:
    return {
        "scope": SCOPE,
        "modality": "conversation",
        "content": {"kind": "message", "role": "user", "text": f"{TEXTS[i % len(TEXTS)]} (note {i})"},
        "context": {"observed_at": f"2026-05-{1 + (i // 86400) % 28:02d}T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z"},
        "idempotency_key": f"bench-{i}",
    }


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


async def capture_run(backend: str, path: str | None, n: int, writers: int, wait: str | None) -> dict:
    config = EngineConfig(idle_timeout=3600)
    latencies: list[float] = []
    async with cortexdb.open_engine(backend, path=path, config=config) as engine:
        # warm up the actor and the code paths
        for i in range(200):
            await engine.experience(body(10_000_000 + i), wait=wait)
        next_index = 0

        async def writer() -> None:
            nonlocal next_index
            while next_index < n:
                i = next_index
                next_index += 1
                started = time.perf_counter()
                await engine.experience(body(i), wait=wait)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(writers):
                nursery.start_soon(writer)
        elapsed = time.perf_counter() - started
        sequential = []
        for i in range(500):
            t0 = time.perf_counter()
            await engine.experience(body(20_000_000 + i), wait=wait)
            sequential.append(time.perf_counter() - t0)
    return {
        "rate": n / elapsed,
        "p50": pct(latencies, 0.50) * 1000,
        "p99": pct(latencies, 0.99) * 1000,
        "seq_p50": pct(sequential, 0.50) * 1000,
    }


async def derivation_run(backend: str, path: str | None, n: int) -> dict:
    """Capture a backlog with derivation parked, then time the pipeline draining it."""
    config = EngineConfig(idle_timeout=3600)
    store = None
    if backend == "memory":
        from cortexdb.backends.memory import MemoryStore

        store = MemoryStore()
    kwargs = {"store": store} if store is not None else {"path": path}
    async with cortexdb.open_engine(backend, config=config, **kwargs) as engine:
        actor_started = await engine.ping(SCOPE)
        del actor_started
        pipeline = engine._supervisor.actor(SCOPE).pipeline
        pipeline.stop()  # park derivation: events stay queued with their P markers
        items = [{k: v for k, v in body(i).items() if k != "scope"} for i in range(n)]
        for start in range(0, n, 1000):
            await engine.experience_bulk({"scope": SCOPE, "items": items[start : start + 1000], "ordering": "batch_throughput"})
    async with cortexdb.open_engine(backend, config=config, **kwargs) as engine:
        started = time.perf_counter()
        await engine.flush(SCOPE)
        elapsed = time.perf_counter() - started
        facts = await engine.facts(SCOPE, limit=1000, include_superseded=True)
    return {"rate": n / elapsed, "seconds": elapsed, "facts_page": len(facts["items"])}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--derive-events", type=int, default=10_000)
    parser.add_argument("--backends", default="memory,leveldb")
    args = parser.parse_args()

    value_size = len(str(body(1))) + 250  # an event record is about this large on disk
    baseline = raw_plyvel(max(args.events, 10_000), value_size)
    print(f"raw plyvel WriteBatch puts: {baseline:,.0f}/s ({value_size} B values)")
    print(f"events={args.events} writers={args.writers} scope=1 cpu_count={os.cpu_count()}")
    for backend in args.backends.split(","):
        for wait in (None, "captured"):
            path = tempfile.mkdtemp(prefix="bench-capture-") if backend == "leveldb" else None
            try:
                result = await capture_run(backend, path, args.events, args.writers, wait)
            finally:
                if path:
                    shutil.rmtree(path, ignore_errors=True)
            label = "wait omitted " if wait is None else "wait=captured"
            print(
                f"{backend:8s} {label}: {result['rate']:>9,.0f} captures/s  p50 {result['p50']:.3f} ms  "
                f"p99 {result['p99']:.3f} ms  single-writer p50 {result['seq_p50']:.3f} ms  "
                f"ratio to raw plyvel {result['rate'] / baseline:.3f}"
            )
        path = tempfile.mkdtemp(prefix="bench-derive-") if backend == "leveldb" else None
        try:
            derived = await derivation_run(backend, path, args.derive_events)
        finally:
            if path:
                shutil.rmtree(path, ignore_errors=True)
        print(f"{backend:8s} derivation: {derived['rate']:>9,.0f} events/s ({args.derive_events} events in {derived['seconds']:.2f} s)")


if __name__ == "__main__":
    trio.run(main)
