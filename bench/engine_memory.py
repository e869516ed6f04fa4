"""Where the engine's memory goes as it takes the soak's writes, without the HTTP server.

    python bench/engine_memory.py [--checkpoints 6000,18000,30000] [--scopes 5] [--recall-every N]
                                  [--set NAME=VALUE ...] [--backend leveldb|memory]
                                  [--tracemalloc FRAMES]

The soak's texts (bench/soak.py) are written one at a time, round robin over ``--scopes`` user
scopes, into an embedded engine on a LevelDB data dir with the hash embedder (``--recall-every N``:
a recall after every N writes).  At each checkpoint, after a flush, ``gc.collect()`` and
``malloc_trim``, it prints:

- anonymous RSS (/proc/self/status), and its growth per write since the last checkpoint;
- the deep size of each part of every scope's state (text and vector indexes, the fact and belief
  caches, ...), summed over scopes, and their growth per write: what the engine's own structures
  account for;
- glibc's malloc counters (in use, free), pymalloc's allocated blocks and LevelDB's own estimate of
  its memory; the stem and posterior caches' sizes; the object types that grew.

Anonymous growth well above what the structures account for is heap outside them (docs/
decisions.md, "The soak's memory, engine alone").  Baseline in the same run: the first checkpoint.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import importlib.util
import json
import mmap
import os
import shutil
import sys
import tempfile
import time
from array import array

import numpy as np
import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402
from cortexdb.engine.derive import beliefs as belief_rules  # noqa: E402
from cortexdb.engine.retrieve import tokens  # noqa: E402
from cortexdb.engine.retrieve.embedders import by_name  # noqa: E402

STATE_PARTS = ("events", "facts", "new_supports", "fact_ids", "current", "unlisted", "predicates", "claims",
               "stale_pairs", "pairs_used", "closing", "beliefs", "belief_by_id", "deferred", "episode",
               "previous_turn", "given", "closed", "voices", "subject_beliefs")  # fmt: skip


def _soak():
    spec = importlib.util.spec_from_file_location("bench_soak", os.path.join(_HERE, "soak.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def anonymous_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _mapped(values: np.ndarray) -> bool:
    """A view of a memory-mapped file (a sealed text segment's arrays: Python's ``mmap``, or a
    view of a mapping made with the C library's, text_segments._map_read_only): file-backed pages."""
    base = values.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, mmap.mmap) or isinstance(getattr(base, "obj", None), ctypes.Array)


def deep(obj, seen: set[int]) -> int:
    """Bytes reachable from ``obj`` not counted yet (numpy arrays by their buffers)."""
    stack, total = [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type) or (callable(item) and not hasattr(item, "__dict__")):
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            total += (0 if _mapped(item) else item.nbytes) + 112
            continue
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(item)
        elif not isinstance(item, (str, bytes, int, float, array)):
            if getattr(item, "__dict__", None) is not None:
                stack.append(item.__dict__)
            for name in getattr(type(item), "__slots__", ()) or ():
                value = getattr(item, name, None)
                if value is not None:
                    stack.append(value)
    return total


def structures() -> tuple[collections.Counter, int]:
    """Deep size per part of every scope's state, summed over the scopes (shared objects once)."""
    lanes = [o for o in gc.get_objects() if type(o).__name__ == "Lane"]
    parts: collections.Counter = collections.Counter()
    seen = {id(lane.ctx) for lane in lanes}
    for lane in lanes:
        state = lane.state
        seen.add(id(state.tables))
        for name in ("text_index", "vector_index"):
            for key, value in vars(getattr(state, name)).items():
                parts[f"{name}.{key}"] += deep(value, seen)
        for name in STATE_PARTS:
            parts[f"state.{name}"] += deep(getattr(state, name), seen)
    for actor in [o for o in gc.get_objects() if type(o).__name__ == "ScopeActor"]:
        parts["actor.episode_cache"] += deep(getattr(actor, "episode_cache", None), seen)  # recall's
    return parts, len(lanes)


def heap_line(libc) -> str:
    info = libc.mallinfo2() if libc is not None else None
    stores = [o for o in gc.get_objects() if type(o).__name__ == "DB" and hasattr(o, "get_property")]
    leveldb = sum(int(db.get_property(b"leveldb.approximate-memory-usage") or 0) for db in stores) / 1e6
    malloc = (f"malloc in use {info.uordblks / 1e6:.1f} MB, free {info.fordblks / 1e6:.1f} MB; "
              if info is not None else "")  # fmt: skip
    return (f"  heap: {malloc}pymalloc blocks {sys.getallocatedblocks():,}; LevelDB's estimate {leveldb:.1f} MB; "
            f"stem cache {tokens._stem_cached.cache_info().currsize:,}, "
            f"posterior cache {belief_rules._posterior.cache_info().currsize:,}")  # fmt: skip


def pymalloc() -> dict[str, int]:
    """pymalloc's arenas and the bytes of its live blocks (bench/procmem.py's ``pymalloc``): its
    arenas are mapped directly, outside glibc's malloc; the difference is its fragmentation."""
    found = _procmem().pymalloc()
    return {key: found[key] for key in ("arenas", "allocated") if key in found}


