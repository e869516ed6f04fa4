"""Top-10 events recalls on a given-vector scope, as bench/peers.py's synthetic mode loads it
(issue 17; docs/benchmarks.md, "Top-10 events at 100k, session 33").

    python bench/topk_ab.py --path DIR --build [--items 100000]      # load DIR once (LevelDB)
    python bench/topk_ab.py --path COPY [--queries 200] [--clock 2026-11-28T23:00:00Z]
                            [--profile OUT.prof] [--dump packs.json]

``--build``: the items, vectors and labels ``bench/peers.py --items N`` gives CortexDB (same seeds),
written with the bulk API and settled (derivation flushed, vector seals and merges finished); the
dir can then be given to ``bench/peers.py --cortexdb-data``.  Otherwise: 20 warm-up recalls of
peers' top-10 request, then ``--queries`` timed ones, CPU time of this process per recall
(p50 / p95) and the load.  ``--dump``: each pack less its ids and timings (compare two trees'
files: run each with its code first on ``sys.path``, via ``TREE``, on its own copy of DIR, with
the same ``--clock``).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import os
import random
import statistics
import sys
import time

import numpy as np

ROOT = os.environ.get("TREE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]
sys.path.insert(0, ROOT)

import trio  # noqa: E402

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402
from cortexdb.engine.retrieve.embedders import by_name  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(ROOT, "bench", "recall.py"))
recall = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recall)
DIM = 384
SCOPE = "bench:scale"  # bench/peers.py's


def data(count: int, queries: int):
    """bench/peers.py's ``scale_data``: the same items, questions and vectors for the same sizes."""
    rng = random.Random(17)
    made = recall.items(rng, count, 0)
    texts = [recall.text(rng, rng.choice(recall.QUERIES)) for _ in range(queries)]
    generator = np.random.default_rng(17)

    def units(n: int) -> np.ndarray:
        raw = generator.standard_normal((n, DIM)).astype(np.float32)
        return raw / np.linalg.norm(raw, axis=1, keepdims=True)

    return made, texts, units(count), units(queries)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clock", help="pin the engine's clock (RFC 3339): two runs rank alike")
    parser.add_argument("--profile", help="write a cProfile of the timed recalls here")
    parser.add_argument("--dump", help="write the packs (less ids and timings) here, as JSON")
    args = parser.parse_args()
    made, texts, vectors, qvectors = data(args.items, args.queries)
    index = {text: i for i, text in enumerate(texts)}

    class Shared(type(by_name("hash"))):
        """A question's vector is the one every system of bench/peers.py is given."""

        def embed(self, batch):
            if batch and all(t in index for t in batch):
                return np.stack([qvectors[index[t]] for t in batch])
            return super().embed(batch)

    extra = {}
    if args.clock:
        from cortexdb.engine.clock import ManualClock

        extra["clock"] = ManualClock(args.clock)
    config = EngineConfig(recall_candidates=100, idle_timeout=36000)  # bench/peers_workers.py's

    async def run() -> None:
        async with cortexdb.open_engine("leveldb", path=args.path, config=config, embedder=Shared(), **extra) as engine:
            if args.build:
                began = time.perf_counter()
                for start in range(0, args.items, 1000):
                    items = [{"observed_actor": m["observed_actor"], "modality": "conversation",
                              "content": {"kind": "message", "role": "user", "text": m["content"]["text"]},
                              "context": {"observed_at": m["context"]["observed_at"], "labels": [f"row:{start + i}"]},
                              "vector": vectors[start + i].tolist()} for i, m in enumerate(made[start : start + 1000])]  # fmt: skip
                    await engine.experience_bulk({"scope": SCOPE, "ordering": "strict_temporal", "items": items})
                await recall.settle(engine, SCOPE)
                print(f"loaded and settled {args.items:,} in {time.perf_counter() - began:.0f} s; load {os.getloadavg()}")
                return
            requests = [{"scope": SCOPE, "view": "granular", "traversal": "local", "query": q, "include": ["events"],
                         "budgets": {"per_layer_limits": {"events": 10}}, "diagnostics": "none",
                         "citation_mode": "none"} for q in texts]  # fmt: skip
            for request in requests[:20]:
                await engine.recall(request)
            profile = cProfile.Profile() if args.profile else None
            ms: list[float] = []
            packs = []
            for request in requests:
                began = time.process_time()
                if profile:
                    profile.enable()
                pack = await engine.recall(request)
                if profile:
                    profile.disable()
                ms.append((time.process_time() - began) * 1000)
                trail = [{k: v for k, v in p.items() if k != "elapsed_ms"} for p in pack["provenance"]["trail"]]
                packs.append({**{k: v for k, v in pack.items() if k not in ("pack_id", "request_id", "provenance")},
                              "trail": trail, "citations": pack["provenance"]["citations"]})  # fmt: skip
            print(f"{len(ms)} recalls: CPU p50 {statistics.median(ms):.2f} ms, p95 {pct(ms, 0.95):.2f}; load {os.getloadavg()}")
            if profile:
                profile.dump_stats(args.profile)
            if args.dump:
                with open(args.dump, "w") as handle:
                    json.dump(packs, handle, sort_keys=True, indent=0)

    trio.run(run)


if __name__ == "__main__":
    main()
