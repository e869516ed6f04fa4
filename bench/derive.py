"""Derivation's CPU per event as one scope grows, against a baseline checkout in the same run.

    python bench/derive.py [--sizes 1000,5000,10000,20000] [--batch 1000] [--baseline /work/main]

Each arm is a worker process (this file, ``--worker``) importing ``cortexdb`` from its own
checkout: this one, and ``--baseline`` (another checkout, e.g. main before a change; ``none``:
this arm alone).  Both open the embedded engine on a LevelDB data dir with the hash embedder and
write the same synthetic conversational turns (bench/recall.py's generator) into one scope, with
given vectors (seeded unit vectors, as bench/peers.py's scale mode), 1,000 per bulk call.  At each
size, in turn (the arms interleaved step by step, so both see the same machine load), a worker
first grows its scope to the size (settled: derivation flushed, vector seals and merges done),
then times one more ``--batch`` events from the first call until the store is idle again:
- CPU ms per event of that batch (the process's user + system time: capture and derivation,
  the worker threads included), and of derivation alone (from the last call's return to idle);
  and the event loop's thread alone (``main``: capture and derivation's Python, without LevelDB's
  compaction thread and the worker threads' store writes and vector seals);
- items/s until idle (wall; on a shared machine the CPU figure is the one to compare);
- the ratio of the baseline's CPU per event to this checkout's;
- the worker's peak RSS so far (``ru_maxrss``);
- with ``--bytes``: the bytes the batch wrote to LevelDB per event (keys and values of puts,
  keys of deletes: what LevelDB logs and then compacts), by table, counted by a wrapper around
  the store's ``write``; and LevelDB's own compaction totals over the batch (``leveldb.stats``:
  seconds, MB read and written, memtable flushes included).
A flat CPU per event across sizes is the goal (issue 17's ingest until idle, issue 10's soak):
derivation should cost what one event brings, not what the scope already holds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
SCOPE = "org:bench/user:alice"


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class WriteCounter:
    """Bytes written to the store by table (the key's first part): puts' keys and values,
    deletes' keys (a delete is a record LevelDB logs and compacts too)."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = {}
        self.store = None

    def compactions(self) -> list[float]:
        """LevelDB's own totals since the store opened, over every level (``leveldb.stats``):
        seconds compacting (memtable flushes included), MB read and MB written by compactions."""
        if self.store is None:
            return [0.0, 0.0, 0.0]
        stats = self.store._db.get_property(b"leveldb.stats").decode()
        totals = [0.0, 0.0, 0.0]
        for line in stats.splitlines():
            parts = line.split()
            if len(parts) == 6 and parts[0].isdigit():  # level files size time read write
                totals = [t + float(v) for t, v in zip(totals, parts[3:], strict=True)]
        return totals

    def install(self, store_class) -> None:
        from cortexdb.engine.spi.kv import Put

        original, counts = store_class.write, self.bytes

        async def write(store, ops, *, sync=False):
            self.store = store
            for op in ops:
                table = op.key.split(b"\x00", 1)[0].decode()
                size = len(op.key) + (len(op.value) if isinstance(op, Put) else 0)
                counts[table] = counts.get(table, 0) + size
            return await original(store, ops, sync=sync)

        store_class.write = write

    def take(self) -> dict[str, int]:
        out = dict(self.bytes)
        self.bytes.clear()
        return out


def worker(root: str, batch: int, count_bytes: bool = False) -> None:
    """Grow one scope on command: each line in is a size, each line out that step's figures."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.insert(0, root)
    import importlib.util
    import shutil

    import numpy as np
    import trio

    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.engine.retrieve.embedders import by_name

    spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(_HERE, "recall.py"))
    recall = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recall)
    counter = WriteCounter()
    if count_bytes:
        from cortexdb.backends.leveldb.store import LevelDBStore

        counter.install(LevelDBStore)
    rng, vectors = random.Random(7), np.random.default_rng(7)
    path = tempfile.mkdtemp(prefix="bench-derive-")

    async def add(engine, start: int, count: int) -> None:
        for offset in range(0, count, 1000):
            chunk = recall.items(rng, min(1000, count - offset), start + offset)
            rows = vectors.standard_normal((len(chunk), 384)).astype(np.float32)
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            for item, row in zip(chunk, rows, strict=True):
                item["vector"] = row.tolist()
            await engine.experience_bulk({"scope": SCOPE, "items": chunk, "ordering": "strict_temporal"})

    async def main() -> None:
        config = EngineConfig(recall_candidates=100, idle_timeout=36000)
        async with cortexdb.open_engine("leveldb", path=path, config=config, embedder=by_name("hash")) as engine:
            held = 0
            print(json.dumps({"ready": True}), flush=True)
            while line := await trio.to_thread.run_sync(sys.stdin.readline):
                size = int(line)
                grow_cpu, grow_wall = cpu(), time.perf_counter()
                if size > held:
                    await add(engine, held, size - held)
                    await recall.settle(engine, SCOPE)
                    held = size
                grown = {"grow_cpu": cpu() - grow_cpu, "grow_wall": time.perf_counter() - grow_wall}
                counter.take()
                compacted = counter.compactions()
                started_cpu, started, started_main = cpu(), time.perf_counter(), time.thread_time()
                await add(engine, held, batch)
                called_cpu, called = cpu(), time.perf_counter()
                await recall.settle(engine, SCOPE)
                done_cpu, done, done_main = cpu(), time.perf_counter(), time.thread_time()
                held += batch
                written = counter.take()
                totals = counter.compactions()
                compaction = [b - a for a, b in zip(compacted, totals, strict=True)]
                print(json.dumps({
                    "compaction": {"seconds": compaction[0], "read_mb": compaction[1], "write_mb": compaction[2]},
                    "compaction_total": {"seconds": totals[0], "read_mb": totals[1], "write_mb": totals[2]},
                    "bytes_per_event": {t: n / batch for t, n in sorted(written.items(), key=lambda kv: -kv[1])},
                    "size": size, **grown, "cpu_ms": 1000 * (done_cpu - started_cpu) / batch,
                    "derive_cpu_ms": 1000 * (done_cpu - called_cpu) / batch,
                    "main_cpu_ms": 1000 * (done_main - started_main) / batch,
                    "calls_per_s": batch / (called - started), "idle_per_s": batch / (done - started),
                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                }), flush=True)  # fmt: skip

    try:
        trio.run(main)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def start(root: str, batch: int, count_bytes: bool = False) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker", root, "--batch", str(batch),
         *(["--bytes"] if count_bytes else [])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root,
    )  # fmt: skip
    assert json.loads(process.stdout.readline())["ready"]
    return process


def ask(process: subprocess.Popen, size: int) -> dict:
    process.stdin.write(f"{size}\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def arm_options(parser: argparse.ArgumentParser, bytes_help: str) -> None:
    """The options of a bench whose arms are checkouts run as ``--worker`` processes (this one,
    bench/derive_trickle.py)."""
    parser.add_argument("--baseline", default="none", help="another checkout to compare with (none: skip)")
    parser.add_argument("--bytes", action="store_true", help=bytes_help)
    parser.add_argument("--worker", help=argparse.SUPPRESS)


def arms_of(args: argparse.Namespace) -> dict[str, str]:
    """``this`` checkout, and ``--baseline``'s when given: name → root."""
    arms = {"this": os.path.dirname(_HERE)}
    if args.baseline != "none":
        arms["baseline"] = os.path.abspath(args.baseline)
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000,10000,20000")
    parser.add_argument("--batch", type=int, default=1000)
    arm_options(parser, "print the bytes written per event by table")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.batch, args.bytes)
        return
    arms = arms_of(args)
    print(f"one scope, given vectors, hash embedder, LevelDB; +{args.batch} events timed at each size; "
          f"arms: {arms}; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    workers = {name: start(root, args.batch, args.bytes) for name, root in arms.items()}
    totals = {name: [0.0, 0.0, 0] for name in arms}  # cpu s, wall s, events: until idle, all steps
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            rows = {}
            for name, process in workers.items():  # interleaved: one step of each arm in turn
                rows[name] = row = ask(process, size)
                total = totals[name]
                total[0] += row["grow_cpu"] + row["cpu_ms"] * args.batch / 1000
                total[1] += row["grow_wall"] + args.batch / row["idle_per_s"]
                total[2] = size + args.batch
            line = f"{size:>7} events held, load {os.getloadavg()[0]:4.1f}:"
            for name, row in rows.items():
                line += (f" | {name}: {row['cpu_ms']:5.2f} CPU ms/event ({row['derive_cpu_ms']:5.2f} deriving, "
                         f"{row.get('main_cpu_ms', 0):5.2f} event loop's thread), "
                         f"{row['idle_per_s']:5.0f} items/s until idle, calls {row['calls_per_s']:5.0f}/s, "
                         f"peak RSS {row['peak_rss_mb']:.0f} MB")  # fmt: skip
            if "baseline" in rows:
                line += (f" | baseline/this CPU {rows['baseline']['cpu_ms'] / rows['this']['cpu_ms']:.2f}x, "
                         f"event loop's thread {rows['baseline']['main_cpu_ms'] / rows['this']['main_cpu_ms']:.2f}x")
            print(line, flush=True)
            for name, row in rows.items():
                if "bytes_per_event" in row and row["bytes_per_event"]:
                    tables = row["bytes_per_event"]
                    done, total = row["compaction"], row["compaction_total"]
                    print(f"    {name}: {sum(tables.values()) / 1000:.2f} KB written per event: "
                          + ", ".join(f"{t} {n / 1000:.2f}" for t, n in tables.items() if n >= 20)
                          + f"; LevelDB compactions in the batch: {done['seconds']:.1f} s, "
                          f"read {done['read_mb']:.0f} MB, wrote {done['write_mb']:.0f} MB (bursty: "
                          f"since the start {total['seconds']:.1f} s, {total['read_mb']:.0f} / "
                          f"{total['write_mb']:.0f} MB)", flush=True)
        for name, (cpu_s, wall_s, events) in totals.items():
            print(f"{name}: {events} events in all, {1000 * cpu_s / events:.2f} CPU ms/event, "
                  f"{events / wall_s:.0f} items/s until idle (wall, shared machine)")  # fmt: skip
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait()


if __name__ == "__main__":
    main()
