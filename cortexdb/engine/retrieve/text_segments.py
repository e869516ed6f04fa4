"""The sealed parts of a ``TextIndex`` (text_index.py): its vocabulary and its segments.

A *segment* holds the documents of a contiguous range of slots in flat arrays (CSR): the sorted
ids of its terms with the offset of each term's postings, the postings (slot, term frequency) in
(term, slot) order, each document's term ids (what a removal decrements), and each document's id
as UTF-8 bytes with a sorted table of the ids' hashes (``hash()``: the index lives and dies with
its process).  With a ``directory`` (the data dir's ``text-segments/``) the arrays are written to
one file, unlinked at once, and read through a read-only shared mapping: file-backed pages the
kernel may drop, not anonymous memory (decisions.md, "BM25 in sealed segments").  The mapping is
made with the C library's ``mmap`` where there is one, so no file descriptor stays open (Python's
``mmap`` keeps one per mapping); it is unmapped once no array of the segment is left
(decisions.md, "Text segments hold no file descriptor").  Without one
they are numpy arrays, still far fewer bytes than a Python object per term or document.

The *vocabulary* numbers terms in the order they were first seen (the order of BM25's document
frequencies, so that the average idf sums them as before); terms seen since the last seal are in a
dict, the rest in a blob of UTF-8 bytes with a sorted table of their hashes.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import mmap
import os
import uuid
import weakref
from array import array
from typing import Any

import numpy as np

from .text_vocab import MASK, Vocabulary  # noqa: F401 (the sealed parts' vocabulary; callers import it here)

_ALIGN = 64


def _hash(text: str) -> np.uint64:
    return np.uint64(hash(text) & MASK)


def _sizes(offsets: np.ndarray) -> np.ndarray:
    return np.diff(offsets.astype(np.int64))


def _find(hashes: np.ndarray, key: np.uint64):
    """The positions in sorted ``hashes`` equal to ``key``."""
    position = int(np.searchsorted(hashes, key))
    while position < len(hashes) and hashes[position] == key:
        yield position
        position += 1


def _uint(values: np.ndarray, bound: int) -> np.ndarray:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bound <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values.astype(np.uint64)


class Segment:
    """Slots ``base`` to ``base + count`` in flat arrays (see the module); dead slots have no
    postings, no terms and an empty id."""

    # doc_hash: each slot's 64-bit hash of the text it indexed (``text_hash``; 0 when no folder
    # keeps the index's files); doc_key: its tie-break key (``Postings.slot_key``)
    NAMES = ("terms", "starts", "slots", "tfs", "fwd_start", "fwd_terms", "id_start", "id_blob", "doc_hash", "doc_key")

    def __init__(self, base: int, count: int, arrays: dict[str, np.ndarray], directory: str | None,
                 keep: bool = False) -> None:  # fmt: skip
        """``keep``: the file in ``directory`` keeps its name (a kept segment, text_files.py) and
        ``entry`` describes it for a manifest."""
        self.base, self.count = base, count
        self.mapped = directory is not None
        self.entry: dict | None = None
        self._map: Any = None
        if directory is not None:
            self._map, self.entry = _place(arrays, directory, keep)
            if self.entry is not None:
                self.entry.update(base=base, count=count)
        self.path = os.path.join(directory, self.entry["name"] + ".seg") if self.entry is not None else None
        for name in self.NAMES:
            setattr(self, name, arrays[name] if directory is None else self._view(arrays[name]))
        self.pairs = len(self.slots)

    @classmethod
    def opened(cls, path: str, entry: dict) -> Segment:
        """A kept segment's file mapped as ``entry`` (its manifest's) describes it."""
        self = cls.__new__(cls)
        self.base, self.count, self.mapped, self.entry, self.path = int(entry["base"]), int(entry["count"]), True, entry, path
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            self._map = _map_read_only(fd, size) if size else mmap.mmap(-1, 1)
        finally:
            os.close(fd)
        for name in self.NAMES:
            offset, dtype, count = entry["layout"][name]
            setattr(self, name, self._view((int(offset), np.dtype(dtype), int(count))))
        self.pairs = len(self.slots)
        return self

    def _view(self, shape_of: np.ndarray) -> np.ndarray:
        offset, dtype, count = shape_of  # type: ignore[misc]  # what _place wrote
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset)

    def nbytes(self) -> int:
        """Anonymous bytes (none of the arrays when they are mapped from a file)."""
        return 0 if self.mapped else sum(getattr(self, name).nbytes for name in self.NAMES)

    def postings(self, term_id: int) -> tuple[int, int] | None:
        """The range of ``term_id``'s postings in ``slots``/``tfs``, if the segment has it."""
        position = int(np.searchsorted(self.terms, term_id))
        if position < len(self.terms) and self.terms[position] == term_id:
            return int(self.starts[position]), int(self.starts[position + 1])
        return None

    def tf(self, term_id: int, slot: int) -> int:
        span = self.postings(term_id)
        if span is None:
            return 0
        start, end = span
        position = start + int(np.searchsorted(self.slots[start:end], slot))
        return int(self.tfs[position]) if position < end and self.slots[position] == slot else 0

    def doc_terms(self, slot: int) -> np.ndarray:
        local = slot - self.base
        return self.fwd_terms[int(self.fwd_start[local]) : int(self.fwd_start[local + 1])]

    def doc_id(self, slot: int) -> str:
        local = slot - self.base
        return bytes(self.id_blob[int(self.id_start[local]) : int(self.id_start[local + 1])]).decode()


