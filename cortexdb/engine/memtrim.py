"""Give freed heap memory back to the operating system (glibc's ``malloc_trim``).

CPython, numpy, LevelDB and annoy allocate through glibc's malloc.  Memory they free in the middle
of a heap, or in a worker thread's arena, stays mapped to the process: after a bulk load of 20k
events about a third of the anonymous RSS was such free memory (docs/decisions.md, "Index
memory").  ``malloc_trim(0)`` returns the free pages of every arena (``MADV_DONTNEED``); it costs a
walk over the heap, so it runs in a worker thread (ctypes releases the GIL) after the large
transient work — a vector segment built or merged — and on the engine's maintenance timer.
Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

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


def release_free_memory() -> bool:
    """Return free heap pages to the OS (blocking; call it off the event loop).  True when some
    memory was released."""
    trim = _libc_trim()
    return bool(trim(0)) if trim is not None else False


async def release_free_memory_soon() -> bool:
    return await trio.to_thread.run_sync(release_free_memory, abandon_on_cancel=True)
