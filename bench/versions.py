"""What versioning derived records costs (issue 15, docs/time.md): derivation time and stored bytes.

    python bench/versions.py [--events 3000] [--trials 3] [--backend leveldb]

The worst case for versions: every write is its own commit (``wait="consolidated"`` one at a
time, the clock a second further each time, so no two changes share a moment) and most writes
change something — the home, the favourite colour, a count and an employer cycle through values,
so facts are superseded, beliefs revised and the episode grows on almost every write.  Prints
events/s (median of trials, best in brackets) and the stored rows and bytes per table, with the
share of the closed versions (``FV``/``BV``/``EV``).  The script uses the public ``Engine`` API
only, so the same file runs on a checkout from before versions (the baseline: run it there too,
in the same session — the machine is noisy).
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
from cortexdb import EngineConfig, ManualClock  # noqa: E402

SCOPE = "org:bench/user:alice"
CITIES = ["Paris", "Berlin", "Rome", "Lisbon", "Oslo"]
COLOURS = ["blue", "green", "red", "yellow"]
EMPLOYERS = ["Acme", "Initech", "Globex"]


def text(i: int) -> str:
    kind = i % 5
    if kind == 0:
        return f"I moved to {CITIES[(i // 5) % len(CITIES)]}."
    if kind == 1:
        return f"My favorite color is {COLOURS[(i // 5) % len(COLOURS)]}."
    if kind == 2:
        return f"Acme moved to {100 + (i // 5) % 7 * 10} seats."
    if kind == 3:
        return f"I work at {EMPLOYERS[(i // 5) % len(EMPLOYERS)]}."
    return "We talked about the roadmap for a while."


async def trial(backend: str, events: int) -> tuple[float, dict[str, tuple[int, int]]]:
    directory = tempfile.mkdtemp(prefix="cortex-versions-")
    clock = ManualClock("2026-05-01T00:00:00Z")
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", episode_gap_seconds=10**9)
    where = {"path": os.path.join(directory, "data")} if backend == "leveldb" else {}
    try:
        async with cortexdb.open_engine(backend, clock=clock, id_seed=1, config=config, **where) as engine:
            started = time.perf_counter()
            for i in range(events):
                clock.advance(1)
                observed = f"2026-04-{1 + i * 25 // events:02d}T{i % 24:02d}:00:00Z"
                body = {"scope": SCOPE, "modality": "conversation", "context": {"observed_at": observed},
                        "content": {"kind": "message", "role": "user", "text": text(i)}}  # fmt: skip
                await engine.experience(body, wait="consolidated")
            elapsed = time.perf_counter() - started
            tables: dict[str, tuple[int, int]] = {}
            async for key, value in engine.store.scan():
                name = key.split(b"\x00", 1)[0].decode()
                rows, size = tables.get(name, (0, 0))
                tables[name] = (rows + 1, size + len(key) + len(value))
            if backend == "leveldb":  # what the files hold once compacted (LevelDB compresses blocks)
                await engine.compact()
                disk = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(where["path"])
                           for f in files if f.endswith((".ldb", ".sst")))  # fmt: skip
                tables["(on disk, compacted)"] = (0, disk)
        return events / elapsed, tables
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def main(args) -> None:
    rates, tables = [], {}
    for _ in range(args.trials):
        rate, tables = await trial(args.backend, args.events)
        rates.append(rate)
    print(f"backend={args.backend} events={args.events} trials={args.trials} cpu_count={os.cpu_count()}")
    print(f"derivation, one event per commit: {statistics.median(rates):,.0f} events/s [{max(rates):,.0f}]")
    derived = ("F", "FI", "FS", "B", "BI", "BD", "BS", "EP", "EK", "EO", "FV", "BV", "EV")
    disk = tables.pop("(on disk, compacted)", (0, 0))[1]
    total = sum(size for _, size in tables.values())
    derived_bytes = sum(tables.get(name, (0, 0))[1] for name in derived)
    for name in derived:
        if name in tables:
            rows, size = tables[name]
            print(f"  {name:<3} {rows:>7,} rows {size:>12,} bytes")
    versions = sum(tables.get(name, (0, 0))[1] for name in ("FV", "BV", "EV"))
    rows = sum(tables.get(name, (0, 0))[0] for name in ("FV", "BV", "EV"))
    print(f"closed versions: {rows:,} rows, {versions:,} bytes = {versions / max(derived_bytes, 1):.1%} of the "
          f"derived tables, {versions / max(total, 1):.1%} of the store ({total:,} bytes), "
          f"{rows / args.events:.2f} rows per event")
    if disk:
        print(f"LevelDB table files once compacted: {disk:,} bytes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--backend", default="leveldb", choices=("memory", "leveldb"))
    trio.run(main, parser.parse_args())
