"""Several CortexDB nodes on one PostgreSQL store, against one LevelDB process in the same run.

Used by ``bench/capture.py --backend postgres --nodes N`` and ``bench/recall.py --backend
postgres --nodes N``; not a script of its own (it runs itself as the worker processes).

Each node is a process of its own with an embedded engine (``EngineConfig.node_id``) and its own
partition (top scope ``org:nodeI``): the workload of one node is the same in both arms, so the
LevelDB arm (one process, one data dir: LevelDB allows no second) runs it once and the postgres
arm N times at once.  Every worker first loads or warms up, says ``ready``, and starts on one
``go`` from the parent; throughput is all the work done over the time from the first start to the
last end.  The machine is a shared 2-core VM: three nodes on it compete for the same two cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # bench/http.py
sys.path.insert(0, os.path.join(_HERE, ".."))


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(kind: str, params: dict, nodes: int, dsn: str) -> None:
    """Print the LevelDB arm (one process) and the postgres arm (``nodes`` processes)."""
    unit = "captures/s" if kind == "capture" else "recalls/s"
    data = tempfile.mkdtemp(prefix="bench-nodes-")
    try:
        base = _arm(kind, params, [{"backend": "leveldb", "path": data, "node": ""}])
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print(f"leveldb   1 process      : {base['rate']:>9,.1f} {unit}  p50 {base['p50']:.2f} ms  "
          f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
    arm = _arm(kind, params, [{"backend": "postgres", "path": dsn, "node": f"n{i}", "index": i} for i in range(nodes)])
    print(f"postgres  {nodes} node{'s' if nodes > 1 else ' '} (procs) : {arm['rate']:>9,.1f} {unit}  "
          f"p50 {arm['p50']:.2f} ms  ratio to leveldb {arm['rate'] / base['rate']:.3f}  (load {os.getloadavg()[0]:.1f})")  # fmt: skip


def _arm(kind: str, params: dict, workers: list[dict]) -> dict:
    procs = [subprocess.Popen([sys.executable, __file__, json.dumps({**params, **w, "kind": kind})],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for w in workers]  # fmt: skip
    try:
        for proc in procs:
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a bench node did not start: {line!r}")
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [json.loads(proc.stdout.readline()) for proc in procs]
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=600)
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    p50s = sorted(r["p50"] for r in results)
    return {"rate": sum(r["done"] for r in results) / elapsed, "p50": p50s[len(p50s) // 2]}


async def _worker(spec: dict) -> None:
    import trio

    import cortexdb
    from cortexdb import EngineConfig

    config = EngineConfig(idle_timeout=3600, node_id=spec["node"], derivation_workers="thread")
    scope = f"org:node{spec.get('index', 0)}/user:bench"
    async with cortexdb.open_engine(spec["backend"], path=spec["path"], config=config, id_seed=None) as engine:
        latencies: list[float] = []
        if spec["kind"] == "capture":
            capture = _sibling("capture")

            def body(i: int) -> dict:
                return {**capture.body(i), "scope": scope, "idempotency_key": f"{scope}-{i}"}

            for i in range(200):  # warm up the actor and the code paths
                await engine.experience(body(10_000_000 + i))
            work = lambda i: engine.experience(body(i), wait=spec.get("wait"))  # noqa: E731
        else:
            import random

            corpus = _sibling("recall")
            rng = random.Random(spec.get("index", 0))
            await corpus.load(engine, scope, rng, spec["events"])
            queries = [corpus.text(rng, rng.choice(corpus.QUERIES)) for _ in range(spec["count"])]
            work = lambda i: engine.recall({"scope": scope, "query": queries[i], "diagnostics": "none"})  # noqa: E731
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        next_index = 0

        async def one_writer() -> None:
            nonlocal next_index
            while next_index < spec["count"]:
                i = next_index
                next_index += 1
                started = time.perf_counter()
                await work(i)
                latencies.append((time.perf_counter() - started) * 1000)

        start = time.time()
        async with trio.open_nursery() as nursery:
            for _ in range(spec.get("writers", 1)):
                nursery.start_soon(one_writer)
        end = time.time()
    latencies.sort()
    print(json.dumps({"start": start, "end": end, "done": spec["count"], "p50": latencies[len(latencies) // 2]}),
          flush=True)  # fmt: skip


if __name__ == "__main__":
    import trio

    trio.run(_worker, json.loads(sys.argv[1]))
