"""A vector index alone at scale: resident memory, search time and answers of sealed segments.

    python bench/vector_memory.py [--vectors 100000] [--searches 1000] [--kind hash|clustered]
                                  [--arms ivf,annoy] [--limit 28] [--segment-size 20000] [--run-rows 2048]
                                  [--base DIR]

Both arms run at once, each in its own worker process (RSS is per process), on the same vectors
(the searches start together once every arm is filled):
a ``VectorIndex`` as the engine makes one for a layer with a data dir (float16, runs of 2,048,
segments of 20,000, ``sealed`` = the arm), filled vector by vector with the engine's seals and
merges, then searched ``--searches`` times.  ``--kind hash``: the hash embedder's vectors of
bench/recall.py's synthetic texts (queries: its question templates); ``clustered``: unit vectors
around 2,000 random centres (queries: other such vectors).  The workers fix glibc's mmap threshold as
an engine does.  Each worker prints RSS growth over
the empty index after the fill and after the searches (``VmRSS``, and what of it is the segment
files' pages, ``*.ann`` / ``*.run``), in MB and in KB per 1,000 vectors, the searches' wall and
CPU p50/p95; the parent compares every arm's top ``--limit`` with the exact float32 answer
(id overlap, and the share of results scoring at least the exact k-th best, which counts equal
cosines as equal).  The load average is printed with the figures.  Ids are the engine's form,
``evt_<uuid>`` (40 characters), added in time order, held only by the index.

``--base DIR``: every arm runs twice at once, with this tree's ``cortexdb`` and as ``<arm>@base``
with the one in DIR (e.g. ``git archive <commit> | tar -x -C DIR``): a before/after of the index
itself in one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.environ.get("VECTOR_MEMORY_ROOT", ROOT))  # a worker of an ``@base`` arm: that tree

import numpy as np  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_procmem", os.path.join(HERE, "procmem.py"))
procmem = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(procmem)  # type: ignore[union-attr]


def _recall_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(HERE, "recall.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_vectors(kind: str, count: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, queries) as float32 unit vectors of 384 dimensions."""
    if kind == "hash":
        from cortexdb.engine.retrieve.embedders import HashEmbedder

        bench, embedder = _recall_module(), HashEmbedder(384)
        rng = random.Random(count)
        texts = [bench.text(rng, rng.choice(bench.TEMPLATES)) for _ in range(count)]
        asked = [bench.text(rng, rng.choice(bench.QUERIES)) for _ in range(queries)]
        rows = np.concatenate([embedder.embed(texts[i : i + 4096]) for i in range(0, count, 4096)])
        return rows.astype(np.float32), embedder.embed(asked).astype(np.float32)
    rng = np.random.default_rng(count)
    centres = rng.normal(size=(2000, 384)).astype(np.float32)

    def around(n):
        rows = centres[rng.integers(0, len(centres), n)] + 0.9 * rng.normal(size=(n, 384)).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return around(count), around(queries)


def status() -> dict[str, float]:
    out = procmem.status()
    with open("/proc/self/smaps") as lines:
        path, files = "", 0.0
        for line in lines:
            first = line.split()
            if "-" in first[0] and len(first) >= 5:
                path = first[5] if len(first) > 5 else ""
            elif first[0] == "Rss:" and (".ann" in path or ".run" in path):
                files += int(first[1]) / 1024
    out["segments"] = files
    return out


