"""The systems bench/peers.py compares, each run in a worker process of its own.

    python bench/peers_workers.py SYSTEM MANIFEST   (started by bench/peers.py; JSON lines on stdin/stdout)

Every system is handed the same texts and the same vectors (MANIFEST names the files) and does
the same four things: ``add`` a slice of rows to a scope, wait until it is ``idle`` (its deferred
work done), ``query`` a scope with a question's vector (and text) for the top k row ids, and
report its process's CPU time and memory.  Vectors are read from the raw float32 file with a
read (not a memory map), so the file's pages never count in a worker's RSS.

- ``cortexdb``: the embedded engine on LevelDB, ``embedder="minilm"``; events are written with
  the given-vectors API (docs/embedding.md) in bulk calls; derived records (facts, episodes) are
  embedded by MiniLM as they are for a user; ``idle`` = derivation flushed and the background
  vector seals and merges finished.  A question's vector is the shared one: the engine's embedder
  looks it up by the question's text (the numbers MiniLM gives; no query is embedded twice), or
  by the text it searches instead (the question less its scope's voices' names: peers.py,
  ``with_content_vectors``).
- ``chroma``: ``chromadb.PersistentClient`` (HNSW, cosine), one collection per scope, ``add``
  with the given embeddings; ``idle`` is immediate (no background work is exposed).
- ``numpy``: exact dense search, a float32 matrix per scope (``M @ q``).
- ``mem0`` (when ``mem0ai`` is installed): Mem0 OSS, ``add(infer=False)``, local Qdrant.
- ``hybrid``: ``numpy`` plus bm25s over the texts, fused by reciprocal rank (k = 60); bm25s
  indexes at ``idle``.  About fifty lines: the baseline a user could write.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))
DIM = 384


def status() -> dict[str, float]:
    """RSS now and its peak since the last reset (VmHWM), MB; CPU seconds of this process."""
    out = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"rss": out["VmRSS"], "hwm": out["VmHWM"], "cpu": usage.ru_utime + usage.ru_stime}


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # VmHWM := VmRSS


class Rows:
    """The manifest's texts and vectors (read a slice at a time)."""

    def __init__(self, manifest: dict) -> None:
        self.manifest = manifest
        with open(manifest["texts"]) as handle:
            self.texts = json.load(handle)

    def vectors(self, path: str, start: int, end: int) -> np.ndarray:
        count = (end - start) * DIM
        return np.fromfile(path, dtype=np.float32, count=count, offset=start * DIM * 4).reshape(end - start, DIM)


# -- the systems ---------------------------------------------------------------------------------
class NumpyDense:
    name = "numpy"

    def __init__(self, rows: Rows, workdir: str) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}
        self.ids: dict[str, list[str]] = {}
        self.matrix: dict[str, np.ndarray] = {}

    def add(self, scope: str, ids: list[str], texts: list[str], vectors: np.ndarray, meta: list[dict]) -> None:
        self.parts.setdefault(scope, []).append(np.array(vectors, dtype=np.float32))
        self.ids.setdefault(scope, []).extend(ids)

    def idle(self) -> None:
        for scope, parts in self.parts.items():
            self.matrix[scope] = np.concatenate([self.matrix[scope], *parts]) if scope in self.matrix else np.concatenate(parts)
        self.parts = {}

    def dense(self, scope: str, vector: np.ndarray, k: int) -> list[int]:
        scores = self.matrix[scope] @ vector
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        return top[np.argsort(-scores[top])].tolist()

    def query(self, scope: str, vector: np.ndarray, text: str, k: int) -> list[str]:
        return [self.ids[scope][i] for i in self.dense(scope, vector, k)]


