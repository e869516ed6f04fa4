"""Many scopes going idle: RSS with every scope open, under a memory budget, and once released.

    python bench/scopes.py [--scopes 200] [--events 100] [--budget-mb 32] [--queries 40] [--backend leveldb]

Two arms, each in its own process (so neither inherits the other's heap), on the same data
(bench/recall.py's generated conversation turns, seeded): ``open`` has no budget (every scope
written stays open), ``budget`` has ``scope_memory_budget_mb = --budget-mb`` with a sweep every
0.5 s while it writes.  Each arm opens an engine in a temporary directory (hash embedder), takes
its baseline (VmRSS after open), writes ``--scopes`` scopes of ``--events`` events one scope at a
time (bulk writes, then a flush), runs a sweep, and samples RSS; then releases every scope
(``Engine.release(scope, drain=True)``) and samples again; then recalls ``--queries`` scopes twice:
the first recall reopens the scope (its indexes rebuilt from storage), the second finds it open.
Every sample is taken after ``gc.collect()`` and ``malloc_trim``.  It prints, per arm, the RSS
growth over the baseline, the engine's estimate of the open scopes' memory beside the RSS a full
release freed (how good the estimate is), and recall p50 reopening against p50 open.  Nothing is
asserted; the figures are only comparable within one run.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, ROOT)

import trio  # noqa: E402

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402
from cortexdb.engine.memtrim import release_free_memory  # noqa: E402

_spec = importlib.util.spec_from_file_location("recall_bench", os.path.join(HERE, "recall.py"))
recall_bench = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(recall_bench)  # type: ignore[union-attr]


def rss_mb() -> float:
    gc.collect()
    release_free_memory()
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def scope_of(number: int) -> str:
    return f"org:acme/user:u{number:05d}"


async def arm(args: argparse.Namespace, path: str) -> dict:
    budget = args.budget_mb if args.arm == "budget" else 0.0
    config = EngineConfig(default_caller="user:alice", idle_timeout=1e9, scope_memory_budget_mb=budget,
                          release_check_interval=0.5)  # fmt: skip
    where = {"path": os.path.join(path, "data")} if args.backend == "leveldb" else {}
    out: dict = {"arm": args.arm, "budget_mb": budget}
    async with cortexdb.open_engine(args.backend, config=config, **where) as engine:
        out["baseline"] = rss_mb()
        rng = random.Random(7)
        started = time.perf_counter()
        for number in range(args.scopes):
            scope = scope_of(number)
            chunk = recall_bench.items(rng, args.events, number * args.events)
            await engine.experience_bulk({"scope": scope, "items": chunk, "ordering": "batch_throughput"})
            await engine.flush(scope)
        out["write_s"] = time.perf_counter() - started
        await engine.release()  # one sweep now: the budget arm ends within its budget
        stats = engine.statistics()
        out.update(written=rss_mb(), open_scopes=stats.actors, estimate_mb=stats.memory_bytes / 2**20,
                   releases_while_writing=stats.releases)  # fmt: skip
        started = time.perf_counter()
        for number in range(args.scopes):
            await engine.release(scope_of(number), drain=True)
        out["release_s"] = time.perf_counter() - started
        stats = engine.statistics()
        out.update(released=rss_mb(), open_after_release=stats.actors, estimate_after_mb=stats.memory_bytes / 2**20)
        picks = rng.sample(range(args.scopes), min(args.queries, args.scopes))
        cold, warm = [], []
        for number in picks:
            query = rng.choice(recall_bench.QUERIES).format(
                name=rng.choice(recall_bench.NAMES), company=rng.choice(recall_bench.COMPANIES),
                thing=rng.choice(recall_bench.THINGS), place=rng.choice(recall_bench.PLACES))  # fmt: skip
            for times in (cold, warm):
                started = time.perf_counter()
                await engine.recall({"scope": scope_of(number), "query": query})
                times.append((time.perf_counter() - started) * 1000)
        stats = engine.statistics()
        out.update(cold_p50=statistics.median(cold), warm_p50=statistics.median(warm), reopens=stats.reopens,
                   after_queries=rss_mb())  # fmt: skip
    return out


def run_arm(args: argparse.Namespace) -> None:
    path = tempfile.mkdtemp(prefix="cortex-scopes-")
    try:
        print(json.dumps(trio.run(arm, args, path)))
    finally:
        shutil.rmtree(path, ignore_errors=True)


def report(results: list[dict], args: argparse.Namespace) -> None:
    print(f"bench/scopes.py: {args.scopes} scopes x {args.events} events, {args.backend}, hash embedder; "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'arm':>7} {'base MB':>8} {'+written':>9} {'+released':>10} {'freed':>7} {'estimate':>9} "
          f"{'open':>5} {'write s':>8} {'release s':>10} {'reopen p50':>11} {'open p50':>9}")  # fmt: skip
    for r in results:
        print(f"{r['arm']:>7} {r['baseline']:8.1f} {r['written'] - r['baseline']:+9.1f} "
              f"{r['released'] - r['baseline']:+10.1f} {r['written'] - r['released']:7.1f} {r['estimate_mb']:9.1f} "
              f"{r['open_scopes']:5d} {r['write_s']:8.1f} {r['release_s']:10.2f} {r['cold_p50']:9.1f}ms "
              f"{r['warm_p50']:7.1f}ms")  # fmt: skip
    by = {r["arm"]: r for r in results}
    if "open" in by and "budget" in by:
        full, capped = by["open"], by["budget"]
        grown = full["written"] - full["baseline"]
        print(f"RSS growth under a {capped['budget_mb']:g} MB budget: {capped['written'] - capped['baseline']:.1f} MB "
              f"against {grown:.1f} MB with every scope open (ratio "
              f"{(capped['written'] - capped['baseline']) / grown if grown else float('nan'):.2f}); "
              f"{capped['releases_while_writing']} releases while writing")  # fmt: skip
        freed = full["written"] - full["released"]
        print(f"estimate {full['estimate_mb']:.1f} MB for {full['open_scopes']} open scopes; a full release freed "
              f"{freed:.1f} MB of RSS (estimate / freed {full['estimate_mb'] / freed if freed > 0 else float('nan'):.2f})")  # fmt: skip
        print(f"recall p50 reopening a released scope {full['cold_p50']:.1f} ms against {full['warm_p50']:.1f} ms "
              f"open (ratio {full['cold_p50'] / full['warm_p50']:.1f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scopes", type=int, default=200)
    parser.add_argument("--events", type=int, default=100, help="events per scope")
    parser.add_argument("--budget-mb", type=float, default=32.0, help="the budget arm's scope_memory_budget_mb")
    parser.add_argument("--queries", type=int, default=40, help="scopes recalled after the release")
    parser.add_argument("--backend", choices=("leveldb", "memory"), default="leveldb")
    parser.add_argument("--arm", choices=("open", "budget"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        run_arm(args)
        return
    results = []
    for name in ("open", "budget"):
        command = [sys.executable, __file__, "--arm", name, "--scopes", str(args.scopes), "--events", str(args.events),
                   "--budget-mb", str(args.budget_mb), "--queries", str(args.queries), "--backend", args.backend]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    report(results, args)


if __name__ == "__main__":
    main()
