"""Where one big scope's memory goes while it answers recalls, mapping by mapping.

    python bench/recall_memory.py --data DIR [--events 25000] [--recalls 1000] [--every 250]
                                  [--shape pack|events] [--copy] [--clock 2026-11-28T03:00:00Z]
                                  [--out ranked.json] [--set NAME=VALUE ...]

``--data`` is a kept data dir as bench/recall_ab.py makes it (LevelDB, hash embedder, bench/recall.py's
synthetic events in one scope, derivation and vector seals settled); when it does not exist it is
loaded here with ``--events``.  ``--mmap-reads`` lets LevelDB read its tables through memory maps (the
engine's default is ``pread``: docs/decisions.md, "LevelDB tables read with pread").  ``--copy`` runs on a throwaway copy (opening a data dir may seal
episodes and write, so two arms compared on the same data each need their own copy).

It samples this process's memory after the open (and the scope's first recall, which opens the
scope and builds its indexes), then every ``--every`` recalls up to ``--recalls``:

- ``/proc/self/status``: VmRSS, RssAnon, RssFile;
- ``/proc/self/smaps``, resident kB per kind of mapping: annoy segment files (``*.ann``, unlinked
  once mapped), flat vector runs (``*.run``), LevelDB tables (``*.ldb``), glibc's main heap
  (``[heap]``), other anonymous memory (glibc's thread arenas and large blocks, pymalloc's arenas,
  numpy's arrays), shared libraries and the rest;
- LevelDB's own figure of its memory (memtables and block cache, ``ldb_mem``), which sits in
  malloc's;
- glibc's ``mallinfo2``: bytes malloc hands out (in use) and free bytes it keeps; and pymalloc's
  arenas (``sys._debugmallocstats``), which sit in anonymous memory beside malloc's.

It prints the recalls' CPU p50 of each interval (``process_time``), the load average, and with
``--out`` each pack's ranked ids and scores (bench/recall_ab.py's format) to compare two runs.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time

import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

SCOPE = "org:bench/user:alice"
KINDS = ("annoy", "runs", "ldb", "heap", "anon", "libs", "other")


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def status() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process, in MB (memprobe.py's)."""
    return _load("memprobe").status()


def kind(path: str) -> str:
    path = path.removesuffix(" (deleted)")
    if path.endswith(".ann"):
        return "annoy"
    if path.endswith(".run"):
        return "runs"
    if path.endswith(".ldb") or path.endswith(".sst"):
        return "ldb"
    if path == "[heap]":
        return "heap"
    if not path:
        return "anon"
    if ".so" in path:
        return "libs"
    return "other"


HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def smaps() -> dict[str, dict[str, float]]:
    """Resident MB and mapped MB (and the number of mappings) per kind of mapping."""
    out = {k: {"rss": 0.0, "size": 0.0, "maps": 0} for k in KINDS}
    current = None
    with open("/proc/self/smaps") as lines:
        for line in lines:
            if HEADER.match(line):
                parts = line.split(None, 5)
                current = out[kind(parts[5].strip() if len(parts) > 5 else "")]
                current["maps"] += 1
            elif line.startswith("Rss:"):
                current["rss"] += int(line.split()[1]) / 1024
            elif line.startswith("Size:"):
                current["size"] += int(line.split()[1]) / 1024
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]  # fmt: skip


def mallinfo() -> dict[str, float]:
    """glibc's malloc: MB handed out (in use, mmapped blocks included) and MB free but kept."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        call = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    call.restype = _MallInfo2
    info = call()
    return {"malloc_used": (info.uordblks + info.hblkhd) / 2**20, "malloc_free": info.fordblks / 2**20}


def pymalloc_arenas() -> float:
    """MB in pymalloc's arenas now (``sys._debugmallocstats`` writes to fd 2: read it from a file)."""
    with tempfile.TemporaryFile("w+") as capture:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read()
    arenas = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", text)
    size = re.search(r"(\d+) arenas \* (\d+) bytes/arena", text)
    if not arenas:
        return float("nan")
    per = int(size.group(2)) if size else 1 << 20
    return int(arenas.group(1).replace(",", "")) * per / 2**20


def leveldb_memory(engine) -> float:
    """MB LevelDB says it holds in memory (memtables and block cache: ``approximate-memory-usage``)."""
    db = getattr(getattr(getattr(engine, "_ctx", None), "store", None), "_db", None)
    value = db.get_property(b"leveldb.approximate-memory-usage") if db is not None else None
    return int(value) / 2**20 if value else float("nan")


def sample(engine=None) -> dict[str, float]:
    out = dict(status())
    out["ldb_mem"] = leveldb_memory(engine)
    for name, figures in smaps().items():
        out[name] = figures["rss"]
        out[f"{name}_size"] = figures["size"]
    out.update(mallinfo())
    out["pymalloc"] = pymalloc_arenas()
    return out


COLUMNS = ("VmRSS", "RssAnon", "RssFile", "annoy", "runs", "ldb", "heap", "anon", "libs", "malloc_used",
           "malloc_free", "pymalloc", "ldb_mem")  # fmt: skip


def row(label: str, figures: dict[str, float], extra: str = "") -> str:
    return f"{label:>14} " + " ".join(f"{figures.get(c, float('nan')):8.1f}" for c in COLUMNS) + f"  {extra}"