def worker(arm: str, path: str, searches: int, limit: int, segment_size: int, run_rows: int) -> None:
    import trio

    from cortexdb import EngineConfig
    from cortexdb.engine.memtrim import fix_mmap_threshold, release_free_memory
    from cortexdb.engine.retrieve.vector_index import VectorIndex

    fix_mmap_threshold(EngineConfig().malloc_mmap_threshold)  # as an engine does at open

    data = np.load(path)
    rows, queries = data["rows"], data["queries"]
    out: dict = {"arm": arm}

    async def run():
        with tempfile.TemporaryDirectory() as directory:
            index = VectorIndex(384, segment_size=segment_size, dtype="float16", directory=directory,
                                run_rows=run_rows, sealed=arm)  # fmt: skip
            release_free_memory()
            base = status()
            started = time.perf_counter()
            for i in range(len(rows)):
                index.add(f"evt_{i:08x}-0000-7000-8000-{i:012x}", rows[i])
                if index.needs_seal:
                    await index.seal()
            out["fill_s"] = time.perf_counter() - started
            out["segments"] = index.segment_sizes
            release_free_memory()
            out["filled"] = {k: v - base.get(k, 0.0) for k, v in status().items()}
            print("ready", flush=True)  # the searches start when every arm is filled
            sys.stdin.readline()
            wall, cpu, answers = [], [], []
            for s in range(searches):
                query = queries[s % len(queries)]
                t, c = time.perf_counter(), time.process_time()
                found = index.search(query, limit)
                wall.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
                answers.append([int(doc_id[4:12], 16) for doc_id, _ in found])
            release_free_memory()
            out["searched"] = {k: v - base.get(k, 0.0) for k, v in status().items()}
            out["wall"], out["cpu"], out["answers"] = wall, cpu, answers

    trio.run(run)
    print(json.dumps(out))


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kind", choices=["hash", "clustered"], default="hash")
    parser.add_argument("--arms", default="ivf,annoy")
    parser.add_argument("--limit", type=int, default=28)
    parser.add_argument("--segment-size", type=int, default=20_000, help="the engine's vector_segment_size")
    parser.add_argument("--run-rows", type=int, default=2048, help="the engine's vector_run_rows")
    parser.add_argument("--base", help="also run every arm with the cortexdb of this tree (``<arm>@base``)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker.split("@")[0], args.data, args.searches, args.limit, args.segment_size, args.run_rows)
        return
    rows, queries = make_vectors(args.kind, args.vectors, args.queries)
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "vectors.npz")
        np.savez(path, rows=rows, queries=queries)
        print(f"vector_memory: {args.vectors} {args.kind} vectors, {args.searches} searches of top {args.limit}, "
              f"arms {args.arms} at once, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
        arms = args.arms.split(",")
        if args.base:
            arms = [name for arm in arms for name in (arm, f"{arm}@base")]

        def env(arm):
            root = os.path.abspath(args.base) if arm.endswith("@base") else ROOT
            return {**os.environ, "PYTHONPATH": root, "VECTOR_MEMORY_ROOT": root}

        procs = {arm: subprocess.Popen([sys.executable, __file__, "--worker", arm, "--data", path, "--searches",
                                        str(args.searches), "--limit", str(args.limit), "--segment-size",
                                        str(args.segment_size), "--run-rows", str(args.run_rows)], stdout=subprocess.PIPE,
                                       stdin=subprocess.PIPE, env=env(arm), text=True)
                 for arm in arms}  # fmt: skip
        for proc in procs.values():  # filled: then all arms search at once
            assert proc.stdout.readline().strip() == "ready"
        print(f"filled; searching, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        results = {arm: json.loads(proc.communicate("go\n")[0].strip().splitlines()[-1]) for arm, proc in procs.items()}
    exact_rows = rows.astype(np.float16).astype(np.float32)  # what the index holds
    truth, kth = [], []
    for s in range(args.searches):
        query = queries[s % len(queries)]
        sims = exact_rows @ query
        best = np.argsort(-sims, kind="stable")[: args.limit]
        truth.append((set(best.tolist()), sims))
        kth.append(float(sims[best[-1]]))
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for arm, out in results.items():
        overlap = statistics.mean(len(set(a) & t) / args.limit for a, (t, _) in zip(out["answers"], truth, strict=True))
        reached = statistics.mean(
            sum(1 for i in a if sims[i] >= k - 1e-3) / args.limit for a, (_, sims), k in zip(out["answers"], truth, kth, strict=True)
        )  # fmt: skip
        per_k = 1000.0 / args.vectors
        f, s = out["filled"], out["searched"]
        print(f"{arm:>10}: segments {out['segments']}, fill {out['fill_s']:.0f} s | RSS growth after fill "
              f"{f['VmRSS']:.1f} MB (segment files {f['segments']:.1f}), after {args.searches} searches "
              f"{s['VmRSS']:.1f} MB (segment files {s['segments']:.1f}, anonymous {s['RssAnon']:.1f}) = "
              f"{s['VmRSS'] * per_k * 1024:.0f} KB per 1k vectors | search wall p50 {statistics.median(out['wall']):.2f} "
              f"p95 {pct(out['wall'], 0.95):.2f} ms, CPU p50 {statistics.median(out['cpu']):.2f} ms | top-{args.limit} "
              f"overlap with exact {overlap:.3f}, at least the exact k-th score {reached:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
