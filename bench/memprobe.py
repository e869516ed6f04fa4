"""Engine memory per write, without the server: soak-like writes into a LevelDB engine.

    python bench/memprobe.py [--writes 30000] [--every 3000] [--scopes 5] [--tracemalloc]

It opens a LevelDB engine in a temporary directory (hash embedder, default settings) in this
process and writes bench/soak.py's texts over ``--scopes`` user scopes, ``--every`` at a time
(concurrently, no wait), then flushes derivation, collects garbage and returns free heap pages
(``malloc_trim``) before sampling /proc/self/status: VmRSS, RssAnon and RssFile.  It prints the
growth per write after the second sample (the warm-up), and with ``--tracemalloc`` the Python
allocations that grew most between the second sample and the end (what Python does not trace is
native memory: LevelDB, allocator fragmentation).  To compare two checkouts, run it with each as
the working directory and PYTHONPATH, side by side.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, ROOT)

import trio  # noqa: E402

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402
from cortexdb.engine.memtrim import release_free_memory  # noqa: E402

_spec = importlib.util.spec_from_file_location("soak", os.path.join(HERE, "soak.py"))
soak = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(soak)  # type: ignore[union-attr]


_spec = importlib.util.spec_from_file_location("bench_procmem", os.path.join(HERE, "procmem.py"))
procmem = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(procmem)  # type: ignore[union-attr]
status = procmem.status  # VmRSS, RssAnon and RssFile of this process, in MB


async def probe(args: argparse.Namespace, path: str) -> None:
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(1)
    config = EngineConfig(default_caller="user:alice")
    samples: list[tuple[int, dict[str, float]]] = []
    snapshot = None
    async with cortexdb.open_engine("leveldb", path=os.path.join(path, "data"), config=config) as engine:
        print(f"memprobe: {args.writes} writes over {args.scopes} scopes, {args.every} at a time, LevelDB")
        print(f"{'writes':>8} {'VmRSS MB':>9} {'anon MB':>8} {'file MB':>8}")
        for start in range(0, args.writes, args.every):
            async with trio.open_nursery() as nursery:
                for i in range(start, min(args.writes, start + args.every)):
                    body = soak.write_body(i, args.scopes)
                    body["scope"] = body["scope"].replace(soak.ROOT_SCOPE, "org:acme")
                    nursery.start_soon(engine.experience, body)
            await engine.flush()
            gc.collect()
            release_free_memory()
            done, now = min(args.writes, start + args.every), status()
            samples.append((done, now))
            print(f"{done:8d} {now['VmRSS']:9.1f} {now['RssAnon']:8.1f} {now['RssFile']:8.1f}", flush=True)
            if len(samples) == 2 and args.tracemalloc:
                snapshot = tracemalloc.take_snapshot()
    if len(samples) >= 3:
        (w0, first), (w1, last) = samples[1], samples[-1]
        per = {k: (last[k] - first[k]) * 1024 / (w1 - w0) for k in ("VmRSS", "RssAnon")}
        print(f"per write after {w0}: VmRSS {per['VmRSS']:.2f} KB, anonymous {per['RssAnon']:.2f} KB")
    if snapshot is not None:
        for stat in tracemalloc.take_snapshot().compare_to(snapshot, "lineno")[:20]:
            print(stat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=30_000)
    parser.add_argument("--every", type=int, default=3_000, help="writes between two samples")
    parser.add_argument("--scopes", type=int, default=5)
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args()
    path = tempfile.mkdtemp(prefix="cortex-memprobe-")
    try:
        trio.run(probe, args, path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
