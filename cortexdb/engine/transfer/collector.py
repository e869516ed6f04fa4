"""The cyclic garbage collector while an import writes: full collections made rarer, boundedly.

CPython's full collection walks every tracked object of the process.  An import grows that heap
as it writes (the engine keeps its events, caches and indexes) and each window's records, alive
while they wait to be written, survive into the oldest generation; a full collection came every
ten collections of the middle generation (CPython's third threshold, 10), about every 3,000
records, each walking the whole engine: most of the collector's share of an imported record's
CPU, a quarter to a third of it (docs/decisions.md, "Import throughput: rarer full collections").

So while an import job writes, that threshold is ``import_gc_full_threshold`` (100): a full
collection every hundred middle-generation ones (about every 700,000 tracked allocations), and
the young generations are collected as before.  Almost every object is freed by reference
counting the moment it is dropped; what waits longer is only garbage in reference cycles, for at
most the threshold's count of collections, then it is collected as before.  The threshold is
the process's, not one engine's: the first import to start raises it (never lowers a higher
one), and the last to end puts back what it was.  ``import_gc_full_threshold = 0`` leaves the
collector alone.  Objects frozen out of the collector (the server's ``gc.freeze`` of its startup
heap) are not touched.
"""

from __future__ import annotations

import gc
import threading
from types import TracebackType

_lock = threading.Lock()
_holders = 0  # import jobs of the process writing with the raised threshold
_saved: tuple[int, ...] | None = None  # the thresholds before the first of them started


class RarerFullCollections:
    """``with RarerFullCollections(threshold):`` around an import's writing."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    def __enter__(self) -> RarerFullCollections:
        global _holders, _saved
        if self.threshold <= 0:
            return self
        with _lock:
            if _holders == 0:
                _saved = gc.get_threshold()
                young, middle, full = _saved
                gc.set_threshold(young, middle, max(full, self.threshold))
            _holders += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        global _holders, _saved
        if self.threshold <= 0:
            return
        with _lock:
            _holders -= 1
            if _holders == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


def holders() -> int:
    """How many imports are writing with the raised threshold now (tests)."""
    return _holders
