"""Whether two checkouts answer the same after the same single writes: a check of a change meant
to leave what readers see untouched (e.g. how a record is stored).

    python bench/same_answers.py --baseline /tmp/main-checkout [--turns 3000]

Each arm is a worker process (this file, ``--worker``) importing ``cortexdb`` from its own
checkout.  It writes bench/recall.py's synthetic turns into one scope one at a time
(``wait="consolidated"``; memory backend, seeded ids, a manual clock half a second on after
each write, so every commit that grows an episode closes a version of it), forgets two events of the
open episode (``cascade: redact_events``) at turn 1,200 and 40 turns before the end, and records:
the episodes listed and a recall of episodes and events every 700 turns (from turn 350), each
forget's answer and the episodes with their versions after it, the final episodes list, the list
with every version (first 1,000), 15 default recalls spread over the corpus, the lifecycle
feed, the concepts as of every 50th turn (listed, and each read by id), and a recall of concepts
and facts pinned in the past every 300 turns.  The two dumps are compared with timings (``time_ms``, ``*_ms``) left out; the first
difference is printed, or ``identical`` and how many values were compared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
SCOPE = "org:bench/user:alice"


def worker(root: str, turns: int, out: str) -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.insert(0, root)
    import trio

    import cortexdb
    from cortexdb import EngineConfig
    from cortexdb.engine.clock import ManualClock
    from cortexdb.engine.retrieve.embedders import by_name

    spec = importlib.util.spec_from_file_location("bench_recall", os.path.join(_HERE, "recall.py"))
    recall = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recall)

    async def main() -> dict:
        clock = ManualClock(dt.datetime(2026, 5, 1, tzinfo=dt.UTC))
        config = EngineConfig(idle_timeout=36000, episode_idle_check=36000.0, default_caller="user:alice")
        found: dict = {}
        async with cortexdb.open_engine("memory", config=config, clock=clock, id_seed=11,
                                        embedder=by_name("hash")) as engine:  # fmt: skip
            items, ids, moments = recall.items(random.Random(7), turns, 0), [], []
            for i, item in enumerate(items):
                ids.append((await engine.experience({"scope": SCOPE, **item}, wait="consolidated")).event_id)
                clock.advance(0.5)  # each commit its own moment: a grown episode closes a version
                if i % 50 == 25:
                    moments.append(clock.now().isoformat())
                if i % 300 == 150:  # a recall pinned in the past: concepts as they were then
                    found[f"pinned_{i}"] = await engine.recall({"scope": SCOPE, "query": item["content"]["text"][:60],
                                                                "include": ["understanding", "facts"],
                                                                "temporal": {"as_of": moments[len(moments) // 2]}})  # fmt: skip
                if i in (1200, turns - 40):  # two events of the open episode forgotten
                    found[f"forget_{i}"] = await engine.forget({"scope": SCOPE, "layers": ["events"], "cascade": "redact_events",
                                                                "selector": {"memory_ids": ids[-6:-4]}})  # fmt: skip
                    found[f"after_forget_{i}"] = await engine.episodes(SCOPE, limit=1000, include_superseded=True)
                if i % 700 == 350:
                    found[f"open_{i}"] = await engine.episodes(SCOPE, limit=1000)
                    query = {"scope": SCOPE, "query": item["content"]["text"][:60], "include": ["episodes", "events"]}
                    found[f"recall_{i}"] = await engine.recall(query)
            await engine.flush(SCOPE)
            found["concepts"] = await concepts_as_of(engine, moments)
            found["episodes"] = await engine.episodes(SCOPE, limit=1000)
            found["episodes_all"] = await engine.episodes(SCOPE, limit=1000, include_superseded=True)
            for i in range(0, turns, max(1, turns // 15)):
                found[f"q{i}"] = await engine.recall({"scope": SCOPE, "query": items[i]["content"]["text"][:80]})
            found["lifecycle"] = await engine.lifecycle(limit=100000)
        return found

    with open(out, "w") as f:
        json.dump(trio.run(main), f, sort_keys=True, default=str)


async def concepts_as_of(engine, moments: list[str]) -> dict:
    """Every concept (deprecated ones too) listed as of each moment, and read by id as of it."""
    out = {"now": await engine.understanding(SCOPE, limit=1000, include_deprecated=True)}
    for moment in moments:
        out[moment] = await engine.understanding(SCOPE, as_of=moment, limit=1000, include_deprecated=True)
        for concept in out["now"]["items"]:
            try:
                out[f"{moment} {concept['id']}"] = await engine.get_concept(SCOPE, concept["id"], as_of=moment)
            except Exception as e:  # not recorded yet then: the answer is the error's
                out[f"{moment} {concept['id']}"] = type(e).__name__
    return out


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k != "time_ms" and not k.endswith("_ms")}
    return [untimed(v) for v in x] if isinstance(x, list) else x


def first_difference(a, b, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {str(a)[:200]} != {str(b)[:200]}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(set(a) ^ set(b))}"
        return next((d for k in a if (d := first_difference(a[k], b[k], f"{path}/{k}"))), None)
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        return next((d for i, (u, v) in enumerate(zip(a, b, strict=True)) if (d := first_difference(u, v, f"{path}[{i}]"))), None)
    return None if a == b else f"{path}: {str(a)[:200]} != {str(b)[:200]}"


def leaves(x) -> int:
    if isinstance(x, dict | list):
        return sum(leaves(v) for v in (x.values() if isinstance(x, dict) else x))
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the other checkout")
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.turns, args.out)
        return
    dumps = {}
    with tempfile.TemporaryDirectory() as tmp:
        arms = {"this": os.path.dirname(_HERE), "baseline": os.path.abspath(args.baseline)}
        running = {}
        for name, root in arms.items():  # both at once: the answers do not depend on timing
            out = os.path.join(tmp, f"{name}.json")
            running[name] = (subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", root, "--out", out,
                                               "--turns", str(args.turns), "--baseline", root], cwd=root), out)  # fmt: skip
        for name, (process, out) in running.items():
            if process.wait() != 0:
                sys.exit(f"{name}'s worker failed")
            with open(out) as f:
                dumps[name] = untimed(json.load(f))
    difference = first_difference(dumps["baseline"], dumps["this"])
    episodes = len(dumps["this"]["episodes"]["items"])
    print(f"{args.turns} turns, {episodes} episodes, {leaves(dumps['this']):,} values: "
          + ("identical" if difference is None else f"DIFFERENT at {difference}"))  # fmt: skip
    sys.exit(0 if difference is None else 1)


if __name__ == "__main__":
    main()
