"""Give freed heap memory back to the operating system (glibc's ``malloc_trim``).

CPython, numpy, LevelDB and annoy allocate through glibc's malloc.  Memory they free in the middle
of a heap, or in a worker thread's arena, stays mapped to the process: after a bulk load of 20k
events about a third of the anonymous RSS was such free memory (docs/decisions.md, "Index
memory").  ``malloc_trim(0)`` returns the free pages of every arena (``MADV_DONTNEED``); it costs a
walk over the heap, so it runs in a worker thread (ctypes releases the GIL) after the large
transient work — a vector segment built or merged — and on the engine's trim timer
(``EngineConfig.memory_trim_interval``; ``context.trim_memory``).
Elsewhere than glibc it does nothing.

glibc serves a request of at least ``M_MMAP_THRESHOLD`` bytes with its own ``mmap`` and unmaps it on
free, but by default it raises that threshold (up to 32 MiB) each time such a block is freed, so
after the first vector segment build every later large buffer (the delta's growth, the index
arrays' growth, a build's scratch) is carved from the heap arenas instead, and the holes it leaves
among long-lived small blocks fragment them: pages ``malloc_trim`` cannot give back.  Fixing the
threshold (``EngineConfig.malloc_mmap_threshold``) keeps large buffers out of the arenas; glibc's
own ``MALLOC_MMAP_THRESHOLD_`` variable, when set, wins (docs/decisions.md, "A fixed mmap
threshold").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

import trio


@functools.cache
def _libc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to do
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's HEAP_MAX_SIZE / 2 on 64-bit: mallopt refuses more


@functools.cache
def _libc_mallopt():
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc: nothing to set
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def fix_mmap_threshold(threshold: int | None) -> bool:
    """Serve every allocation of ``threshold`` bytes or more with its own mapping, for the whole
    process, and stop glibc from raising that bound (None: leave glibc's dynamic default).  Not
    done when ``MALLOC_MMAP_THRESHOLD_`` is in the environment (the operator chose).  True when
    the threshold was set."""
    if threshold is not None and not 0 <= threshold <= _MMAP_THRESHOLD_MAX:
        raise ValueError(f"malloc_mmap_threshold must be between 0 and {_MMAP_THRESHOLD_MAX} bytes")
    if threshold is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    mallopt = _libc_mallopt()
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) if mallopt is not None else False


def release_free_memory() -> bool:
    """Return free heap pages to the OS (blocking; call it off the event loop).  True when some
    memory was released."""
    trim = _libc_trim()
    return bool(trim(0)) if trim is not None else False


async def release_free_memory_soon() -> bool:
    return await trio.to_thread.run_sync(release_free_memory, abandon_on_cancel=True)
