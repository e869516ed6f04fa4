"""Recall cost on a kept data dir, for comparing two versions of the code on the same data.

    python bench/recall_ab.py --data DIR [--events 20000] [--queries 100] [--shape pack|events]
                              [--clock 2026-11-28T03:00:00Z] [--out ranked.json] [--out-items items.json]
                              [--profile] [--phases]
                              [--mmap-thresholds 65536,dynamic]

The first run loads ``--events`` of bench/recall.py's synthetic events into DIR (LevelDB, hash
embedder, bulk API, derivation and vector seals settled) and keeps it; later runs reopen it.  Then
20 warm-up recalls and ``--queries`` timed ones, one after another: ``pack`` is the default
holistic pack (bench/recall.py's), ``events`` the top 10 events (bench/peers.py's request).  It
prints wall and CPU (this process's ``process_time``) p50 / p95 per recall; on a loaded machine
the CPU time is the steadier figure.  ``--clock`` pins the engine's clock (recency and freshness
are computed from it, so two runs rank ties alike); ``--out`` writes each pack's ranked ids and
scores and its ``relationships`` part, to compare two runs (``--out-items``: its items whole,
context block and relationships part, to see that two versions answer alike byte for byte); ``--profile`` prints a cProfile (CPU time) of the timed recalls (environment: ``AB_SORT``,
``AB_LINES``, and ``AB_CALLERS``, a pattern whose callers it prints too); ``--phases`` prints the CPU
per recall of each phase of ``PHASES`` instead (timers around those functions, no profiler:
docs/benchmarks.md, "Recall latency, session 29").

``--mmap-thresholds A,B`` compares glibc malloc settings in one process instead: the timed recalls
alternate between the two (``dynamic``: glibc's default, emulated by a 32 MiB threshold, the
ceiling the default climbs to), and it prints CPU p50 / p95 for each (docs/decisions.md, "A fixed
mmap threshold").

An A/B comparison: copy a loaded DIR twice, then run both arms at the same time, each on its copy,
each with its code on ``PYTHONPATH`` (the copies matter: opening a data dir may seal episodes and
write), and compare the two ``--out`` files (docs/benchmarks.md, "Recall at 100k: what a
candidate costs").
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import statistics
import sys
import time

import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

SCOPE = "org:bench/user:alice"


def _recall_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(_HERE, "recall.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def request(shape: str, query: str) -> dict:
    if shape == "pack":
        return {"scope": SCOPE, "query": query, "traversal": "local", "diagnostics": "none"}
    return {"scope": SCOPE, "view": "granular", "traversal": "local", "query": query, "include": ["events"],
            "budgets": {"per_layer_limits": {"events": 10}}, "diagnostics": "none", "citation_mode": "none"}  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--shape", choices=["pack", "events"], default="pack")
    parser.add_argument("--clock", help="pin the engine's clock to this RFC 3339 moment")
    parser.add_argument("--out", help="write the ranked ids and scores of each pack (JSON)")
    parser.add_argument("--out-items", help="write each pack's items whole, its context block and relationships (JSON)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--phases", action="store_true", help="CPU per recall of each phase (process_time timers)")
    parser.add_argument("--mmap-thresholds", help="two malloc mmap thresholds (bytes or 'dynamic') to alternate")
    args = parser.parse_args()
    if args.mmap_thresholds:
        await thresholds_ab(args, [_threshold(t) for t in args.mmap_thresholds.split(",")])
        return
    bench = _recall_module()
    phases = phase_timers() if args.phases else None
    extra = {}
    if args.clock:
        from cortexdb.engine.clock import ManualClock

        extra["clock"] = ManualClock(args.clock)
    fresh = not os.path.exists(args.data)
    config = EngineConfig(embedder="hash", idle_timeout=3600)
    async with cortexdb.open_engine("leveldb", path=args.data, config=config, **extra) as engine:
        if fresh:
            started = time.perf_counter()
            await bench.load(engine, SCOPE, random.Random(args.events), args.events)
            await bench.settle(engine, SCOPE)
            print(f"loaded {args.events} events in {time.perf_counter() - started:.0f} s")
        await bench.settle(engine, SCOPE)
        rng = random.Random(7)
        for _ in range(20):
            await engine.recall(request(args.shape, bench.text(rng, rng.choice(bench.QUERIES))))
        queries = [bench.text(rng, rng.choice(bench.QUERIES)) for _ in range(args.queries)]
        wall, cpu, ranked, whole = [], [], [], []
        if phases is not None:
            phases.clear()
        profile = cProfile.Profile(time.process_time) if args.profile else None
        for query in queries:
            if profile:
                profile.enable()
            t, c = time.perf_counter(), time.process_time()
            pack = await engine.recall(request(args.shape, query))
            wall.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            if profile:
                profile.disable()
            ranked.append({**{layer: [(i["id"], i["score"]) for i in items] for layer, items in pack["layers"].items()},
                           "relationships": pack.get("relationships")})  # fmt: skip
            if args.out_items:
                whole.append({"layers": pack["layers"], "context_block": pack["context_block"],
                              "relationships": pack.get("relationships")})  # fmt: skip
        print(f"{args.shape}: wall p50 {statistics.median(wall):.2f} ms p95 {bench.pct(wall, 0.95):.2f} ms | "
              f"CPU p50 {statistics.median(cpu):.2f} ms p95 {bench.pct(cpu, 0.95):.2f} ms | "
              f"{args.queries} recalls, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(ranked, handle)
        if phases is not None:  # nested: a phase's time includes the phases it calls
            for name, seconds in sorted(phases.items(), key=lambda item: -item[1]):
                print(f"  {name:26s} {seconds / args.queries * 1000:7.3f} ms a recall")
        if args.out_items:
            with open(args.out_items, "w") as handle:
                json.dump(whole, handle)
        if profile:
            stats = pstats.Stats(profile)
            stats.sort_stats(os.environ.get("AB_SORT", "cumulative")).print_stats(int(os.environ.get("AB_LINES", "40")))
            if os.environ.get("AB_CALLERS"):  # who calls the functions matching this pattern
                stats.print_callers(os.environ["AB_CALLERS"])


PHASES = [  # (module, attribute, what it is), each timed with process_time around its calls
    ("cortexdb.engine.actors.candidates", "gather", "candidates (scope actor)"),
    ("cortexdb.engine.actors.candidates", "_hits", "· BM25 and vector searches"),
    ("cortexdb.engine.actors.candidates", "_event_candidate", "· loading events"),
    ("cortexdb.engine.actors.candidates", "_load", "· loading other records"),
    ("cortexdb.engine.actors.candidate_signals", "Signals.__call__", "· signals"),
    ("cortexdb.engine.retrieve.vector_index", "VectorIndex.search", "vector search"),
    ("cortexdb.engine.retrieve.vector_index", "VectorIndex.vectors", "vector read-back"),
    ("cortexdb.engine.recall.coordinator", "RecallCoordinator._rank", "ranking"),
    ("cortexdb.engine.retrieve.scoring", "score_candidates", "· scoring"),
    ("cortexdb.engine.retrieve.scoring", "mmr", "· MMR"),
    ("cortexdb.engine.recall.routing", "expand", "relationship walk"),
    ("cortexdb.engine.recall.coordinator", "RecallCoordinator._classify", "classify and route"),
    ("cortexdb.engine.recall.coordinator", "RecallCoordinator._signals", "the pack's signals part"),
    ("cortexdb.engine.recall.pack", "assemble", "assembling the pack"),
    ("cortexdb.engine.recall.cache", "PackCache.put", "pack cache (encode)"),
]


def phase_timers() -> dict[str, float]:
    """Wrap each of ``PHASES`` with a CPU timer; the returned dict accumulates seconds per phase."""
    import functools
    import importlib
    import inspect

    spent: dict[str, float] = {}

    def timed(function, label):
        if inspect.iscoroutinefunction(function):
            async def wrapper(*args, **kwargs):
                started = time.process_time()
                try:
                    return await function(*args, **kwargs)
                finally:
                    spent[label] = spent.get(label, 0.0) + time.process_time() - started
        else:
            def wrapper(*args, **kwargs):
                started = time.process_time()
                try:
                    return function(*args, **kwargs)
                finally:
                    spent[label] = spent.get(label, 0.0) + time.process_time() - started
        return functools.wraps(function)(wrapper)

    for module_name, attribute, label in PHASES:
        owner = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, timed(getattr(owner, name), label))
    return spent


def _threshold(text: str) -> int:
    return 32 * 1024 * 1024 if text.strip() == "dynamic" else int(text)


async def thresholds_ab(args: argparse.Namespace, thresholds: list[int]) -> None:
    """The same recalls, alternating between malloc mmap thresholds in one process."""
    import ctypes

    mallopt = ctypes.CDLL("libc.so.6").mallopt
    bench = _recall_module()
    config = EngineConfig(embedder="hash", idle_timeout=3600)
    fresh = not os.path.exists(args.data)
    async with cortexdb.open_engine("leveldb", path=args.data, config=config) as engine:
        if fresh:
            await bench.load(engine, SCOPE, random.Random(args.events), args.events)
        await bench.settle(engine, SCOPE)
        rng = random.Random(7)
        queries = [bench.text(rng, rng.choice(bench.QUERIES)) for _ in range(args.queries)]
        cpu: dict[int, list[float]] = {t: [] for t in thresholds}
        for round_ in range(6):
            for threshold in thresholds if round_ % 2 == 0 else thresholds[::-1]:
                mallopt(-3, threshold)  # M_MMAP_THRESHOLD
                for query in queries[:20]:  # warm-up under this setting
                    await engine.recall(request(args.shape, query))
                for query in queries:
                    c = time.process_time()
                    await engine.recall(request(args.shape, query))
                    cpu[threshold].append((time.process_time() - c) * 1000)
        base = statistics.median(cpu[thresholds[-1]])
        for threshold, values in cpu.items():
            print(f"{args.shape}, mmap threshold {threshold:>9,}: CPU p50 {statistics.median(values):.2f} ms "
                  f"p95 {bench.pct(values, 0.95):.2f} ms ({len(values)} recalls; p50 ratio to the last "
                  f"{statistics.median(values) / base:.3f}), load average {os.getloadavg()[0]:.1f}")  # fmt: skip


if __name__ == "__main__":
    trio.run(main)