class Hybrid(NumpyDense):
    """Dense top 100 and bm25s top 100, fused by reciprocal rank."""

    name = "hybrid"
    POOL, RRF_K = 100, 60

    def __init__(self, rows: Rows, workdir: str) -> None:
        import bm25s

        super().__init__(rows, workdir)
        self.bm25s = bm25s
        self.texts: dict[str, list[str]] = {}
        self.retrievers: dict[str, object] = {}

    def add(self, scope, ids, texts, vectors, meta) -> None:
        super().add(scope, ids, texts, vectors, meta)
        self.texts.setdefault(scope, []).extend(texts)

    def idle(self) -> None:
        super().idle()
        for scope, texts in self.texts.items():
            retriever = self.bm25s.BM25()
            retriever.index(self.bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
            self.retrievers[scope] = retriever

    def query(self, scope, vector, text, k) -> list[str]:
        fused: dict[int, float] = {}
        for rank, row in enumerate(self.dense(scope, vector, self.POOL)):
            fused[row] = fused.get(row, 0.0) + 1.0 / (self.RRF_K + rank + 1)
        retriever = self.retrievers[scope]
        tokens = self.bm25s.tokenize([text], stopwords="en", show_progress=False)
        if tokens.ids and len(tokens.ids[0]):
            pool = min(self.POOL, len(self.texts[scope]))
            rows, scores = retriever.retrieve(tokens, k=pool, show_progress=False)
            for rank, (row, score) in enumerate(zip(rows[0].tolist(), scores[0].tolist(), strict=True)):
                if score > 0:
                    fused[row] = fused.get(row, 0.0) + 1.0 / (self.RRF_K + rank + 1)
        best = sorted(fused, key=lambda row: -fused[row])[:k]
        return [self.ids[scope][row] for row in best]


class Chroma:
    name = "chroma"

    def __init__(self, rows: Rows, workdir: str) -> None:
        import chromadb
        from chromadb.config import Settings

        self.client = chromadb.PersistentClient(path=os.path.join(workdir, "chroma"),
                                                settings=Settings(anonymized_telemetry=False))  # fmt: skip
        self.batch = self.client.get_max_batch_size()
        self.collections: dict[str, object] = {}

    def collection(self, scope: str):
        if scope not in self.collections:
            name = "c" + "".join(ch if ch.isalnum() else "-" for ch in scope)[:60]
            self.collections[scope] = self.client.get_or_create_collection(
                name, metadata={"hnsw:space": "cosine"}, embedding_function=None)  # fmt: skip
        return self.collections[scope]

    def add(self, scope, ids, texts, vectors, meta) -> None:
        collection = self.collection(scope)
        for start in range(0, len(ids), self.batch):
            end = start + self.batch
            collection.add(ids=ids[start:end], embeddings=vectors[start:end], documents=texts[start:end])

    def idle(self) -> None:
        pass

    def query(self, scope, vector, text, k) -> list[str]:
        found = self.collection(scope).query(query_embeddings=[vector], n_results=k, include=[])
        return found["ids"][0]


class Mem0:
    """Mem0 OSS with its local Qdrant (on disk), ``add(infer=False)`` one turn a call (it has no
    bulk add), ``search`` with a limit.  Its embedder is asked for each text's vector, which is
    the given one of the text at hand: Mem0 never embeds anything itself here."""

    name = "mem0"

    def __init__(self, rows: Rows, workdir: str) -> None:
        os.environ.setdefault("OPENAI_API_KEY", "unused-no-call-is-made")  # its default clients want one
        from mem0 import Memory

        self.memory = Memory.from_config({
            "vector_store": {"provider": "qdrant", "config": {"collection_name": "peers", "embedding_model_dims": DIM,
                                                              "path": os.path.join(workdir, "qdrant"), "on_disk": True}},
            "history_db_path": os.path.join(workdir, "history.db"),
        })  # fmt: skip
        self.rows = rows
        self.current: np.ndarray | None = None  # the vector of the one text being added or searched
        self.memory.embedding_model.embed = lambda text, memory_action=None: self.current.tolist()

    def add(self, scope, ids, texts, vectors, meta) -> None:
        user = scope.replace(":", "_")
        for row_id, text, vector in zip(ids, texts, vectors, strict=True):
            self.current = vector
            self.memory.add([{"role": "user", "content": text}], user_id=user, metadata={"row": row_id}, infer=False)

    def idle(self) -> None:
        pass

    def query(self, scope, vector, text, k) -> list[str]:
        self.current = vector  # (Mem0 strips the text first: a look-up by text would miss)
        found = self.memory.search(text, filters={"user_id": scope.replace(":", "_")}, limit=k)
        items = found["results"] if isinstance(found, dict) else found
        return [str(item.get("metadata", {}).get("row")) for item in items]


class CortexDB:
    """The embedded engine, driven from a trio run that lives as long as the worker."""

    name = "cortexdb"

    def __init__(self, rows: Rows, workdir: str) -> None:
        import trio

        self.trio = trio
        self.rows = rows
        self.path = os.path.join(workdir, "cortexdb")
        # a data dir loaded before with these items (bench/peers.py --cortexdb-data: a copy of it
        # for each CortexDB worker): opened as it is, the adds skipped (its ingest is not measured)
        self.loaded = os.environ.get("PEERS_CORTEXDB_DATA")
        if self.loaded:
            self.path = self.loaded
        # each question's text, and the text CortexDB searches instead of it (peers.with_content_vectors),
        # to its row of the query vectors
        self.queries = {q["text"]: q["row"] for q in rows.manifest["queries"]}
        self.queries.update({q["content"]: q["content_row"] for q in rows.manifest["queries"] if "content" in q})
        self.to_loop = self.from_loop = None

    def start(self, handler) -> None:
        """Run ``handler(system)`` (the request loop) inside trio with the engine open."""
        import cortexdb
        from cortexdb import EngineConfig
        from cortexdb.engine.retrieve.embedders import by_name

        rows = self.rows
        base = type(by_name(rows.manifest["embedder"]))

        class SharedVectors(base):
            """MiniLM, but a question's vector is the one every system is given (looked up)."""

            def embed(self, texts):
                known = [self_index[t] for t in texts if t in self_index]
                if len(known) == len(texts) and texts:
                    return np.stack([rows.vectors(rows.manifest["qvectors"], row, row + 1)[0] for row in known])
                return super().embed(texts)

        self_index = self.queries
        config = EngineConfig(recall_candidates=100, idle_timeout=36000)

        async def main():
            async with cortexdb.open_engine("leveldb", path=self.path, config=config, embedder=SharedVectors()) as engine:
                self.engine = engine
                await self.trio.to_thread.run_sync(handler, self)

        self.trio.run(main)

    def call(self, make):
        """Run a coroutine on the engine's loop from the handler's thread."""
        return self.trio.from_thread.run(make)

    def add(self, scope, ids, texts, vectors, meta) -> None:
        if self.loaded:
            return
        items = [{
            "observed_actor": {"id": f"user:{m['speaker']}", "session": m["session"]},
            "modality": "conversation",
            "content": {"kind": "message", "role": "user", "text": m["raw"]},  # it adds the speaker itself
            "context": {"observed_at": m["observed_at"], "labels": [f"row:{row_id}"]},
            "vector": vector.tolist(),
        } for row_id, text, vector, m in zip(ids, texts, vectors, meta, strict=True)]  # fmt: skip
        for start in range(0, len(items), 1000):
            request = {"scope": scope, "ordering": "strict_temporal", "items": items[start : start + 1000]}
            self.call(lambda request=request: self.engine.experience_bulk(request))

    def idle(self) -> None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(_HERE, "recall.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        settle = module.settle  # derivation flushed, and vector seals and merges finished
        for scope in sorted({s["scope"] for s in self.rows.manifest["scopes"]}):
            self.call(lambda: settle(self.engine, scope))  # noqa: B023 (called at once)

    def query(self, scope, vector, text, k) -> list[str]:
        request = {"scope": scope, "view": "granular", "traversal": "local", "query": text, "include": ["events"],
                   "budgets": {"per_layer_limits": {"events": k}}, "diagnostics": "none", "citation_mode": "none"}  # fmt: skip
        pack = self.call(lambda: self.engine.recall(request))
        items = sorted((i for layer in pack["layers"].values() for i in layer), key=lambda i: -i["score"])
        out = []
        for item in items:
            for label in item.get("context", {}).get("labels", []):
                if label.startswith("row:") and label[4:] not in out:
                    out.append(label[4:])
        return out[:k]


SYSTEMS = {"cortexdb": CortexDB, "chroma": Chroma, "numpy": NumpyDense, "hybrid": Hybrid, "mem0": Mem0}
NEEDS = {"chroma": "chromadb", "hybrid": "bm25s", "mem0": "mem0"}


def serve(system, rows: Rows) -> None:
    """The request loop: one JSON line in, one out."""
    manifest = rows.manifest
    gc.collect()
    reset_peak()
    before = status()
    reply({"ready": True, **before})
    ingest_cpu = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "add":
            scope, start, end = request["scope"], request["start"], request["end"]
            vectors = rows.vectors(manifest["vectors"], start, end)
            meta = manifest["meta"][start:end]
            ids = [str(i) for i in range(start, end)]
            began = time.perf_counter()
            system.add(scope, ids, rows.texts[start:end], vectors, meta)
            reply({"seconds": time.perf_counter() - began})
        elif op == "idle":
            began = time.perf_counter()
            system.idle()
            seconds = time.perf_counter() - began
            gc.collect()
            now = status()
            ingest_cpu = now["cpu"] - before["cpu"]
            reply({"seconds": seconds, "peak_growth": now["hwm"] - before["rss"], "steady_growth": now["rss"] - before["rss"],
                   "peak": now["hwm"], "cpu": ingest_cpu})  # fmt: skip
            reset_peak()
            before_queries = status()
        elif op == "query":
            query = manifest["queries"][request["index"]]
            vector = rows.vectors(manifest["qvectors"], query["row"], query["row"] + 1)[0]
            began = time.perf_counter()
            ids = system.query(query["scope"], vector, query["text"], request["k"])
            reply({"ms": (time.perf_counter() - began) * 1000, "ids": ids})
        elif op == "stats":
            now = status()
            reply({"query_cpu": now["cpu"] - before_queries["cpu"], "query_peak_growth": now["hwm"] - before["rss"],
                   "rss": now["rss"]})  # fmt: skip
        elif op == "quit":
            reply({"bye": True})
            return


def reply(data: dict) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def main() -> None:
    name, manifest_path = sys.argv[1], sys.argv[2]
    # no telemetry from the peers (read when their packages are imported): nothing leaves the machine
    os.environ.update(MEM0_TELEMETRY="False", ANONYMIZED_TELEMETRY="False")
    try:
        if name in NEEDS:
            __import__(NEEDS[name])
        with open(manifest_path) as handle:
            rows = Rows(json.load(handle))
    except ImportError as exc:
        reply({"ready": False, "reason": f"{exc.name or exc} is not installed in {sys.executable}"})
        return
    workdir = tempfile.mkdtemp(prefix=f"peers-{name}-")
    try:
        system = SYSTEMS[name](rows, workdir)
        if isinstance(system, CortexDB):
            system.start(lambda s: serve(s, rows))
        else:
            serve(system, rows)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