async def run(args, path: str) -> None:
    recall_ab = _load("recall_ab")
    bench = recall_ab._recall_module()
    extra = {}
    if args.clock:
        from cortexdb.engine.clock import ManualClock

        extra["clock"] = ManualClock(args.clock)
    fresh = not os.path.exists(path)
    config = EngineConfig(embedder="hash", idle_timeout=3600, **_load("locomo").settings(args.set))
    print(f"recall_memory: {path}, {args.recalls} recalls ({args.shape}), settings {args.set or 'default'}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print("MB:            " + " ".join(f"{c[:8]:>8}" for c in COLUMNS))
    gc.collect()
    print(row("before open", sample()))
    async with cortexdb.open_engine("leveldb", path=path, config=config, **extra) as engine:
        if fresh:
            started = time.perf_counter()
            await bench.load(engine, SCOPE, random.Random(args.events), args.events)
            print(f"loaded {args.events} events in {time.perf_counter() - started:.0f} s")
        await bench.settle(engine, SCOPE)
        rng = random.Random(7)
        await engine.recall(recall_ab.request(args.shape, bench.text(rng, rng.choice(bench.QUERIES))))
        gc.collect()
        first = sample(engine)
        print(row("1st recall", first))
        snapshot = None
        if args.tracemalloc:  # traced from here; compared from the first interval's end (caches full by then)
            import tracemalloc

            tracemalloc.start(4)
        ranked, cpu = [], []
        for done in range(1, args.recalls + 1):
            query = bench.text(rng, rng.choice(bench.QUERIES))
            started = time.process_time()
            pack = await engine.recall(recall_ab.request(args.shape, query))
            cpu.append((time.process_time() - started) * 1000)
            if args.out:
                ranked.append({**{layer: [(i["id"], i["score"]) for i in items] for layer, items in pack["layers"].items()},
                               "relationships": pack.get("relationships")})  # fmt: skip
            if done % args.every == 0 or done == args.recalls:
                now = sample(engine)
                print(row(f"{done} recalls", now, f"CPU p50 {statistics.median(cpu):.2f} ms, load "
                                                  f"{os.getloadavg()[0]:.1f}"), flush=True)  # fmt: skip
                cpu = []
                if args.tracemalloc and snapshot is None:
                    gc.collect()
                    snapshot = tracemalloc.take_snapshot()
        if snapshot is not None:
            gc.collect()
            print(f"Python allocations that grew most from recall {args.every} on (tracemalloc):")
            for stat in tracemalloc.take_snapshot().compare_to(snapshot, "traceback")[:8]:
                print(f"  {stat.size_diff / 1024:+9.1f} KB {stat.count_diff:+7d} blocks  "
                      + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in stat.traceback))
        if args.bm25:  # bench/recall.py's baseline, built in the same process before its last memory figure
            rng_texts = random.Random(args.events)
            texts = []
            for offset in range(0, args.events, 1000):
                texts += [c["content"]["text"] for c in bench.items(rng_texts, min(1000, args.events - offset), offset)]
            bench.rank_bm25_baseline(texts, random.Random(1))
            del texts
            gc.collect()
            print(row("rank-bm25", sample(), "after bench/recall.py's baseline (BM25Okapi over the texts)"))
        mapped = {k: now[f"{k}_size"] for k in ("annoy", "runs", "ldb")}
        print("mapped MB (size of the mappings): " + ", ".join(f"{k} {v:.1f}" for k, v in mapped.items()))
        print(f"growth over the 1st recall: VmRSS {now['VmRSS'] - first['VmRSS']:+.1f} MB (anonymous "
              f"{now['RssAnon'] - first['RssAnon']:+.1f}, file-backed {now['RssFile'] - first['RssFile']:+.1f}: annoy "
              f"{now['annoy'] - first['annoy']:+.1f}, LevelDB tables {now['ldb'] - first['ldb']:+.1f}, runs "
              f"{now['runs'] - first['runs']:+.1f})")  # fmt: skip
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(ranked, handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--events", type=int, default=25_000)
    parser.add_argument("--recalls", type=int, default=1000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--shape", choices=["pack", "events"], default="pack")
    parser.add_argument("--bm25", action="store_true", help="then build bench/recall.py's rank-bm25 baseline "
                        "over the --events texts in this process, and sample again")
    parser.add_argument("--tracemalloc", action="store_true", help="the Python allocations that grew most "
                        "between the first --every recalls and the last (slows recalls down)")
    parser.add_argument("--mmap-reads", action="store_true", help="LevelDB reads its tables through memory "
                        "maps (its own default; the engine's is pread: decisions.md)")
    parser.add_argument("--copy", action="store_true", help="run on a throwaway copy of --data")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an EngineConfig field for this run (e.g. vector_sealed=annoy; repeatable)")
    parser.add_argument("--clock", help="pin the engine's clock to this RFC 3339 moment")
    parser.add_argument("--out", help="write the ranked ids and scores of each pack (JSON)")
    args = parser.parse_args()
    if args.mmap_reads:  # the A/B's other arm: LevelDB's tables read through memory maps, as before
        from cortexdb.backends.leveldb import files

        files.DEFAULT_OPTIONS["mmap_reads"] = True
    if not args.copy:
        trio.run(run, args, args.data)
        return
    scratch = tempfile.mkdtemp(prefix="recall-memory-")
    try:
        shutil.copytree(args.data, os.path.join(scratch, "data"))
        trio.run(run, args, os.path.join(scratch, "data"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
