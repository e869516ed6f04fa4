"""What signals cost: recording, snapshots, and the ``signals`` part recall adds, embedded, against
a baseline measured in the same run.

    python bench/signals.py [--backend leveldb|memory] [--events 2000] [--signals 0,20,200] [--queries 200]

One scope holds ``--events`` conversational events (fully derived).  Then, per count S of
signals in the scope: recall p50 / p95 over ``--queries`` recalls with the signals part on
(default ``recall_signals_max`` 20), and the ratio to the baseline — the same recalls with the part
off (``recall_signals_max=0``: no signal is read), measured on the same data in the same run.
Also: ``signals.record`` p50 and ``signals.snapshot`` p50 (one subject) at the largest S.
The machine is a shared 2-core VM: compare the ratios, not single figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

SCOPE = "org:bench/user:alice"
TEXTS = ["I live in Lisbon and I work at Acme Corp.", "My favorite color is green.", "I like hiking on weekends.",
         "Bob works at Globex.", "I moved to Porto last year.", "My sister is a nurse."]  # fmt: skip
QUERIES = ["where do I live", "what is my favorite color", "who works at Globex", "hiking", "my sister"]
TYPES = ["frustration", "satisfaction", "confusion", "trust", "engagement"]


def ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def timed_recalls(engine, queries: int) -> list[float]:
    out = []
    for i in range(queries):
        started = time.perf_counter()
        await engine.recall({"scope": SCOPE, "query": QUERIES[i % len(QUERIES)]})
        out.append(time.perf_counter() - started)
    return out


async def main(args) -> None:
    path = tempfile.mkdtemp(prefix="cortex-signals-")
    where = {"path": path} if args.backend == "leveldb" else {}
    counts = [int(c) for c in args.signals.split(",")]
    try:
        async def run(config: EngineConfig, fill: bool) -> dict[int, list[float]]:
            out = {}
            async with cortexdb.open_engine(args.backend, config=config, **where) as engine:
                if fill or args.backend == "memory":  # the memory backend keeps nothing between runs
                    items = [{"modality": "conversation", "content": {"kind": "text", "text": TEXTS[i % len(TEXTS)]},
                              "context": {"observed_at": "2026-05-13T15:42:00Z"}} for i in range(args.events)]  # fmt: skip
                    for start in range(0, len(items), 1000):
                        await engine.experience_bulk({"scope": SCOPE, "items": items[start : start + 1000]})
                    await engine.flush(SCOPE)
                await engine.signals.forget(SCOPE, everything=True)
                held = 0
                for count in counts:
                    while held < count:
                        await engine.signals.record({"scope": SCOPE, "subject": f"user:u{held % 10}",
                                                     "type": TYPES[held % len(TYPES)], "intensity": 0.5})  # fmt: skip
                        held += 1
                    await timed_recalls(engine, 20)  # warm
                    out[count] = await timed_recalls(engine, args.queries)
                if not fill:
                    record, snap = [], []
                    for _ in range(200):
                        started = time.perf_counter()
                        await engine.signals.record({"scope": SCOPE, "subject": "user:u0", "type": "trust",
                                                     "intensity": 0.4})  # fmt: skip
                        record.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        await engine.signals.snapshot(SCOPE, subject="user:u0")
                        snap.append(time.perf_counter() - started)
                    await engine.signals.forget(SCOPE, everything=True)
                    out[-1], out[-2] = record, snap
            return out

        base = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
        off = await run(EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_signals_max=0), True)
        on = await run(base, False)
        print(f"backend={args.backend} events={args.events} queries={args.queries}")
        for count in counts:
            b50, o50 = ms(off[count], 0.5), ms(on[count], 0.5)
            print(f"signals={count:5d}  recall p50 {o50:7.2f} ms (off: {b50:7.2f})  ratio {o50 / b50:5.2f}   "
                  f"p95 {ms(on[count], 0.95):7.2f} ms (off: {ms(off[count], 0.95):7.2f})")
        print(f"record p50 {ms(on[-1], 0.5):.3f} ms   snapshot (one subject, {counts[-1] // 10 + 200} readings) "
              f"p50 {ms(on[-2], 0.5):.3f} ms   (median of 200; {statistics.mean(on[-2]) * 1000:.3f} mean)")
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="leveldb", choices=["leveldb", "memory"])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--signals", default="0,20,200")
    parser.add_argument("--queries", type=int, default=200)
    trio.run(main, parser.parse_args())