def _libc() -> Any:
    """The C library's ``mmap`` and ``munmap``, typed, or None (then Python's ``mmap``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc() if os.name == "posix" else None
_FAILED = ctypes.c_void_p(-1).value  # MAP_FAILED


def _map_read_only(fd: int, size: int) -> Any:
    """A read-only shared mapping of ``size`` bytes of ``fd`` that holds no descriptor: a read-only
    ``memoryview`` of it, unmapped once the view and every array made from it are gone.  Without
    the C library's ``mmap``, Python's (which keeps a duplicate of ``fd`` while it lives)."""
    if _LIBC is None:
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    address = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _FAILED:
        error = ctypes.get_errno()
        raise OSError(error, f"mmap of a text segment: {os.strerror(error)}")
    region = (ctypes.c_char * size).from_address(address)
    unmap = weakref.finalize(region, _LIBC.munmap, address, size)  # the view holds the region
    unmap.atexit = False  # never under a thread still reading it: the process's exit unmaps it
    return memoryview(region).cast("B").toreadonly()


def _place(arrays: dict[str, np.ndarray], directory: str, keep: bool = False) -> tuple[Any, dict | None]:
    """Write ``arrays`` to one unlinked file of ``directory`` and map it (``_map_read_only``: no
    descriptor stays open); each entry of ``arrays`` becomes (offset, dtype, count) for
    ``Segment._view``.  With ``keep`` the file keeps its name (``<name>.seg``) and is
    ``fsync``-ed; returned with it: its manifest entry (name, bytes, BLAKE2b digest, layout)."""
    os.makedirs(directory, exist_ok=True)
    name = uuid.uuid4().hex
    path = os.path.join(directory, f"{name}.seg" if keep else f"{name}.bm25")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if not keep:
            os.unlink(path)  # the descriptor keeps the file; its name is never needed again
        offset, digest, layout = 0, hashlib.blake2b(), {}
        with os.fdopen(os.dup(fd), "wb") as out:
            for key, values in arrays.items():
                data = np.ascontiguousarray(values)
                pad = -offset % _ALIGN
                out.write(b"\0" * pad)
                digest.update(b"\0" * pad)
                offset += pad
                arrays[key] = (offset, data.dtype, len(data))  # type: ignore[assignment]
                layout[key] = [offset, data.dtype.str, len(data)]
                raw = data.tobytes()
                out.write(raw)
                digest.update(raw)
                offset += data.nbytes
            if keep:
                out.flush()
                os.fsync(out.fileno())
        entry = {"name": name, "bytes": offset, "blake2b": digest.hexdigest(), "layout": layout} if keep else None
        return (_map_read_only(fd, offset) if offset else mmap.mmap(-1, 1)), entry
    except BaseException:
        if keep:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    finally:
        os.close(fd)  # the mapping keeps the file (unlinked: it goes with the mapping)


def build(base: int, count: int, columns: dict[str, np.ndarray], directory: str | None, keep: bool = False) -> Segment:
    """A segment of slots ``base..base+count`` from columns: ``p_terms``, ``p_slots``, ``p_tfs``
    (postings, any order within a term: they are sorted here by (term, slot), stably), ``fwd_sizes``
    and ``fwd_terms`` (each slot's term ids in slot order), ``id_sizes`` and ``id_blob`` (each slot's
    id bytes), ``doc_hash`` and ``doc_key`` (each slot's text hash and tie-break key).  ``keep``:
    a named file of ``directory`` (a kept segment)."""
    terms_column = columns["p_terms"]
    order = np.argsort(terms_column, kind="stable")
    sorted_terms = terms_column[order]
    terms, first = np.unique(sorted_terms, return_index=True)
    pairs = len(sorted_terms)
    tfs = columns["p_tfs"][order]
    arrays = {
        "terms": terms.astype(np.uint32),
        "starts": _uint(np.append(first, pairs), max(pairs, 1 << 16)),
        "slots": columns["p_slots"][order].astype(np.uint32),
        "tfs": _uint(tfs, int(tfs.max()) if pairs else 0),
        "fwd_start": _uint(np.concatenate([[0], np.cumsum(columns["fwd_sizes"])]), max(pairs, 1 << 16)),
        "fwd_terms": columns["fwd_terms"].astype(np.uint32),
        "id_start": np.concatenate([[0], np.cumsum(columns["id_sizes"])]).astype(np.uint64),
        "id_blob": columns["id_blob"].astype(np.uint8),
        "doc_hash": columns["doc_hash"].astype(np.uint64),
        "doc_key": columns["doc_key"].astype(np.uint64),
    }
    return Segment(base, count, arrays, directory, keep)


def columns_of(segments: list[Segment], alive: np.ndarray) -> dict[str, np.ndarray]:
    """The live content of adjacent ``segments`` as ``build``'s columns (dead slots kept as
    empty documents; local positions counted from the first segment's base)."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in
                                          ("p_terms", "p_slots", "p_tfs", "fwd_sizes", "fwd_terms", "id_sizes", "id_blob",
                                           "doc_hash", "doc_key")}  # fmt: skip
    for segment in segments:
        terms = np.repeat(segment.terms, _sizes(segment.starts))
        keep = alive[segment.slots]
        parts["p_terms"].append(terms[keep])
        parts["p_slots"].append(np.asarray(segment.slots)[keep])
        parts["p_tfs"].append(np.asarray(segment.tfs)[keep].astype(np.uint32))
        local = alive[segment.base : segment.base + segment.count]
        sizes = _sizes(segment.fwd_start)
        parts["fwd_terms"].append(np.asarray(segment.fwd_terms)[np.repeat(local, sizes)])
        parts["fwd_sizes"].append(np.where(local, sizes, 0))
        id_sizes = _sizes(segment.id_start)
        parts["id_blob"].append(np.asarray(segment.id_blob)[np.repeat(local, id_sizes)])
        parts["id_sizes"].append(np.where(local, id_sizes, 0))
        parts["doc_hash"].append(np.where(local, segment.doc_hash, 0).astype(np.uint64))
        parts["doc_key"].append(np.where(local, segment.doc_key, 0).astype(np.uint64))
    return {name: np.concatenate(values) if values else np.zeros(0, dtype=np.uint32) for name, values in parts.items()}


