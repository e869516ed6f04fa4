"""A process's memory read from inside it, for the memory benches (standard library only, so a
server's entry point can load it before anything else: bench/soak_probe.py, bench/server_settle.py).

- ``status()``: VmRSS, RssAnon and RssFile from /proc/self/status, in MB;
- ``glibc()``: glibc's ``mallinfo2`` counters (``MallInfo2``), or None where malloc is not glibc's;
- ``held(fn, *args)``: run a heap walk without letting another thread run (see its docstring);
- ``pymalloc()``: pymalloc's arenas and the bytes of its live blocks (``sys._debugmallocstats``).
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from typing import Any


def status() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process, in MB."""
    out = {}
    with open("/proc/self/status") as lines:
        for line in lines:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out


class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]  # fmt: skip


def glibc() -> Any:
    """glibc as a ctypes library with ``mallinfo2`` typed (and ``malloc_trim``), or None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return None
    return libc


def held(fn: Any, *args: Any) -> Any:
    """Run ``fn`` without letting another thread run.  A heap walk (``gc.get_objects``,
    ``gc.get_referrers``) can be handed a tuple another thread is still building, and CPython
    refuses to resize a tuple someone else holds (``SystemError: bad argument to internal
    function`` in that thread).  So no reference a walk takes may outlive it: with a long switch
    interval the GIL stays with this thread until ``fn`` returns and its frame, with every
    reference it took, is gone.  ``fn`` must do no I/O and return no object of the heap."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        return fn(*args)
    finally:
        sys.setswitchinterval(interval)


def pymalloc() -> dict[str, int]:
    """pymalloc's own accounting (``sys._debugmallocstats``, which writes to fd 2): ``arenas``, its
    1 MiB arenas, mapped directly, outside glibc's malloc and its counters; ``allocated``, the bytes
    of the blocks in use (live small objects); ``free_pools``, its empty pools.  Arenas less live
    blocks is pymalloc's fragmentation: free blocks in pools, and pools in arenas it cannot give
    back while any block of them lives.  (Another thread's writes to stderr while this runs go
    into the sink.)"""
    wanted = {"# arenas allocated current": "arenas", "# bytes in allocated blocks": "allocated",
              "# bytes in available blocks": "available"}
    with tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    found = {}
    for line in text.splitlines():
        label, _, value = line.partition("=")
        label = label.strip()
        if label in wanted:
            found[wanted[label]] = int(value.strip().replace(",", ""))
        elif " unused pools * " in label:  # "N unused pools * 16384 bytes"
            found["unused_pools"] = int(label.split()[0].replace(",", ""))
    return found
