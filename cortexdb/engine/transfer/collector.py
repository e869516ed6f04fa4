"""The cyclic garbage collector while an import writes: rarer collections, boundedly.

CPython collects its young generation every 700 net allocations of tracked objects (dicts,
lists, ...), the middle one every 10 young collections, and walks *every* tracked object of the
process every 10 middle ones (when the objects promoted since the last full walk are a quarter of
those it found).  An import grows that heap as it writes (the engine keeps events, caches and
indexes) and each window's records, alive while they wait to be written, survive into the older
generations: full walks came about every 3,000 records, each over the whole engine, and the
collector was a quarter to a third of an imported record's CPU (docs/decisions.md, "Import
throughput: the collector's thresholds while an import writes").

So while an import job writes, the thresholds are ``import_gc_thresholds`` (50,000, 20, 15): a
young collection every 50,000 net allocations (fewer of the window's records survive into the
middle generation to be walked again), a middle one every 20 of those, and a full walk about
every 15,000,000 (the defaults walk every 7,000 to 70,000; session 27's (5,000, 10, 15) still
left ~12 µs a Mem0 record in the collector, these ~3).  Almost every object is freed by
reference counting the moment it is dropped, whatever the thresholds; what waits longer is
only garbage in reference cycles, for a
bounded count of allocations, and it is then collected as before.  The thresholds are the
process's, not one engine's: the first import to start raises them (each never below what is
set: an application's higher choice stays), the last one to end puts back what they were.
``import_gc_thresholds = None`` leaves the collector alone.  Objects frozen out of the collector
(the server's ``gc.freeze`` of its startup heap) are not touched.
"""

from __future__ import annotations

import gc
import threading
from types import TracebackType

_lock = threading.Lock()
_holders = 0  # import jobs of the process writing with the raised thresholds
_saved: tuple[int, ...] | None = None  # the thresholds before the first of them started


class Thresholds:
    """``with Thresholds(thresholds):`` around an import's writing."""

    def __init__(self, thresholds: tuple[int, int, int] | None) -> None:
        self.thresholds = tuple(thresholds) if thresholds else None

    def __enter__(self) -> Thresholds:
        global _holders, _saved
        if self.thresholds is None:
            return self
        with _lock:
            if _holders == 0:
                _saved = gc.get_threshold()
                gc.set_threshold(*(max(now, wanted) for now, wanted in zip(_saved, self.thresholds, strict=True)))
            _holders += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        global _holders, _saved
        if self.thresholds is None:
            return
        with _lock:
            _holders -= 1
            if _holders == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


def holders() -> int:
    """How many imports are writing with the raised thresholds now (tests)."""
    return _holders