def split_line(libc, anon: float) -> str:
    """Anonymous RSS split into pymalloc's arenas, glibc's heap (its arenas and its mmapped blocks)
    and the rest (thread stacks, other direct mappings)."""
    stats = pymalloc()
    arenas = stats.get("arenas", 0) * 1048576 / 1e6
    live = stats.get("allocated", 0) / 1e6
    glibc = ""
    rest = anon * 1048576 / 1e6 - arenas
    if libc is not None:
        info = libc.mallinfo2()
        held = (info.arena + info.hblkhd) / 1e6
        rest -= held
        glibc = (f"glibc holds {held:.1f} MB (in use {(info.uordblks + info.hblkhd) / 1e6:.1f}, "
                 f"free {info.fordblks / 1e6:.1f}, mmapped {info.hblkhd / 1e6:.1f}); ")  # fmt: skip
    return (f"  split: pymalloc arenas {arenas:.1f} MB ({live:.1f} MB in live blocks, {arenas - live:.1f} MB "
            f"free in them); {glibc}rest {rest:.1f} MB (glibc's free pages after the trim are not resident)")  # fmt: skip


def trace_growth(snapshot, frames: int):
    """From the first checkpoint on, Python's allocations are traced (``--tracemalloc N``: N frames
    each); from the second, what grew since the one before, by place of allocation."""
    import tracemalloc

    if not tracemalloc.is_tracing():
        tracemalloc.start(frames)
        return None
    current = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    if snapshot is not None:
        print("  traced growth since the last checkpoint (Python allocations):")
        for stat in current.compare_to(snapshot, "traceback")[:12]:
            where = " < ".join(f"{os.path.relpath(f.filename)}:{f.lineno}" for f in stat.traceback)
            print(f"    {stat.size_diff / 1e6:+8.2f} MB {stat.count_diff:+9,} blocks  {where}")
    return current


def _procmem():
    spec = importlib.util.spec_from_file_location("bench_procmem", os.path.join(_HERE, "procmem.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _libc():
    """glibc with ``mallinfo2`` typed (bench/procmem.py), or None: malloc's counters are left out."""
    return _procmem().glibc()


async def run(args: argparse.Namespace, config: EngineConfig) -> None:
    soak = _soak()
    libc = _libc()
    root = tempfile.mkdtemp(prefix="cortexdb-engine-memory-")
    try:
        options = {"path": os.path.join(root, "data")} if args.backend == "leveldb" else {}
        async with cortexdb.open_engine(args.backend, config=config, embedder=by_name("hash"), **options) as engine:
            previous = None
            traced = None
            written, started = 0, time.perf_counter()
            for checkpoint in args.checkpoints:
                while written < checkpoint:
                    await engine.experience(soak.write_body(written, args.scopes))
                    if args.recall_every and written % args.recall_every == 0:
                        await engine.recall({"scope": soak.scope_of(written % args.scopes),
                                             "query": "what did we talk about on the roadmap"})  # fmt: skip
                    written += 1
                await engine.flush()
                gc.collect()
                if libc is not None:
                    libc.malloc_trim(0)
                parts, lanes = structures()
                anon = anonymous_mb()
                types = collections.Counter(type(o).__name__ for o in gc.get_objects())
                print(f"{checkpoint} writes ({time.perf_counter() - started:.0f} s, CPU {time.process_time():.0f} s): "
                      f"anonymous RSS {anon:.1f} MB, "
                      f"scopes' structures {sum(parts.values()) / 1e6:.1f} MB over {lanes} scopes", flush=True)  # fmt: skip
                print(heap_line(libc))
                print(split_line(libc, anon))
                if previous is not None:
                    before_parts, before_count, before_anon, before_types = previous
                    span = checkpoint - before_count
                    grown = {k: parts[k] - before_parts.get(k, 0) for k in parts}
                    accounted = sum(grown.values()) / span
                    print(f"  since {before_count}: anonymous RSS {(anon - before_anon) * 1048576 / span:,.0f} B a write, "
                          f"the scopes' structures {accounted:,.0f} B a write")  # fmt: skip
                    for key, value in sorted(grown.items(), key=lambda kv: -kv[1])[:8]:
                        if value:
                            print(f"    {key:34s} {value / span:8,.0f} B a write  (now {parts[key] / 1e6:.2f} MB)")
                    more = sorted(((types[k] - before_types.get(k, 0), k) for k in types), reverse=True)[:6]
                    print("  objects grown: " + ", ".join(f"{name} +{n:,}" for n, name in more if n > 0))
                previous = (parts, checkpoint, anon, types)
                if args.tracemalloc:
                    traced = trace_growth(traced, args.tracemalloc)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default="6000,18000,30000")
    parser.add_argument("--scopes", type=int, default=5)
    parser.add_argument("--recall-every", type=int, default=0, help="a recall after every N writes (0: none)")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="trace Python's allocations from the first checkpoint (FRAMES per trace)")
    parser.add_argument("--backend", choices=("leveldb", "memory"), default="leveldb")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an EngineConfig field (JSON value, else a string)")  # fmt: skip
    args = parser.parse_args()
    try:
        args.checkpoints = sorted({int(x) for x in args.checkpoints.split(",") if x.strip()})
    except ValueError:
        parser.error("--checkpoints: comma-separated write counts")
    if not args.checkpoints or args.checkpoints[0] <= 0 or args.scopes <= 0:
        parser.error("--checkpoints and --scopes must be positive")
    settings = {}
    for item in args.set:
        name, _, value = item.partition("=")
        try:
            settings[name] = json.loads(value)
        except json.JSONDecodeError:
            settings[name] = value
    try:
        config = EngineConfig(**settings)
    except (TypeError, ValueError) as error:
        parser.error(f"--set: {error}")
    trio.run(run, args, config)


if __name__ == "__main__":
    main()
