"""GDPR erasure throughput, and recall latency before and after an erasure, on LevelDB.

    python bench/forget.py [--sizes 10000,100000] [--kept 5000] [--queries 100] [--embedder hash]

For each size N: a kept scope (``org:acme/team:core``, ``--kept`` events) and, below it, a scope
of N events (``org:acme/team:core/project:x``), both captured with the bulk API and fully
derived (bench/recall.py's synthetic conversation).  Then:

- **baseline**: the engine reopened on the loaded data dir and both scopes' actors loaded and
  idle, ``--queries`` recalls on the kept scope (local view), p50 / p95, after a warm-up pass;
- **erasure**: ``POST /v1/erasures`` of the N-event scope through ``engine.erasures.execute``,
  timed from the call to the job's end (its status polled every 20 ms) — events erased per
  second, and the time each phase took (enumerate, refcount, categorize, delete, demote);
- **after**: the same recalls on the kept scope right after the erasure, and again after the
  engine was closed and reopened on the data dir (what lasts); each as a ratio to the baseline.

A ratio near 1.0 means the deletions left nothing that slows recall down (tombstones in the
indexes or the LevelDB key ranges next to the kept scope's).  Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # bench/http.py
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(_HERE, "recall.py"))
recall_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recall_bench)

KEPT = "org:acme/team:core"
ERASED = "org:acme/team:core/project:x"


def percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


async def recall_latency(engine, queries: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    await recall_bench.time_recalls(engine, KEPT, rng, max(5, queries // 5), "local")  # warm-up
    return percentiles(await recall_bench.time_recalls(engine, KEPT, random.Random(seed), queries, "local"))


async def erase(engine) -> tuple[float, dict[str, float], dict]:
    """(seconds, seconds per phase, final status) of one erasure of ERASED."""
    marks: list[tuple[str, float]] = []

    async def hook(job_id: str, phase: str, where: str) -> None:
        if where == "start":
            marks.append((phase, time.perf_counter()))

    engine.erasures.jobs.hook = hook
    started = time.perf_counter()
    accepted = await engine.erasures.execute({"scope": ERASED, "audit_note": "bench"})
    # the job's status is polled (its running record is in memory): a lifecycle subscription
    # replaying the window's history would decode every event's records beside the job
    while (status := await engine.erasures.status(accepted["erasure_id"]))["status"] == "running":
        await trio.sleep(0.02)
    total = time.perf_counter() - started
    engine.erasures.jobs.hook = None
    ends = [at for _, at in marks[1:]] + [started + total]
    phases = {phase: end - at for (phase, at), end in zip(marks, ends, strict=True)}
    return total, phases, status


async def one_size(size: int, args) -> None:
    path = tempfile.mkdtemp(prefix="cortex-forget-")
    config = EngineConfig(embedder=args.embedder, erasure_chunk=args.chunk)
    try:
        async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
            load_started = time.perf_counter()
            await recall_bench.load(engine, KEPT, random.Random(1), args.kept)
            await recall_bench.load(engine, ERASED, random.Random(2), size, start=args.kept)
            for scope in (KEPT, ERASED):
                await recall_bench.settle(engine, scope)
            loaded = time.perf_counter() - load_started
            print(f"{size:,} events: loaded {args.kept + size:,} events (derived) in {loaded:.0f} s", flush=True)
        # the baseline and the last figure are both taken on a freshly opened engine
        async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
            for scope in (KEPT, ERASED):  # both actors loaded and idle: nothing runs beside the recalls
                await recall_bench.settle(engine, scope)
            base50, base95 = await recall_latency(engine, args.queries, 7)
            seconds, phases, status = await erase(engine)
            after50, after95 = await recall_latency(engine, args.queries, 7)
            left = await engine.layer_counts(ERASED)
        async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
            for scope in (KEPT, ERASED):
                await recall_bench.settle(engine, scope)
            reopened50, reopened95 = await recall_latency(engine, args.queries, 7)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    erased = status["progress"]["deleted_events"] + status["progress"]["redacted_events"]
    print(f"{size:,} events: erasure {status['status']} in {seconds:.2f} s: {erased / seconds:,.0f} events/s "
          f"({status['progress']['deleted_events']:,} deleted, {status['progress']['redacted_events']:,} redacted, "
          f"{status['progress']['deleted_facts']:,} facts deleted); records left {left}")
    print(f"{size:,} events: phases " + ", ".join(f"{name} {secs:.2f} s" for name, secs in phases.items()))
    print(f"{size:,} events: recall on the kept scope ({args.kept:,} events) p50 / p95: baseline "
          f"{base50:.1f} / {base95:.1f} ms; right after {after50:.1f} / {after95:.1f} ms "
          f"(ratio {after50 / base50:.2f}); after reopening {reopened50:.1f} / {reopened95:.1f} ms "
          f"(ratio {reopened50 / base50:.2f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--kept", type=int, default=5000, help="events of the scope that stays")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--embedder", default="hash", choices=("hash", "minilm", "best"))
    parser.add_argument("--chunk", type=int, default=EngineConfig().erasure_chunk,
                        help="EngineConfig.erasure_chunk: ids per deletion step")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        trio.run(one_size, size, args)


if __name__ == "__main__":
    main()
