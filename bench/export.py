"""Export memory and throughput: does an export's memory stay flat as the scope grows?

    python bench/export.py [--sizes 2000,20000] [--format jsonl] [--backend memory|leveldb]

For each size N: a fresh engine captures N short notes into one scope with the bulk API
(``directives.extract: []``: events and episodes only, so loading stays quick) and derives them.
Then, on the loaded engine:

- **baseline**: every event read page by page through ``engine.events`` (1000 a page), the read
  any export of the scope has to make;
- **export**: one ``file`` export of the scope (``engine.exports``), timed from ``start`` to the
  end of ``wait`` — records per second and its time as a ratio to the baseline read;
- **memory**: the same export again under ``tracemalloc`` (every thread: the exporter runs in a
  worker thread): the peak of Python heap allocations during it above the level before it.

The last columns compare each size with the first one (same run): a flat memory profile is a
peak ratio near 1 while the file grows N-fold.  Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc

import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # bench/http.py
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

SCOPE = "org:bench/user:alice"


async def measure(size: int, fmt: str, backend: str) -> dict[str, float]:
    config = EngineConfig(transfer_dir=tempfile.mkdtemp(prefix="cortexdb-bench-export-"), episode_idle_check=3600.0)
    path = tempfile.mkdtemp(prefix="cortexdb-bench-export-data-") if backend == "leveldb" else None
    async with cortexdb.open_engine(backend, path, config=config, id_seed=1) as engine:
        limit = config.bulk_max_items
        for start in range(0, size, limit):
            items = [{"modality": "conversation", "directives": {"extract": []},
                      "content": {"kind": "message", "role": "user", "text": f"Note {i}: the run felt easy today."},
                      "context": {"observed_at": "2026-01-01T00:00:00Z", "labels": {"n": i}}}
                     for i in range(start, min(size, start + limit))]  # fmt: skip
            await engine.experience_bulk({"scope": SCOPE, "items": items})
        await engine.flush(SCOPE, seal=True)
        began, cursor = time.perf_counter(), None
        while True:
            page = await engine.events(SCOPE, limit=1000, cursor=cursor)
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
        read = time.perf_counter() - began
        began = time.perf_counter()
        status = await export(engine, fmt)
        elapsed = time.perf_counter() - began
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        await export(engine, fmt)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    records = sum(status["records"].values())
    return {"records": records, "read": read, "seconds": elapsed, "per_second": records / elapsed,
            "bytes": status["size_bytes"], "peak": peak - base}  # fmt: skip


async def export(engine, fmt: str) -> dict:
    started = await engine.exports.start({"scope": SCOPE, "format": fmt, "view": "local"})
    status = await engine.exports.wait(started["export_id"])
    _, path = await engine.exports.download(started["export_id"])
    os.remove(path)
    return status


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,20000")
    parser.add_argument("--format", default="jsonl", choices=("jsonl", "mem0"))
    parser.add_argument("--backend", default="memory", choices=("memory", "leveldb"))
    args = parser.parse_args()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        results.append((size, await measure(size, args.format, args.backend)))
    _, base = results[0]
    print(f"export format={args.format} backend={args.backend}  (x: against the first size)")
    print(f"{'events':>8} {'records':>8} {'read s':>7} {'export s':>8} {'/read':>6} {'rec/s':>7} {'file MiB':>9} "
          f"{'peak MiB':>9} {'file x':>7} {'peak x':>7}")  # fmt: skip
    for size, r in results:
        print(f"{size:>8} {r['records']:>8} {r['read']:>7.2f} {r['seconds']:>8.2f} {r['seconds'] / r['read']:>6.2f} "
              f"{r['per_second']:>7.0f} {r['bytes'] / 2**20:>9.2f} {r['peak'] / 2**20:>9.2f} "
              f"{r['bytes'] / base['bytes']:>7.1f} {r['peak'] / base['peak']:>7.2f}")  # fmt: skip


if __name__ == "__main__":
    trio.run(main)