def renumbered(columns: dict[str, np.ndarray], alive: np.ndarray, term_map: np.ndarray) -> dict[str, np.ndarray]:
    """``columns`` of every slot from 0 without the dead slots (a compaction): slots and local
    positions renumbered in order, term ids through ``term_map`` (order kept)."""
    slot_map = np.cumsum(alive) - 1
    out = dict(columns)
    out["p_slots"] = slot_map[columns["p_slots"]]
    out["p_terms"] = term_map[columns["p_terms"]]
    out["fwd_terms"] = term_map[columns["fwd_terms"]]
    out["fwd_sizes"] = columns["fwd_sizes"][alive]
    out["id_sizes"] = columns["id_sizes"][alive]
    out["doc_hash"] = columns["doc_hash"][alive]
    out["doc_key"] = columns["doc_key"][alive]
    return out


def delta_columns(base: int, alive: np.ndarray, rows: np.ndarray, starts: array, ids: list[str | None],
                  hashes: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:  # fmt: skip
    """``build``'s columns of a delta: ``rows`` its (term id, tf) pairs, a document's at
    ``starts[i]:starts[i + 1]``, ``ids`` its ids (None: removed, left out), ``hashes`` and
    ``keys`` its documents' text hashes and tie-break keys."""
    count = len(ids)
    sizes = np.diff(np.frombuffer(starts, dtype=np.uint64).astype(np.int64))
    rows = rows[np.repeat(alive, sizes)]
    live_sizes = np.where(alive, sizes, 0)
    encoded = [(doc_id or "").encode() for doc_id in ids]
    return {
        "p_terms": rows[:, 0], "p_tfs": rows[:, 1],
        "p_slots": np.repeat(np.arange(base, base + count, dtype=np.uint32), live_sizes),
        "fwd_sizes": live_sizes, "fwd_terms": rows[:, 0],
        "id_sizes": np.fromiter(map(len, encoded), dtype=np.int64, count=count),
        "id_blob": np.frombuffer(b"".join(encoded), dtype=np.uint8),
        "doc_hash": np.where(alive, hashes, 0).astype(np.uint64), "doc_key": np.where(alive, keys, 0).astype(np.uint64),
    }  # fmt: skip


class MergePlan:
    """Two adjacent segments to merge (or one built in memory, to map) and a copy of their slots'
    liveness (``build`` reads nothing mutable: it may run in a worker thread)."""

    def __init__(self, segments: list[Segment], alive: np.ndarray, directory: str | None, keep: bool = False) -> None:
        """``keep``: the segment's file keeps its name in ``directory`` (a kept segment)."""
        self.segments, self.alive, self.directory, self.keep = segments, alive, directory, keep

    def build(self) -> Segment:
        first = self.segments[0]
        count = sum(segment.count for segment in self.segments)
        alive = np.zeros(first.base + count, dtype=bool)
        alive[first.base :] = self.alive
        return build(first.base, count, columns_of(self.segments, alive), self.directory, self.keep)


def text_hash(text: str) -> int:
    """A 64-bit hash of a document's text, the same in every process (a kept segment's check
    that a slot indexed the text the stored record has now, text_reopen.py); never 0."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") or 1
