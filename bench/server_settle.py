"""The server's entry point under bench/server_memory.py: on SIGUSR2 a thread collects garbage,
trims glibc's heap and appends one settled measurement to FILE (a line of figures, then what grew
since the previous measurement, then a line "."):

- RSS, anonymous RSS, glibc's malloc (in use, free inside its heap, its own mappings), pymalloc's
  blocks, its arenas and the bytes in its live and its free blocks (``procmem.pymalloc``);
- under ``-X tracemalloc=N``: the allocation sites that grew most;
- with ``SETTLE_TYPES=1``: the object types whose count grew most, and for the top ones the types
  that hold a few of their objects (one hop of ``gc.get_referrers``).

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


def settle() -> None:
    previous_trace = previous_types = None
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
        if TYPES:
            found, previous_types = procmem.held(type_lines, previous_types)
            lines.extend(found)
        with open(PATH, "a") as out:
            out.write("\n".join(lines) + "\n.\n")


PATH = sys.argv[1]
TYPES = os.environ.get("SETTLE_TYPES") == "1"
del sys.argv[1]
signal.signal(signal.SIGUSR2, lambda *_: asked.set())
threading.Thread(target=settle, daemon=True).start()
sys.argv[0] = "cortexdb"
from cortexdb.cli import main  # noqa: E402 (after the handler is in place)

sys.exit(main())
