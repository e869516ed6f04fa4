"""What each field of a Mem0-mapped envelope costs the engine's bulk write, against the plain one.

    python bench/import_fields.py [--items 100000] [--rounds 1] [--variants plain,labels,...]
                                  [--import-gc] [--compression snappy|none]

bench/import.py compares a Mem0 import with the bulk write of capture.py's small message
envelope (``plain``: bench/import.py's ``envelope``).  A Mem0 record as the importer maps it
(``mapped``: ``observed_actor`` and ``subject``, ``modality: imported``, ``content.kind: text``,
four ``mem0_*`` labels, ``context.source_recorded_at`` and a longer idempotency key) costs the
engine more to write; this bench says where.  Each variant is the plain envelope with one of
those changes (``mapped``: all of them), bulk-written by ``experience_bulk`` calls of 1,000 on a
fresh LevelDB engine (hash embedder, derivation parked), in a fresh process, the envelopes made
before the clock starts (no generation in the figures).  Per record it prints the process's CPU
µs (every thread), split into the loop thread, LevelDB's own threads (compaction: named
``python``, not Python's) and the collector's share of the loop thread (``gc.callbacks``); the
bytes the engine hands LevelDB (keys and values of every put) and the data dir's size at close;
and the objects the collector tracks that are still alive at the end (what every full
collection walks).  ``plain`` runs first and last of each round; deltas are against their mean.
``--import-gc`` writes with an import's collector thresholds (``import_gc_thresholds``);
``--compression none`` opens LevelDB without snappy (a measurement knob of this bench only: the
store opens with snappy).  No figure is asserted; the machine is shared.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # bench/http.py
sys.path.insert(0, os.path.join(_HERE, ".."))

_spec = importlib.util.spec_from_file_location("bench_import", os.path.join(_HERE, "import.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # its envelopes

VARIANTS = ("plain", "actors", "imported", "text", "labels", "recorded", "key", "mapped")


def mapped(i: int) -> dict:
    """The envelope sources/mem0.py maps bench/import.py's Mem0 record ``i`` to, as the import
    writes it (the key bound to its scope: mapping.scoped_key's form)."""
    text = f"{bench.TEXTS[i % len(bench.TEXTS)]} (note {i})"
    when, source_id = bench.when(i), f"9d1c{i:08d}-0000-4000-8000-000000000000"
    labels = {"mem0_source_id": source_id, "mem0_hash": hashlib.md5(text.encode()).hexdigest(),
              "mem0_user_id": "bench", "mem0_created_at": when.replace("Z", "+00:00")}  # fmt: skip
    return {"observed_actor": {"id": "user:bench", "type": "user"}, "modality": "imported",
            "content": {"kind": "text", "text": text},
            "context": {"observed_at": when, "source_recorded_at": when, "labels": labels},
            "idempotency_key": f"mem0:{hashlib.sha256(source_id.encode()).hexdigest()[:16]}",
            "subject": {"id": "user:bench", "type": "user"}}  # fmt: skip


def variant(name: str, i: int) -> dict:
    envelope = bench.envelope(i, 1)
    del envelope["scope"]
    full = mapped(i)
    if name == "mapped":
        return full
    if name == "actors":
        envelope["observed_actor"], envelope["subject"] = full["observed_actor"], full["subject"]
    elif name == "imported":
        envelope["modality"] = "imported"
    elif name == "text":
        envelope["content"] = full["content"]
    elif name == "labels":
        envelope["context"]["labels"] = full["context"]["labels"]
    elif name == "recorded":
        envelope["context"]["source_recorded_at"] = envelope["context"]["observed_at"]
    elif name == "key":
        envelope["idempotency_key"] = full["idempotency_key"]
    return envelope


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process, by thread id."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        found[tid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


async def child(spec: dict) -> dict:
    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.backends.leveldb import files

    if spec["compression"] == "none":
        files.DEFAULT_OPTIONS["compression"] = None
    if spec["import_gc"]:
        gc.set_threshold(*EngineConfig().import_gc_thresholds)
    in_gc, started = [0.0], [0.0]

    def collecting(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            in_gc[0] += time.thread_time() - started[0]

    n, scope, path = spec["items"], bench.scope(0, 1), tempfile.mkdtemp(prefix="bench-import-fields-")
    handed = [0]
    try:
        async with cortexdb.open_engine("leveldb", path=path, config=EngineConfig(embedder="hash", idle_timeout=3600)) as engine:  # fmt: skip
            await engine.ping(scope)
            await engine.pause_derivation(scope)
            store, write = engine.store, engine.store.write

            async def counted(ops, *, sync: bool = False) -> None:
                handed[0] += sum(len(op.key) + len(getattr(op, "value", b"") or b"") for op in ops)
                await write(ops, sync=sync)

            store.write = counted
            gc.collect()
            alive = len(gc.get_objects())  # before the envelopes are made: they are gone at the end
            batches = [[variant(spec["variant"], i) for i in range(start, min(n, start + 1000))]
                       for start in range(0, n, 1000)]  # fmt: skip
            gc.callbacks.append(collecting)
            main, before = str(os.getpid()), thread_cpu()
            cpu = time.process_time()
            while batches:
                await engine.experience_bulk({"scope": scope, "items": batches.pop(0)})
            cpu, after = time.process_time() - cpu, thread_cpu()
            gc.callbacks.remove(collecting)
            gc.collect()
            alive = len(gc.get_objects()) - alive
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    others = sum(after[t] - before.get(t, 0.0) for t in after if t != main)
    per = 1e6 / n
    return {"cpu": cpu * per, "loop": (after[main] - before[main]) * per, "leveldb": others * per, "gc": in_gc[0] * per,
            "handed": handed[0] / n, "on_disk": size / n, "tracked": alive / n}  # fmt: skip


def measure(spec: dict) -> dict:
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                            capture_output=True, text=True)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"the measurement {spec} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


COLUMNS = ("cpu", "loop", "leveldb", "gc", "handed", "on_disk", "tracked")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS[1:]), help="after plain, comma-separated")
    parser.add_argument("--import-gc", action="store_true", help="the collector's thresholds as an import's")
    parser.add_argument("--compression", choices=("snappy", "none"), default="snappy")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import trio

        print(json.dumps(trio.run(child, json.loads(args.child))))
        return
    common = {"items": args.items, "import_gc": args.import_gc, "compression": args.compression}
    print(f"items={args.items:,} leveldb ({args.compression}), embedder hash, derivation parked, collector "
          f"{'as an import' if args.import_gc else 'default'}; per record: CPU µs (process, loop thread, LevelDB's "
          "threads, the collector), bytes handed to LevelDB and on disk, tracked objects alive")  # fmt: skip
    print(f"{'round':>5s} {'variant':9s} {'cpu':>6s} {'loop':>6s} {'leveldb':>7s} {'gc':>5s} {'handed':>6s}"
          f" {'on disk':>7s} {'tracked':>7s}   cpu Δ  leveldb Δ  gc Δ  load")  # fmt: skip
    for number in range(1, args.rounds + 1):
        names = ["plain", *[v for v in args.variants.split(",") if v and v != "plain"], "plain"]
        rows = []
        for name in names:
            if name not in VARIANTS:
                raise SystemExit(f"unknown variant {name!r}: one of {', '.join(VARIANTS)}")
            rows.append((name, measure({**common, "variant": name}), os.getloadavg()[0]))
        base = {c: (rows[0][1][c] + rows[-1][1][c]) / 2 for c in COLUMNS}
        for name, row, load in rows:
            print(f"{number:>5d} {name:9s} {row['cpu']:>6.1f} {row['loop']:>6.1f} {row['leveldb']:>7.1f} {row['gc']:>5.1f}"
                  f" {row['handed']:>6.0f} {row['on_disk']:>7.0f} {row['tracked']:>7.2f}"
                  f"  {row['cpu'] - base['cpu']:>+6.1f} {row['leveldb'] - base['leveldb']:>+9.1f}"
                  f" {row['gc'] - base['gc']:>+5.1f} {load:>5.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
