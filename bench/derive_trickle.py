"""Derivation's CPU and bytes per event when every write is its own commit (a trickle, as in the
soak), against a baseline checkout in the same run.

    python bench/derive_trickle.py [--warm 400] [--timed 600] [--rounds 2] [--baseline /work/main] [--bytes]
                                   [--texts recall|soak] [--stages]

Each arm is a worker process (this file, ``--worker``) importing ``cortexdb`` from its own
checkout; the arms run one after the other, ``--rounds`` times alternated.  A worker opens the
embedded engine on a LevelDB data dir with the hash embedder and writes bench/recall.py's
synthetic turns (``--texts soak``: bench/soak.py's writes, the soak's regime) into one scope one
at a time with ``wait=consolidated`` (each write a batch of one: derivation commits once per
write), ``--warm`` first, then ``--timed`` measured:
- CPU ms per event of the process (every thread) and of the event loop's thread, and with
  ``--stages`` that thread's in the consolidation stage and in indexing (``Indexer.index_documents``,
  any stage: a clock read around each call);
- with ``--bytes``: KB written to LevelDB per event, by table (bench/derive.py's counter: keys and
  values of puts, keys of deletes).  The counter costs CPU of its own: compare CPU without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
SCOPE = "org:bench/user:alice"


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def soak_items(count: int) -> list[dict]:
    """bench/soak.py's writes to one user scope (its texts: a user's city, employer, colour and
    hobbies, company seat counts, notes), without their scope: few subjects, each with many facts,
    so a concept's summary soon holds ``understanding_max_inputs`` lines and changes at each write."""
    path = list(sys.path)
    soak = _load("bench_soak", os.path.join(_HERE, "soak.py"))
    sys.path[:] = path  # soak.py puts its own checkout first
    return [{k: v for k, v in soak.write_body(i, 1).items() if k != "scope"} for i in range(count)]


def timed_on_thread(owner, name: str, totals: dict[str, float]) -> None:
    """Wrap the coroutine function ``owner.name`` to add the calling thread's CPU seconds while it
    runs to ``totals[name]`` (other tasks' turns at its rare checkpoints included)."""
    original = getattr(owner, name)

    async def wrapped(*args, **kwargs):
        started = time.thread_time()
        try:
            return await original(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.thread_time() - started

    setattr(owner, name, wrapped)


def worker(root: str, warm: int, timed: int, count_bytes: bool, texts: str = "recall", stages: bool = False) -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.insert(0, root)
    import trio

    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.engine.retrieve.embedders import by_name

    recall = _load("bench_recall", os.path.join(_HERE, "recall.py"))
    derive = _load("bench_derive", os.path.join(_HERE, "derive.py"))
    counter = derive.WriteCounter()
    from cortexdb.engine.actors.indexer import Indexer
    from cortexdb.engine.actors.stages import consolidate

    parts: dict[str, float] = {}  # the event loop's CPU in the consolidation stage and in indexing
    if stages:  # a clock read at each call: leave it out under a sampling profiler
        timed_on_thread(consolidate, "run", parts)
        timed_on_thread(Indexer, "index_documents", parts)
    if count_bytes:
        from cortexdb.backends.leveldb.store import LevelDBStore

        counter.install(LevelDBStore)
    path = tempfile.mkdtemp(prefix="bench-trickle-")

    async def main() -> dict:
        config = EngineConfig(idle_timeout=36000)
        async with cortexdb.open_engine("leveldb", path=path, config=config, embedder=by_name("hash")) as engine:
            items = soak_items(warm + timed) if texts == "soak" else recall.items(random.Random(7), warm + timed, 0)
            for i, item in enumerate(items):
                if i == warm:
                    counter.take()
                    parts.clear()
                    started, started_main = derive.cpu(), time.thread_time()
                await engine.experience({"scope": SCOPE, **item}, wait="consolidated")
            done, done_main = derive.cpu(), time.thread_time()
            written = counter.take()
        return {
            "cpu_ms": 1000 * (done - started) / timed, "main_cpu_ms": 1000 * (done_main - started_main) / timed,
            "consolidate_ms": 1000 * parts.get("run", 0.0) / timed,
            "index_ms": 1000 * parts.get("index_documents", 0.0) / timed,
            "kb_per_event": {t: n / timed / 1000 for t, n in sorted(written.items(), key=lambda kv: -kv[1])},
        }  # fmt: skip

    try:
        print(json.dumps(trio.run(main)), flush=True)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_arm(root: str, args: argparse.Namespace) -> dict:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", root, "--warm", str(args.warm),
         "--timed", str(args.timed), "--texts", args.texts, *(["--bytes"] if args.bytes else []),
         *(["--stages"] if args.stages else [])],
        capture_output=True, text=True, cwd=root, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm", type=int, default=400)
    parser.add_argument("--timed", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--texts", choices=["recall", "soak"], default="recall",
                        help="bench/recall.py's synthetic turns, or bench/soak.py's writes (its regime)")
    parser.add_argument("--stages", action="store_true",
                        help="also the event loop's CPU in the consolidation stage and in indexing")
    derive = _load("bench_derive", os.path.join(_HERE, "derive.py"))
    derive.arm_options(parser, "count the bytes written per event by table")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.warm, args.timed, args.bytes, args.texts, args.stages)
        return
    arms = derive.arms_of(args)
    print(f"one scope, a commit per write (wait=consolidated), hash embedder, LevelDB, {args.texts}'s texts; {args.warm} writes, "
          f"then {args.timed} timed; arms: {arms}")  # fmt: skip
    rows: dict[str, list[dict]] = {name: [] for name in arms}
    for round_ in range(args.rounds):
        for name, root in arms.items():  # alternated, so both see the same machine load
            row = run_arm(root, args)
            rows[name].append(row)
            line = (f"round {round_ + 1}, {name}: {row['cpu_ms']:.2f} CPU ms/event ({row['main_cpu_ms']:.2f} "
                    f"event loop's thread), load {os.getloadavg()[0]:.1f}")  # fmt: skip
            if args.stages:
                line += (f"; the event loop's in the consolidation stage {row['consolidate_ms']:.2f}, "
                         f"indexing in any stage {row['index_ms']:.2f}")  # fmt: skip
            if row["kb_per_event"]:
                tables = row["kb_per_event"]
                line += f"; {sum(tables.values()):.2f} KB written/event: " + ", ".join(
                    f"{t} {kb:.2f}" for t, kb in tables.items() if kb >= 0.5
                )
            print(line, flush=True)
    if "baseline" in rows:
        mean = {name: sum(r["cpu_ms"] for r in got) / len(got) for name, got in rows.items()}
        print(f"baseline/this CPU per event: {mean['baseline'] / mean['this']:.2f}x "
              f"({mean['baseline']:.2f} / {mean['this']:.2f} ms, mean of {args.rounds} rounds)")  # fmt: skip
        for part, label in (("consolidate_ms", "the consolidation stage"), ("index_ms", "indexing")) if args.stages else ():
            got = {name: sum(r[part] for r in rows[name]) / len(rows[name]) for name in rows}
            print(f"baseline/this in {label}: {got['baseline'] / got['this']:.2f}x "
                  f"({got['baseline']:.2f} / {got['this']:.2f} ms)")  # fmt: skip


if __name__ == "__main__":
    main()
