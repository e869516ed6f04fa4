"""The server's entry point under bench/server_memory.py: on SIGUSR2 a thread collects garbage,
trims glibc's heap and appends one settled measurement to FILE (a line of figures, then what grew
since the previous measurement, then a line "."):

- RSS, anonymous RSS, glibc's malloc (in use, free inside its heap, its own mappings), pymalloc's
  blocks, its arenas and the bytes in its live and its free blocks (``procmem.pymalloc``);
- under ``-X tracemalloc=N``: the allocation sites that grew most;
- with ``SETTLE_TYPES=1``: the object types whose count grew most, and for the top ones the types
  that hold a few of their objects (one hop of ``gc.get_referrers``);
- with ``SETTLE_BYTES=1``: the bytes objects of 16 KiB or more that containers hold, by holder;
- with ``SETTLE_SMAPS=1``: anonymous memory by mapping (``smaps_lines``);
- with ``SETTLE_DUMP=PREFIX`` (and ``-X tracemalloc``): each snapshot also written to PREFIX.N,
  for bench/server_reopen.py to diff two processes' snapshots.

    python bench/server_settle.py FILE serve ...   (the arguments of ``cortexdb serve``)
"""

import collections
import gc
import importlib.util
import os
import signal
import sys
import threading
import tracemalloc
import types

# bench/http.py would shadow the stdlib package `http`: keep this directory off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


_spec = importlib.util.spec_from_file_location("procmem", os.path.join(_HERE, "procmem.py"))
procmem = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(procmem)
libc = procmem.glibc()
asked = threading.Event()


def type_lines(previous):
    """The types that grew and who holds a few of their objects, as text.  Runs with the GIL
    held and keeps no heap object past its return (``procmem.held``)."""
    counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
    lines = []
    if previous is not None:
        grown = (counts - previous).most_common(15)
        lines.append("  types grown: " + ", ".join(f"{k} +{v}" for k, v in grown))
        for kind, _ in grown[:6]:
            found = [o for o in gc.get_objects() if type(o).__name__ == kind]
            holders = collections.Counter()
            sample = found[-50:]  # the newest ones
            for obj in sample:
                for holder in gc.get_referrers(obj):
                    if holder is not found and holder is not sample and not isinstance(holder, types.FrameType):
                        name = type(holder).__name__
                        if isinstance(holder, (list, dict, tuple, set)):
                            name += f"[{len(holder)}]"
                        holders[name] += 1
            lines.append(f"    {kind} held by: " + ", ".join(f"{k} x{v}" for k, v in holders.most_common(6)))
            del found, sample
    return lines, counts


def big_bytes_lines(_previous=None):
    """The bytes objects of at least 16 KiB and what holds them (any object the collector tracks,
    through ``gc.get_referents``: dicts, tuples, slots, frames), by the holder's type, with the
    holder's own holder for a dict, tuple or list: count and MB.  Bytes are not tracked by the
    collector, so they are found through what holds them; the startup heap is unfrozen first
    (``gc.freeze`` hides it), which only this diagnostic does."""
    gc.unfreeze()
    everything = gc.get_objects()
    held = collections.Counter()
    sizes = collections.Counter()
    seen = set()
    def found(holder, via="", depth=0):  # (through untracked tuples and dicts: the collector skips those)
        for value in gc.get_referents(holder):
            if isinstance(value, (tuple, dict)) and not gc.is_tracked(value) and depth < 4:
                yield from found(value, f"{via} > {type(value).__name__}[{len(value)}]", depth + 1)
            else:
                yield value, via

    for holder in everything:
        for value, via in found(holder):
            if isinstance(value, (bytes, bytearray)) and len(value) >= 16384 and id(value) not in seen:
                seen.add(id(value))
                name = type(holder).__name__
                if isinstance(holder, (dict, list, tuple)):
                    outer = [h for h in gc.get_referrers(holder)
                             if h is not everything and not isinstance(h, types.FrameType)][:1]
                    name += f"[{len(holder)}] in " + (type(outer[0]).__name__ if outer else "?")
                    if outer and isinstance(outer[0], dict):
                        owner = [h for h in gc.get_referrers(outer[0])
                                 if h is not everything and not isinstance(h, types.FrameType)][:1]
                        name += f"[{len(outer[0])}] of " + (type(owner[0]).__name__ if owner else "?")
                name += via
                held[name] += 1
                sizes[name] += len(value)
    del everything
    total = sum(sizes.values())
    lines = [f"  bytes >= 16 KiB: {len(seen)} objects, {total / 1e6:.1f} MB"]
    lines.extend(f"    {name}: {held[name]} objects, {size / 1e6:.1f} MB" for name, size in sizes.most_common(8))
    return lines, None


