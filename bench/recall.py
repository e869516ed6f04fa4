"""Recall latency versus corpus size, on LevelDB.

    python bench/recall.py [--sizes 1000,10000,100000] [--embedder hash|minilm] [--queries 200]
    python bench/recall.py --events 1000000     (``--events`` is ``--sizes``)
    python bench/recall.py --backend postgres --nodes 1|3 [--sizes N] [--queries Q] [--dsn DSN]

``--nodes N``: N postgres nodes (processes with ``node_id``, one partition each, on one store),
each with the first ``--sizes`` events in its scope, against one LevelDB process in the same run;
recalls/s over all nodes and the ratio (bench/nodes.py).

For each size N: N synthetic conversational events in one scope (captured with the bulk API and
fully derived), then ``--queries`` recalls (holistic pack, default budgets) timed one after another:
p50 / p95 — right after the load, and again in a second pass (the first pass meets cold caches and
LevelDB compacting the bulk load; at 100k the two differ by up to a third).  Then a holistic recall over three levels (org -> team -> user, N/3 events each).
Baseline in the same run: one BM25 query with rank-bm25's ``BM25Okapi.get_scores`` over the same
event texts (what a rebuild-per-query approach would cost), and the ratio.
Target (issue 3): p50 <= 50 ms at 100k events in one scope with the deterministic embedder.
Router (issue 16), same scope and run: recall p50 with the query router and relationship
expansion on and off (``EngineConfig.recall_router``), the same questions interleaved, and the
ratio; goal <= 1.10.
Streaming (§10.1), same scope and run: per query the time to the first event (``plan``), to the
first ``layer`` event and to ``done`` (the whole pack), p50 each, and first event / whole pack.
Memory (this process's /proc/self/status): RSS just before the load, then the growth at its peak
during the load (VmHWM, reset before each size) and steady after it (derivation flushed, vector
seals finished, ``gc.collect()``), per event, and the steady growth's anonymous and file-backed
parts (memory-mapped index files count as file-backed: the kernel may reclaim them); then after
the two passes of recalls (read before the rank-bm25 baseline builds its index in this process),
and after the router's and the streaming recalls too, each with its two parts
(bench/recall_memory.py splits them by mapping).
Goals (issue 3): at 100k events in one scope, peak growth <= 600 MB and steady <= 400 MB.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import attrs
import trio

# bench/http.py would shadow the stdlib package `http` for a script run from this directory
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402
from cortexdb.engine.retrieve.text_index import tokenize  # noqa: E402

NAMES = [
    "Alice",
    "Bob",
    "Carmen",
    "Deepak",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
]
PLACES = [
    "Lisbon",
    "Berlin",
    "Osaka",
    "Nairobi",
    "Toronto",
    "Lima",
    "Oslo",
    "Hanoi",
    "Austin",
    "Porto",
    "Cairo",
]
THINGS = [
    "hiking",
    "chess",
    "jazz",
    "pottery",
    "sailing",
    "baking",
    "cycling",
    "poetry",
    "gardening",
    "climbing",
]
COMPANIES = [
    "Acme",
    "Globex",
    "Initech",
    "Umbrella",
    "Hooli",
    "Stark",
    "Wayne",
    "Soylent",
    "Cyberdyne",
]
TEMPLATES = [
    "I live in {place} now and I really like it.",
    "My favorite hobby is {thing}.",
    "{name} works at {company} on the data team.",
    "I really love {thing} on weekends with {name}.",
    "{company} moved to {number} seats after the pilot.",
    "We talked with {name} about the trip to {place} next month.",
    "I'm {age} years old and I work as a {thing} teacher.",
    "Yesterday {name} and I went to a {thing} class in {place}.",
    "The meeting with {company} about {thing} ran long but went well.",
    "Remind me to call {name} about the {company} contract.",
]
QUERIES = [
    "Where does she live now?", "What does {name} do at {company}?", "Who likes {thing}?",
    "How many seats does {company} have?", "When is the trip to {place}?", "What hobby does {name} enjoy?",
]  # fmt: skip


def text(rng: random.Random, template: str) -> str:
    return template.format(
        name=rng.choice(NAMES), place=rng.choice(PLACES), thing=rng.choice(THINGS), company=rng.choice(COMPANIES),
        number=rng.randint(5, 900), age=rng.randint(18, 80),
    )  # fmt: skip


def items(rng: random.Random, count: int, start: int) -> list[dict]:
    out = []
    for i in range(start, start + count):
        day, second = divmod(i, 3600)
        out.append({
            "observed_actor": {"id": f"user:{rng.choice(NAMES).lower()}", "session": f"s{i // 200}"},
            "modality": "conversation",
            "content": {"kind": "message", "role": "user", "text": text(rng, rng.choice(TEMPLATES))},
            "context": {"observed_at": f"2026-{1 + (day // 28) % 12:02d}-{1 + day % 28:02d}T{second // 3600:02d}:"
                                       f"{(second // 60) % 60:02d}:{second % 60:02d}Z"},
        })  # fmt: skip
    return out


async def load(engine, scope: str, rng: random.Random, count: int, start: int = 0) -> list[str]:
    texts = []
    for offset in range(0, count, 1000):
        chunk = items(rng, min(1000, count - offset), start + offset)
        texts += [c["content"]["text"] for c in chunk]
        await engine.experience_bulk(
            {"scope": scope, "items": chunk, "ordering": "batch_throughput"}
        )
    await engine.flush(scope)
    return texts


async def time_recalls(
    engine, scope: str, rng: random.Random, queries: int, traversal: str
) -> list[float]:
    latencies = []
    for _ in range(queries):
        query = text(rng, rng.choice(QUERIES))
        started = time.perf_counter()
        await engine.recall(
            {"scope": scope, "query": query, "traversal": traversal, "diagnostics": "none"}
        )
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def time_stream(engine, scope: str, rng: random.Random, queries: int) -> dict[str, list[float]]:
    """Streaming recall (§10.1), per query: ms to the first event (``plan``), to the first
    ``layer`` event, and to ``done`` (the whole pack)."""
    out: dict[str, list[float]] = {"first": [], "layer": [], "done": []}
    for _ in range(queries):
        query = text(rng, rng.choice(QUERIES))
        started = time.perf_counter()
        seen: dict[str, float] = {}
        async for name, _ in engine.recall_stream({"scope": scope, "query": query, "traversal": "local",
                                                   "diagnostics": "none"}):  # fmt: skip
            elapsed = (time.perf_counter() - started) * 1000
            seen.setdefault("first", elapsed)
            if name == "layer":
                seen.setdefault("layer", elapsed)
            if name == "done":
                seen["done"] = elapsed
        for key in out:
            out[key].append(seen[key])
    return out


# the router's own cases, mixed into the bench's questions for the router on/off comparison
# ("What did ... last week?" is a temporal question with a window: its windowed retrieval runs,
# and finds nothing in the window here, the worst case: it walks recall_window_examined hits)
ROUTED_QUERIES = ["How is {name} related to {company}?", "Who does {name} work with?",
                  "Summarize what we discussed last month", "What are my favorite hobbies?",
                  "What did {name} say about {thing} last week?"]  # fmt: skip


def set_router(engine, on: bool) -> None:
    """The query router and graph expansion on or off on the open engine (EngineConfig.recall_router)."""
    engine.config = engine._ctx.config = attrs.evolve(engine._ctx.config, recall_router=on)


async def time_router(engine, scope: str, rng: random.Random, queries: int) -> tuple[list[float], list[float]]:
    """Recall p50 with the router (and relationship expansion) on and off, the same questions
    interleaved (on/off, then off/on for the next) on the same engine and data."""
    on, off = [], []
    for i in range(queries):
        query = text(rng, rng.choice(QUERIES + ROUTED_QUERIES))
        for arm in ((True, False) if i % 2 == 0 else (False, True)):
            set_router(engine, arm)
            started = time.perf_counter()
            await engine.recall({"scope": scope, "query": query, "traversal": "local", "diagnostics": "none"})
            (on if arm else off).append((time.perf_counter() - started) * 1000)
    set_router(engine, True)
    return on, off


def rank_bm25_baseline(texts: list[str], rng: random.Random) -> float:
    from rank_bm25 import BM25Okapi

    corpus = [tokenize(t) for t in texts]
    index = BM25Okapi(corpus)
    timings = []
    for _ in range(5):
        query = tokenize(text(rng, rng.choice(QUERIES)))
        started = time.perf_counter()
        index.get_scores(query)
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def memory() -> dict[str, float]:
    """VmRSS, VmHWM (peak), RssAnon and RssFile of this process, in MB."""
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[name] = int(value.split()[0]) / 1024
    return out


async def sample_peaks(peaks: dict[str, float]) -> None:
    """The largest anonymous and file-backed RSS seen, sampled every 0.2 s (VmHWM has no split)."""
    while True:
        now = memory()
        for name in peaks:
            peaks[name] = max(peaks[name], now[name])
        await trio.sleep(0.2)


def reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


async def settle(engine, scope: str) -> None:
    """Derivation flushed and the scope's background vector seals and merges finished."""
    await engine.flush(scope)
    for actor in _actors(engine):
        lane = getattr(actor, "lane", None)
        if lane is not None:
            await lane.index.vector_job_finished()
    gc.collect()


