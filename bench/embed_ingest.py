"""LoCoMo ingest with MiniLM embedding included: CortexDB against Chroma, same embedder, same run.

    python bench/embed_ingest.py [--samples N] [--turns N] [--rounds R] [--profile]
                                 [--peer-python /tmp/peers-venv/bin/python] [--arms cortexdb,chroma]

Each arm runs in a fresh worker process per round (the model loaded before the clock starts),
and the arms alternate, the order swapped each round.  Both embed with this repository's
``MiniLMEmbedder`` (all-MiniLM-L6-v2 int8 ONNX; in Chroma's process too, with ``PYTHONPATH``
pointing here), and both get one conversation's turns one LoCoMo session at a time:

- ``cortexdb``: ``experience_bulk`` per session (bench/locomo.py's envelopes), then until idle:
  ``flush(seal=True)`` and every background vector job of the scope finished
  (bench/recall.py's ``settle``), so whatever the engine embeds later is counted;
- ``chroma``: ``PersistentClient`` (HNSW, cosine), per session the turn texts ("speaker: text",
  what CortexDB indexes) embedded with ``MiniLMEmbedder.embed`` and ``collection.add``-ed.

Per arm: turns/s until idle (median over rounds), CPU seconds of the process (every thread: the
ONNX runtime's too), and, for CortexDB with ``--profile``, the texts, tokens and seconds embedded
per layer (by record id prefix; seconds split by token share within a call), from an extra round.
Prints the ratio CortexDB / Chroma and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(_HERE, ".."))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, ROOT)


def bench_module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def conversations(args) -> list[tuple[str, list[dict]]]:
    locomo = bench_module("locomo")
    locomo.TURNS = args.turns
    with open(args.data) as handle:
        samples = json.load(handle)[args.offset : args.offset + args.samples]
    return [(locomo.scope_of(s), locomo.turns_of(s)) for s in samples]


def by_session(turns: list[dict]) -> list[list[dict]]:
    sessions: dict[str, list[dict]] = {}
    for turn in turns:
        sessions.setdefault(turn["session"], []).append(turn)
    return list(sessions.values())


# -- CortexDB worker ----------------------------------------------------------------------------
class Tally:
    """Texts, tokens and seconds embedded per layer (record id prefix)."""

    def __init__(self, embedder) -> None:
        self.inner = embedder
        self.layer_of: dict[str, str] = {}  # text -> the layer of the record it was queued for
        self.rows: dict[str, dict[str, float]] = {}

    def count(self, texts: list[str], seconds: float, default: str) -> None:
        try:
            from cortexdb.engine.retrieve.embedders import batches
        except ImportError:  # an older tree (a before/after run): batches of 16 in input order

            def batches(lengths, size):
                return [list(range(i, min(i + size, len(lengths)))) for i in range(0, len(lengths), size)]

        lengths = [sum(e.attention_mask) for e in self.inner._tokenizer.encode_batch([t if t.strip() else "." for t in texts])]
        total = sum(lengths) or 1
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches(lengths, self.inner.batch_size))
        for text, tokens in zip(texts, lengths, strict=True):
            row = self.rows.setdefault(self.layer_of.get(text, default),
                                       {"texts": 0, "tokens": 0, "padded": 0.0, "seconds": 0.0, "calls": 0})  # fmt: skip
            row["texts"] += 1
            row["tokens"] += tokens
            row["padded"] += padded * tokens / total
            row["seconds"] += seconds * tokens / total
        for layer in {self.layer_of.get(t, default) for t in texts}:
            self.rows[layer]["calls"] += 1


def counting(embedder, tally: Tally):
    """``embedder`` with its ``embed``/``embed_sums`` tallied (tokens counted outside the clock)."""

    class Counting(type(embedder)):
        def __init__(self) -> None:  # share the loaded session
            self.__dict__.update(embedder.__dict__)

        inside = False  # MiniLM's embed calls embed_sums: count it once

        def embed(self, texts):
            started = time.perf_counter()
            self.inside = True
            try:
                out = super().embed(texts)
            finally:
                self.inside = False
            tally.count(texts, time.perf_counter() - started, "other")
            return out

        def embed_sums(self, texts):
            if self.inside:
                return super().embed_sums(texts)
            started = time.perf_counter()
            out = super().embed_sums(texts)
            tally.count(texts, time.perf_counter() - started, "evt (turn sums)")
            return out

    return Counting()


def cortexdb_worker(args) -> dict:
    import trio

    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.engine.actors import indexer
    from cortexdb.engine.retrieve.embedders import MiniLMEmbedder

    locomo, recall = bench_module("locomo"), bench_module("recall")
    embedder = MiniLMEmbedder()
    embedder.embed(["warm up the session"])
    tally = None
    if args.profile:
        tally = Tally(embedder)
        embedder = counting(embedder, tally)
        original = indexer.Indexer.index_documents

        async def index_documents(self, ops, documents, **kw):
            for doc_id, text in documents.items():
                tally.layer_of[(kw.get("embed_texts") or {}).get(doc_id, text)] = doc_id.split("_", 1)[0]
            return await original(self, ops, documents, **kw)

        indexer.Indexer.index_documents = index_documents
    convs = conversations(args)
    config = EngineConfig(recall_candidates=100, idle_timeout=3600)

    async def main() -> dict:
        async with cortexdb.open_engine("memory", config=config, embedder=embedder) as engine:
            started, cpu = time.perf_counter(), time.process_time()
            for scope, turns in convs:
                for items in by_session(turns):
                    await engine.experience_bulk({
                        "scope": scope, "ordering": "strict_temporal",
                        "items": [{k: v for k, v in locomo.envelope(scope, t).items() if k != "scope"} for t in items],
                    })  # fmt: skip
                await engine.flush(scope, seal=True)
                await recall.settle(engine, scope)
            return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}

    out = trio.run(main)
    out["turns"] = sum(len(t) for _, t in convs)
    if tally is not None:
        out["layers"] = tally.rows
    return out


# -- Chroma worker ------------------------------------------------------------------------------
def chroma_worker(args) -> dict:
    import chromadb
    from chromadb.config import Settings

    from cortexdb.engine.retrieve.embedders import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm up the session"])
    convs = conversations(args)
    with tempfile.TemporaryDirectory() as workdir:
        client = chromadb.PersistentClient(path=workdir, settings=Settings(anonymized_telemetry=False))
        started, cpu = time.perf_counter(), time.process_time()
        for scope, turns in convs:
            collection = client.create_collection(scope.replace(":", "_"), metadata={"hnsw:space": "cosine"},
                                                  embedding_function=None)  # fmt: skip
            for items in by_session(turns):
                texts = [f"{t['speaker'].replace('_', ' ')}: {t['text']}" for t in items]
                collection.add(ids=[f"{scope}:{t['dia_id']}" for t in items], documents=texts,
                               embeddings=embedder.embed(texts),
                               metadatas=[{"session": t["session"], "observed_at": t["observed_at"]} for t in items])  # fmt: skip
        out = {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}
    out["turns"] = sum(len(t) for _, t in convs)
    return out


# -- driver -------------------------------------------------------------------------------------
def run_arm(args, arm: str, profile: bool = False) -> dict:
    python = args.peer_python if arm == "chroma" else sys.executable
    command = [python, os.path.abspath(__file__), "--worker", arm, "--data", args.data,
               "--samples", str(args.samples), "--offset", str(args.offset), "--turns", str(args.turns)]  # fmt: skip
    if profile:
        command.append("--profile")
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{arm} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=bench_module("locomo").DEFAULT_DATA)
    parser.add_argument("--samples", type=int, default=1, help="conversations (from --offset)")
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--turns", type=int, default=0, help="only the first N turns of each")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--arms", default="cortexdb,chroma")
    parser.add_argument("--profile", action="store_true", help="also a tallied CortexDB round: per-layer embedding")
    parser.add_argument("--peer-python", default="/tmp/peers-venv/bin/python")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps((cortexdb_worker if args.worker == "cortexdb" else chroma_worker)(args)))
        return
    arms = args.arms.split(",")
    print(f"LoCoMo ingest with MiniLM, {args.samples} conversation(s) from {args.offset}, "
          f"{args.rounds} round(s), cpu_count={os.cpu_count()}, load average {load_average()}")  # fmt: skip
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    for round_ in range(args.rounds):
        for arm in arms if round_ % 2 == 0 else arms[::-1]:
            result = run_arm(args, arm)
            results[arm].append(result)
            print(f"  round {round_ + 1} {arm:9s} {result['turns'] / result['seconds']:7.1f} turns/s  "
                  f"{result['seconds']:6.1f} s  CPU {result['cpu']:6.1f} s  (load {load_average()})", flush=True)  # fmt: skip
    rates = {arm: statistics.median(r["turns"] / r["seconds"] for r in rows) for arm, rows in results.items()}
    cpus = {arm: statistics.median(r["cpu"] / r["turns"] * 1000 for r in rows) for arm, rows in results.items()}
    for arm in arms:
        print(f"{arm:9s} median {rates[arm]:7.1f} turns/s until idle, {cpus[arm]:6.1f} ms CPU per turn")
    if "cortexdb" in rates and "chroma" in rates:
        print(f"CortexDB / Chroma turns/s: {rates['cortexdb'] / rates['chroma']:.2f}  "
              f"(CPU per turn: {cpus['cortexdb'] / cpus['chroma']:.2f}x)")  # fmt: skip
    if args.profile:
        result = run_arm(args, "cortexdb", profile=True)
        print(f"profiled CortexDB round: {result['seconds']:.1f} s, CPU {result['cpu']:.1f} s "
              f"(tokenizing for the tally included)")  # fmt: skip
        print(f"  {'layer':16s} {'calls':>6s} {'texts':>7s} {'tokens':>8s} {'padded':>8s} {'embed s':>8s}")
        for layer, row in sorted(result["layers"].items(), key=lambda kv: -kv[1]["tokens"]):
            print(f"  {layer:16s} {row['calls']:6d} {row['texts']:7d} {row['tokens']:8d} {row['padded']:8.0f} "
                  f"{row['seconds']:8.2f}")  # fmt: skip
        print("  (padded: token slots the model computes, every text padded to its batch's longest;"
              " a call's split by token share)")
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
