"""Recall's CPU while an open episode grows, this checkout against another one, in one run.

    python bench/open_episode_ab.py --baseline /tmp/main-checkout [--writes 1500] [--recall-every 10]
                                    [--rounds 1]
    python bench/open_episode_ab.py --baseline /tmp/main-checkout --fill-rows 500 [--fills 300]

The soak's regime in one scope (issue 10, part 8): single writes, each one consolidated before the
next, observed half a second apart, so every commit grows the scope's open episode until it holds
``episode_max_events`` (500) and the next event starts another; a recall of episodes and events
(the last write's text) every ``--recall-every`` writes.  Each arm is a worker process (this file,
``--worker``) importing ``cortexdb`` from its own checkout, LevelDB in a temporary directory, the
hash embedder, a manual clock and seeded ids: both arms write the same events and ask the same
questions.  The arms run at the same time (each round starts both), so the machine's load falls
on both alike.

Printed: per bucket of the open episode's size (members when the recall ran), the CPU time of
the worker's event loop thread per recall (``thread_time``: the recall, the actor's candidates
and the coordinator; derivation is idle then, and LevelDB's reads run on that thread, its
compactions on others), for each arm, and this checkout's over the baseline's; likewise the
time inside the candidates' loading of every non-event record (``candidates._load``: episodes
among them) and inside the filling of open episodes' headers with their member rows
(``storage.episodes._Filled.fill``); the load average before and after.  The answers are compared too (each
recall's pack less its ids and timings): a difference is printed.

``--fill-rows N`` times one thing alone instead: reading an open episode of N members whole, as a
recall does for each open episode among its candidates (``_Filled.fill`` of its header, LevelDB,
``--fills`` times after 20 untimed), in each arm by a scope actor's table (rows kept, where the
checkout keeps them); the arms run one after the other.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
SCOPE = "org:bench/user:alice"
BUCKET = 100


def worker(root: str, writes: int, every: int, out: str) -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.insert(0, root)
    import trio

    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.engine.actors import candidates
    from cortexdb.engine.clock import ManualClock
    from cortexdb.engine.retrieve.embedders import by_name
    from cortexdb.engine.storage import episodes

    spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(_HERE, "recall.py"))
    recall = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recall)
    spent = {"load": 0.0, "fill": 0.0}

    def timed(name, call):
        async def timing(*args, **kw):
            start = time.thread_time()
            try:
                return await call(*args, **kw)
            finally:
                spent[name] += time.thread_time() - start

        return timing

    candidates._load = timed("load", candidates._load)
    episodes._Filled.fill = timed("fill", episodes._Filled.fill)

    async def main() -> dict:
        start = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
        clock = ManualClock(start)
        config = EngineConfig(idle_timeout=36000, episode_idle_check=36000.0, default_caller="user:alice")
        rows: list[dict] = []
        with tempfile.TemporaryDirectory(prefix="open-episode-ab-") as path:
            async with cortexdb.open_engine("leveldb", path=path, config=config, clock=clock, id_seed=11,
                                            embedder=by_name("hash")) as engine:  # fmt: skip
                items = recall.items(random.Random(7), writes, 0)
                for i, item in enumerate(items):
                    item = dict(item)
                    item["context"] = {**item.get("context", {}), "observed_at": clock.now().isoformat()}
                    await engine.experience({"scope": SCOPE, **item}, wait="consolidated")
                    clock.advance(0.5)
                    if i % every == every - 1:
                        query = {"scope": SCOPE, "query": item["content"]["text"][:60], "include": ["episodes", "events"]}
                        spent.update(load=0.0, fill=0.0)
                        before = time.thread_time()
                        pack = await engine.recall(query)
                        cpu = time.thread_time() - before
                        rows.append({"members": i % 500 + 1, "cpu": cpu, **spent,
                                     "answer": {"layers": pack["layers"], "context_block": pack["context_block"]}})  # fmt: skip
        return {"rows": rows}

    with open(out, "w") as f:
        json.dump(trio.run(main), f, default=str)


def fill_worker(root: str, rows: int, fills: int) -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.insert(0, root)
    import trio

    from cortexdb.backends.leveldb.store import LevelDBStore
    from cortexdb.engine import jsoncodec
    from cortexdb.engine.model import CausalLink, Episode
    from cortexdb.engine.storage.episodes import EpisodeTable

    async def main() -> None:
        at = dt.datetime(2026, 5, 13, tzinfo=dt.UTC)
        ids = [f"evt_019e2200-a868-73b9-b97d-{i:012x}" for i in range(rows)]
        episode = Episode(id="ep_1", scope=SCOPE, name="n", summary="s", events=list(ids), supports=list(ids),
                          started_at=at, ended_at=at, valid_from=at, recorded_from=at,
                          causal_chain=[CausalLink(event=i, role=("context", "decision")[n % 2]) for n, i in enumerate(ids)])  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="open-episode-fill-") as path:
            store = await LevelDBStore.open(path)
            table = EpisodeTable(store, SCOPE)
            if hasattr(table, "keep_rows"):
                table.keep_rows(1000)  # as a scope actor's (ScopeActor)
            await store.write(await table.open_ops(episode))
            raw = await store.get(table.key("ep_1"))
            for _ in range(20):
                await table.json.fill("ep_1", jsoncodec.decode(raw))
            start = time.thread_time()
            for _ in range(fills):
                whole = await table.json.fill("ep_1", jsoncodec.decode(raw))
            spent = (time.thread_time() - start) / fills
            assert whole["events"] == ids
            await store.close()
        print(json.dumps({"us": spent * 1e6}))

    trio.run(main)


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k != "time_ms" and not k.endswith("_ms")}
    return [untimed(v) for v in x] if isinstance(x, list) else x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="the other checkout")
    parser.add_argument("--writes", type=int, default=1500)
    parser.add_argument("--recall-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--fill-rows", type=int, default=0)
    parser.add_argument("--fills", type=int, default=300)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker and args.fill_rows:
        fill_worker(args.worker, args.fill_rows, args.fills)
        return
    if args.worker:
        worker(args.worker, args.writes, args.recall_every, args.out)
        return
    if not args.baseline:
        parser.error("--baseline is required")
    arms = {"branch": os.path.join(_HERE, ".."), "baseline": args.baseline}
    print(f"load average before: {os.getloadavg()}", flush=True)
    if args.fill_rows:
        spent = {}
        for arm, root in (*arms.items(), *arms.items()):  # each twice, alternating: the better of two
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", os.path.abspath(root),
                   "--fill-rows", str(args.fill_rows), "--fills", str(args.fills)]  # fmt: skip
            found = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                              env={**os.environ, "PYTHONPATH": os.path.abspath(root)}).stdout)  # fmt: skip
            spent[arm] = min(spent.get(arm, found["us"]), found["us"])
        print(f"load average after: {os.getloadavg()}")
        print(f"an open episode of {args.fill_rows} members read whole: baseline {spent['baseline']:.0f} µs, "
              f"branch {spent['branch']:.0f} µs, ratio {spent['branch'] / spent['baseline']:.2f}")  # fmt: skip
        return
    results: dict[str, list] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            procs = {}
            for arm, root in arms.items():
                out = os.path.join(tmp, f"{arm}-{n}.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", os.path.abspath(root), "--out", out,
                       "--writes", str(args.writes), "--recall-every", str(args.recall_every)]  # fmt: skip
                procs[arm] = (subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": os.path.abspath(root)}), out)
            for arm, (proc, out) in procs.items():
                if proc.wait() != 0:
                    sys.exit(f"{arm} worker failed")
                with open(out) as f:
                    results[arm] += json.load(f)["rows"]
    print(f"load average after: {os.getloadavg()}")
    branch, base = results["branch"], results["baseline"]
    differ = [i for i, (a, b) in enumerate(zip(branch, base, strict=True)) if untimed(a["answer"]) != untimed(b["answer"])]
    print(f"{len(branch)} recalls per arm; answers {'identical' if not differ else f'DIFFER at recalls {differ[:10]}'}")
    print("| open episode's members | recalls | CPU ms a recall: baseline | branch | ratio "
          "| loading (_load) ms: baseline | branch | ratio | open episodes filled ms: baseline | branch | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    buckets = sorted({(r["members"] - 1) // BUCKET for r in branch})
    for bucket in [*buckets, None]:
        chosen = [i for i, r in enumerate(branch) if bucket is None or (r["members"] - 1) // BUCKET == bucket]
        label = "all" if bucket is None else f"{bucket * BUCKET + 1}-{(bucket + 1) * BUCKET}"

        def mean(rows, key, chosen=chosen):
            return 1000 * statistics.mean(rows[i][key] for i in chosen)

        cpu_b, cpu_a = mean(base, "cpu"), mean(branch, "cpu")
        load_b, load_a = mean(base, "load"), mean(branch, "load")
        fill_b, fill_a = mean(base, "fill"), mean(branch, "fill")
        print(f"| {label} | {len(chosen)} | {cpu_b:.2f} | {cpu_a:.2f} | {cpu_a / cpu_b:.2f} | "
              f"{load_b:.2f} | {load_a:.2f} | {load_a / load_b:.2f} | {fill_b:.2f} | {fill_a:.2f} | {fill_a / fill_b:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