def smaps_lines():
    """Anonymous kB by mapping, in MB: glibc's main heap (``[heap]``), unnamed mappings of 1 MiB or
    more (pymalloc's arenas, glibc's own mmaps of large blocks and its thread arenas, numpy's
    buffers), smaller unnamed ones, thread stacks and the rest (libraries' data, files)."""
    sums = collections.Counter()
    counts = collections.Counter()
    where = None
    with open("/proc/self/smaps") as lines:
        for line in lines:
            head = line.split(None, 5)
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                start, _, end = head[0].partition("-")
                name = head[5].strip() if len(head) > 5 else ""
                size = int(end, 16) - int(start, 16)
                if name == "[heap]":
                    where = "heap"
                elif name.startswith("[stack"):
                    where = "stack"
                elif not name:
                    where = "unnamed>=1MiB" if size >= 1 << 20 else "unnamed<1MiB"
                else:
                    where = "other"
                counts[where] += 1
            elif line.startswith("Anonymous:") and where is not None:
                sums[where] += int(line.split()[1])
    return ["  anon by mapping MB: " + " ".join(f"{k}={sums[k] / 1024:.1f}({counts[k]})"
                                               for k in ("heap", "unnamed>=1MiB", "unnamed<1MiB", "stack", "other"))]


def settle() -> None:
    previous_trace = previous_types = None
    dumped = 0
    while True:
        asked.wait()
        asked.clear()
        gc.collect()
        libc.malloc_trim(0)
        rss, info, pym = procmem.status(), libc.mallinfo2(), procmem.pymalloc()
        lines = [f"rss={rss['VmRSS']:.1f} anon={rss['RssAnon']:.1f} arena={info.arena / 1e6:.1f} "
                 f"inuse={info.uordblks / 1e6:.1f} free={info.fordblks / 1e6:.1f} "
                 f"mmapped={info.hblkhd / 1e6:.1f} blocks={sys.getallocatedblocks()} "
                 f"pyarenas={pym.get('arenas', 0) * 1048576 / 1e6:.1f} pylive={pym.get('allocated', 0) / 1e6:.1f} "
                 f"pyavail={pym.get('available', 0) / 1e6:.1f}"]  # fmt: skip
        if tracemalloc.is_tracing():
            snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            if previous_trace is not None:
                for stat in snapshot.compare_to(previous_trace, "traceback")[:15]:
                    lines.append(f"  {stat.size_diff / 1e6:+8.2f} MB {stat.count_diff:+8d} blocks (now {stat.size / 1e6:.1f} MB)")
                    lines.extend("        " + line for line in stat.traceback.format()[-10:])
            previous_trace = snapshot
            if DUMP:
                dumped += 1
                snapshot.dump(f"{DUMP}.{dumped}")
        if TYPES:
            found, previous_types = procmem.held(type_lines, previous_types)
            lines.extend(found)
        if BYTES:
            found, _ = procmem.held(big_bytes_lines, None)
            lines.extend(found)
        if SMAPS:
            lines.extend(smaps_lines())
        with open(PATH, "a") as out:
            out.write("\n".join(lines) + "\n.\n")


if __name__ == "__main__":  # not in the engine's worker processes (trio_parallel spawns them: they import this as __mp_main__)
    PATH = sys.argv[1]
    TYPES = os.environ.get("SETTLE_TYPES") == "1"
    BYTES = os.environ.get("SETTLE_BYTES") == "1"  # the large bytes objects and what holds them
    SMAPS = os.environ.get("SETTLE_SMAPS") == "1"  # anonymous memory by mapping
    DUMP = os.environ.get("SETTLE_DUMP")  # a prefix: each tracemalloc snapshot written to PREFIX.N
    del sys.argv[1]
    signal.signal(signal.SIGUSR2, lambda *_: asked.set())
    threading.Thread(target=settle, daemon=True).start()
    sys.argv[0] = "cortexdb"
    from cortexdb.cli import main  # noqa: E402 (after the handler is in place)

    sys.exit(main())
