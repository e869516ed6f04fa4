"""The BM25 text index alone: resident memory per document and pruned-search time, before and now.

    python bench/text_memory.py [--docs 30000] [--queries 400] [--baseline REV] [--arms before,memory,mapped]
                                [--rounds 2] [--remove-every 0]

Each arm runs in its own worker process (RSS is per process), one after the other, ``--rounds``
times interleaved (before, memory, mapped, before, ...): it indexes ``--docs`` documents with the
soak's texts (bench/soak.py ``text(i)``: a third of them carry a new number, so the vocabulary
grows as in the soak) and ids like the engine's (``evt_`` and a time-ordered UUID), one ``add`` at a
time; with ``--remove-every N`` every Nth document is removed again a little later (tombstones and
compactions).  Arms:

- ``before``: ``TextIndex`` as of ``--baseline`` (a git revision; default 9202cd2, before sealed
  segments), loaded from ``git show``;
- ``memory``: today's ``TextIndex`` without a directory (segments as numpy arrays: the memory
  backend);
- ``mapped``: today's with a directory (segments in unlinked files, mapped: a LevelDB data dir).

After the fill (``gc.collect()``, ``malloc_trim``) each worker prints anonymous RSS growth over the
empty index (RssAnon; RssFile for the mapped arm's pages) in bytes per document, tracemalloc's
traced bytes per document (a second fill of the same documents under tracemalloc: Python's and
numpy's allocations; file-backed pages are not allocations), then the p50/p95 wall time of
``search_pruned(query, 10)`` over ``--queries`` queries (and their CPU time: less noisy on a
shared machine) (the soak's recall queries and texts), and
checks that every arm returns the same results as ``before``.  Ratios are against ``before`` in the
same run.  The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, ROOT)


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


procmem = _load("bench_procmem", os.path.join(HERE, "procmem.py"))


def doc_id(i: int) -> str:
    """An engine-like id: ``evt_`` and a UUIDv7-shaped string, time-ordered."""
    stamp = 0x0190_0000_0000 + i * 3
    rand = (i * 0x9E3779B97F4A7C15) & ((1 << 74) - 1)
    value = (stamp << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    text = f"{value:032x}"
    return f"evt_{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def make_index(arm: str, baseline: str, folder: str):
    if arm == "before":
        source = subprocess.run(["git", "-C", ROOT, "show", f"{baseline}:cortexdb/engine/retrieve/text_index.py"],
                                check=True, capture_output=True, text=True).stdout  # fmt: skip
        spec = importlib.util.spec_from_loader("cortexdb.engine.retrieve._text_index_before", loader=None)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        module.__package__ = "cortexdb.engine.retrieve"
        exec(compile(source, "text_index_before.py", "exec"), module.__dict__)  # noqa: S102
        return module.TextIndex()
    from cortexdb.engine.retrieve.text_index import TextIndex

    return TextIndex(directory=folder if arm == "mapped" else None)


def fill(index, docs: int, remove_every: int) -> None:
    soak = _load("bench_soak", os.path.join(HERE, "soak.py"))
    for i in range(docs):
        index.add(doc_id(i), soak.text(i))
        if remove_every and i >= 50 and (i - 50) % remove_every == 0:
            index.remove(doc_id(i - 50))


def settle() -> dict[str, float]:
    from cortexdb.engine.memtrim import release_free_memory

    gc.collect()
    release_free_memory()
    return procmem.status()


def worker(args: argparse.Namespace) -> None:
    from cortexdb import EngineConfig
    from cortexdb.engine.memtrim import fix_mmap_threshold

    fix_mmap_threshold(EngineConfig().malloc_mmap_threshold)  # as an engine does at open
    soak = _load("bench_soak", os.path.join(HERE, "soak.py"))
    folder = tempfile.mkdtemp(prefix="text-memory-")
    index = make_index(args.worker, args.baseline, folder)
    before = settle()
    fill(index, args.docs, args.remove_every)
    after = settle()
    queries = [soak.QUERIES[i % len(soak.QUERIES)] if i % 2 else soak.text(i * 37) for i in range(args.queries)]
    times, cpu, results = [], [], []
    for query in queries:
        start, start_cpu = time.perf_counter(), time.process_time()
        found = index.search_pruned(query, 10)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        results.append(found)
    del index
    gc.collect()
    tracemalloc.start()
    again = make_index(args.worker, args.baseline, folder + "-traced")
    base = tracemalloc.get_traced_memory()[0]
    fill(again, args.docs, args.remove_every)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    times.sort()
    print(json.dumps({
        "arm": args.worker, "docs": len(again),
        "anon_per_doc": (after["RssAnon"] - before["RssAnon"]) * 1024 * 1024 / args.docs,
        "file_per_doc": (after["RssFile"] - before["RssFile"]) * 1024 * 1024 / args.docs,
        "traced_per_doc": traced / args.docs,
        "p50_ms": 1000 * statistics.median(times), "p95_ms": 1000 * times[int(0.95 * (len(times) - 1))],
        "cpu_p50_ms": 1000 * statistics.median(cpu), "cpu_mean_ms": 1000 * statistics.mean(cpu),
        "results": results,
    }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--baseline", default="9202cd2")
    parser.add_argument("--arms", default="before,memory,mapped")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--remove-every", type=int, default=0)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    arms = args.arms.split(",")
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for arm in arms:
            command = [sys.executable, __file__, "--worker", arm, "--docs", str(args.docs), "--queries", str(args.queries),
                       "--baseline", args.baseline, "--remove-every", str(args.remove_every)]  # fmt: skip
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs[arm].append(json.loads(out.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    print(f"{args.docs:,} soak documents, remove every {args.remove_every or '-'}; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'arm':8} {'anon B/doc':>12} {'file B/doc':>12} {'traced B/doc':>12} {'p50 ms':>14} {'p95 ms':>14} "
          f"{'CPU p50 ms':>14} {'CPU mean ms':>14}")  # fmt: skip
    reference = runs[arms[0]]
    for arm in arms:
        got = runs[arm]
        same = all(run["results"] == reference[0]["results"] for run in got)

        def col(key: str, fmt: str = "{:.0f}", got=got) -> str:
            return " / ".join(fmt.format(run[key]) for run in got)

        print(f"{arm:8} {col('anon_per_doc'):>12} {col('file_per_doc'):>12} {col('traced_per_doc'):>12} "
              f"{col('p50_ms', '{:.2f}'):>14} {col('p95_ms', '{:.2f}'):>14} {col('cpu_p50_ms', '{:.2f}'):>14} "
              f"{col('cpu_mean_ms', '{:.2f}'):>14}  same results: {same}")  # fmt: skip
    keys = ("anon_per_doc", "traced_per_doc", "p50_ms", "cpu_p50_ms", "cpu_mean_ms")
    base = {key: statistics.median(run[key] for run in reference) for key in keys}
    for arm in arms[1:]:
        ratio = {key: statistics.median(run[key] for run in runs[arm]) / base[key] for key in base}
        print(f"{arm} / {arms[0]}: anonymous {ratio['anon_per_doc']:.2f}, traced {ratio['traced_per_doc']:.2f}, "
              f"search p50 {ratio['p50_ms']:.2f} (CPU p50 {ratio['cpu_p50_ms']:.2f}, CPU mean {ratio['cpu_mean_ms']:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
