"""Import cost per record in CPU time, in one process, against the bulk write in the same run.

    python bench/import_cpu.py [--items 10000] [--rounds 3] [--ordering batch_throughput]

bench/import.py measures throughput and memory in a fresh process per row; on a shared machine
its wall-clock rates move with the load.  This one measures what the import costs per record
in CPU µs of the process (``time.process_time``: every thread, so the importer's read-ahead
thread counts), which moves far less: each round opens a fresh LevelDB engine (hash embedder,
derivation parked) per kind and writes ``--items`` records as

- ``bulk``: bench/capture.py's path, ``experience_bulk`` of 1,000 small message envelopes
  (bench/import.py's baseline, generated as they are written);
- ``jsonl``: the same envelopes imported from a JSONL file (``Engine.imports``);
- ``mapped``: the records a Mem0 ``get_all`` file maps to, bulk-written (read back from a file
  of envelopes): what a Mem0 record costs to write, without the importer;
- ``mem0``: that Mem0 file imported.

The kinds rotate their order each round; the median of the rounds is printed with its ratio to
the bulk write's (bulk / kind: 1.00 or more is the goal), and the wall time per record beside
it, with the load average.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import shutil
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # bench/http.py
sys.path.insert(0, os.path.join(_HERE, ".."))

import trio  # noqa: E402

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_import", os.path.join(_HERE, "import.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # its source files, baselines and import_file

KINDS = ("bulk", "jsonl", "mapped", "mem0")
SCOPE = "org:bench/user:bench"


async def one(kind: str, n: int, files: dict[str, str], ordering: str) -> tuple[float, float]:
    """(CPU µs, wall µs) per record of ``kind`` on a fresh engine."""
    path = tempfile.mkdtemp(prefix="bench-import-cpu-")
    try:
        async with cortexdb.open_engine("leveldb", path=path,
                                        config=EngineConfig(embedder="hash", idle_timeout=3600)) as engine:  # fmt: skip
            await engine.ping(SCOPE)
            await engine.pause_derivation(SCOPE)
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            if kind == "bulk":
                await bench.bulk(engine, n, 1)
            elif kind == "mapped":
                await bench.bulk_mapped(engine, files["mapped"])
            else:
                await bench.import_file(engine, {"file": files[kind], "format": kind, "ordering": ordering})
            return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ordering", default="batch_throughput", choices=bench.ORDERINGS)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-import-cpu-src-")
    try:
        files = {"jsonl": os.path.join(work, "records.jsonl"), "mem0": os.path.join(work, "mem0.json")}
        bench.write_jsonl(files["jsonl"], args.items, 1)
        bench.write_mem0(files["mem0"], args.items, 1)
        files["mapped"] = bench.mapped_file({"format": "mem0", "file": files["mem0"]})
        runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
        loads = [os.getloadavg()[0]]
        for index in range(args.rounds):
            for kind in KINDS[index % len(KINDS):] + KINDS[: index % len(KINDS)]:
                runs[kind].append(trio.run(one, kind, args.items, files, args.ordering))
            loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {kind: sorted(r[0] for r in rows)[len(rows) // 2] for kind, rows in runs.items()}
    print(f"items={args.items:,} rounds={args.rounds} ordering={args.ordering} leveldb, hash embedder, derivation "
          f"parked; load average {min(loads):.1f}-{max(loads):.1f}")  # fmt: skip
    print(f"{'kind':7s} {'CPU µs/record (each round)':>28s} {'median':>7s} {'bulk/kind':>9s}   wall µs/record")
    for kind, rows in runs.items():
        cpus = " ".join(f"{cpu:4.0f}" for cpu, _ in rows)
        walls = " ".join(f"{wall:4.0f}" for _, wall in rows)
        print(f"{kind:7s} {cpus:>28s} {median[kind]:7.0f} {median['bulk'] / median[kind]:9.2f}   {walls}")


if __name__ == "__main__":
    main()