def _actors(engine):
    """The engine's live scope actors (private attributes: a bench may look; [] if they moved)."""
    handles = getattr(getattr(engine, "_supervisor", None), "_handles", None)
    if not isinstance(handles, dict):
        return []
    return [h.actor for h in handles.values() if getattr(h, "actor", None) is not None]


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def nodes_run(args) -> None:
    """``--backend postgres --nodes N``: recalls/s of N postgres nodes against one LevelDB process."""
    import importlib.util

    import psycopg

    spec = importlib.util.spec_from_file_location("bench_nodes", os.path.join(_HERE, "nodes.py"))
    nodes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nodes)
    server = None
    if args.dsn is None:
        from cortexdb.testing.pgserver import TemporaryPostgres

        server = TemporaryPostgres()
        dsn = server.start()
    else:
        dsn = args.dsn
    try:
        schema = f"bench_recall_{os.getpid()}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        size = int(args.sizes.split(",")[0])
        print(f"recall (holistic pack): {size} events in each node's scope, {args.queries} recalls per node, one at a time")
        nodes.run("recall", {"events": size, "count": args.queries}, args.nodes,
                  f"{dsn} options='-c search_path={schema}'")  # fmt: skip
    finally:
        if server is not None:
            server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", "--events", dest="sizes", default="1000,10000,100000",
                        help="events in the scope, comma-separated sizes (``--events``: the same)")
    parser.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--holistic-sizes",
        default="1000,10000",
        help="sizes that also run the 3-level holistic recall",
    )
    parser.add_argument("--vector-run-rows", type=int, default=None,
                        help="EngineConfig.vector_run_rows (default: the engine's; 0: no vector runs)")
    parser.add_argument("--backend", choices=["postgres"], help="with --nodes: the multi-node comparison")
    parser.add_argument("--nodes", type=int, help="N postgres nodes (processes, one partition each, each loading "
                                                  "the first --sizes events) against one LevelDB process (bench/nodes.py)")
    parser.add_argument("--dsn", help="with --nodes: the postgres server (default: a throwaway one)")
    args = parser.parse_args()
    if args.nodes:
        await nodes_run(args)
        return
    extra = {} if args.vector_run_rows is None else {"vector_run_rows": args.vector_run_rows}
    config = EngineConfig(embedder=args.embedder, idle_timeout=3600, **extra)
    print(f"embedder={args.embedder} queries={args.queries} cpu_count={os.cpu_count()} backend=leveldb "
          f"vector_run_rows={config.vector_run_rows} load={os.getloadavg()[0]:.1f}")
    for size in [int(s) for s in args.sizes.split(",")]:
        rng = random.Random(size)
        path = tempfile.mkdtemp(prefix="bench-recall-")
        try:
            async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
                gc.collect()
                reset_peak()
                before = memory()
                started = time.perf_counter()
                peaks = {"RssAnon": before["RssAnon"], "RssFile": before["RssFile"]}
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(sample_peaks, peaks)
                    texts = await load(engine, "org:bench/user:alice", rng, size)
                    ingest = time.perf_counter() - started
                    await settle(engine, "org:bench/user:alice")
                    nursery.cancel_scope.cancel()
                after = memory()
                latencies = await time_recalls(
                    engine, "org:bench/user:alice", rng, args.queries, "local"
                )
                # a second pass: the first runs right after the bulk load (cold caches, LevelDB
                # still compacting what was just written); both are printed
                again = await time_recalls(engine, "org:bench/user:alice", rng, args.queries, "local")
                # the memory after the recalls is read before the baseline below builds rank-bm25's
                # index of every text in this process (whatever of it the allocator keeps would count)
                recalled = memory()
                baseline = rank_bm25_baseline(texts, rng)
                p50 = statistics.median(latencies)
                print(f"{size:>7} events, one scope: recall p50 {p50:6.1f} ms  p95 {pct(latencies, 0.95):6.1f} ms  "
                      f"| rank-bm25 get_scores alone {baseline:6.1f} ms (ratio {p50 / baseline:.2f})  "
                      f"| ingest {size / ingest:,.0f} events/s captured and derived")  # fmt: skip
                print(f"{size:>7} events, one scope, second pass: recall p50 {statistics.median(again):6.1f} ms  "
                      f"p95 {pct(again, 0.95):6.1f} ms")  # fmt: skip
                on, off = await time_router(engine, "org:bench/user:alice", rng, args.queries)
                ratio = statistics.median(on) / statistics.median(off)
                print(f"{size:>7} events, one scope, router: recall p50 {statistics.median(on):6.1f} ms with the router and "
                      f"relationship expansion, {statistics.median(off):6.1f} ms without (ratio {ratio:.3f}; "
                      f"goal <= 1.10)")  # fmt: skip
                streamed = await time_stream(engine, "org:bench/user:alice", rng, args.queries)
                first, layer, done = (statistics.median(streamed[k]) for k in ("first", "layer", "done"))
                print(f"{size:>7} events, one scope, streaming: first event (plan) p50 {first:6.2f} ms, first layer "
                      f"p50 {layer:6.1f} ms, whole pack (done) p50 {done:6.1f} ms; first event / whole pack "
                      f"{first / done:.3f}")  # fmt: skip
                final = memory()
                peak, steady = after["VmHWM"] - before["VmRSS"], after["VmRSS"] - before["VmRSS"]
                print(f"{size:>7} events, one scope, memory: RSS {before['VmRSS']:.0f} MB before the load, "
                      f"growth peak {peak:+.0f} MB (sampled: anonymous {peaks['RssAnon'] - before['RssAnon']:+.0f} MB, file-backed "
                      f"{peaks['RssFile'] - before['RssFile']:+.0f} MB), steady {steady:+.0f} MB ({steady * 1024 / size:.2f} KB/event; "
                      f"anonymous {after['RssAnon'] - before['RssAnon']:+.0f} MB, file-backed "
                      f"{after['RssFile'] - before['RssFile']:+.0f} MB); after the recalls {recalled['VmRSS'] - before['VmRSS']:+.0f} MB "
                      f"(anonymous {recalled['RssAnon'] - before['RssAnon']:+.0f} MB, file-backed "
                      f"{recalled['RssFile'] - before['RssFile']:+.0f} MB), after the router and streaming recalls too "
                      f"{final['VmRSS'] - before['VmRSS']:+.0f} MB (anonymous {final['RssAnon'] - before['RssAnon']:+.0f} MB, "
                      f"file-backed {final['RssFile'] - before['RssFile']:+.0f} MB)")  # fmt: skip
            if str(size) not in args.holistic_sizes.split(","):
                continue
            path2 = tempfile.mkdtemp(prefix="bench-recall-h-")
            try:
                async with cortexdb.open_engine("leveldb", path=path2, config=config) as engine:
                    third = size // 3
                    await load(engine, "org:bench", rng, third, 0)
                    await load(engine, "org:bench/team:core", rng, third, third)
                    await load(
                        engine, "org:bench/team:core/user:alice", rng, size - 2 * third, 2 * third
                    )
                    latencies = await time_recalls(
                        engine, "org:bench/team:core/user:alice", rng, args.queries, "holistic"
                    )
                    print(f"{size:>7} events, holistic over 3 levels: recall p50 {statistics.median(latencies):6.1f} ms  "
                          f"p95 {pct(latencies, 0.95):6.1f} ms")  # fmt: skip
            finally:
                shutil.rmtree(path2, ignore_errors=True)
        finally:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main)
