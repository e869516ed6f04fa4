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

MASK = (1 << 64) - 1
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


class Vocabulary:
    """Term → id, ids in first-seen order; ``freeze`` moves the recent terms into the blob and
    keeps the frequent ones (``HOT_DF`` documents or more) in a dict as well: a document's common
    words are found without a search (their number is bounded by the language, not the corpus)."""

    HOT_DF = 4

    def __init__(self, terms: list[str] | None = None, df=None) -> None:
        self._new: dict[str, int] = {}
        self._hot: dict[str, int] = {}
        self._blob = bytearray()
        self._offsets = array("Q", [0])  # frozen term i: _blob[_offsets[i] : _offsets[i + 1]]
        self._hashes = np.zeros(0, dtype=np.uint64)  # sorted
        self._ids = np.zeros(0, dtype=np.uint32)  # the term id of each hash
        for term in terms or ():
            self.add(term)
        self.freeze(df)

    def __len__(self) -> int:
        return len(self._offsets) - 1 + len(self._new)

    def get(self, term: str) -> int | None:
        return self.ids([term])[0]

    def ids(self, terms: list[str]) -> list[int | None]:
        """The id of each of ``terms`` (None: not in the vocabulary), one search for the rare."""
        new, hot = self._new, self._hot
        out = [new.get(term) for term in terms]
        missing = [i for i, term_id in enumerate(out) if term_id is None and terms[i] not in hot]
        for i, term_id in enumerate(out):
            if term_id is None and terms[i] in hot:
                out[i] = hot[terms[i]]
        if not missing or not len(self._hashes):
            return out
        hashes, blob, offsets = self._hashes, self._blob, self._offsets
        keys = np.fromiter((hash(terms[i]) & MASK for i in missing), dtype=np.uint64, count=len(missing))
        for i, key, position in zip(missing, keys.tolist(), np.searchsorted(hashes, keys).tolist(), strict=True):
            encoded = terms[i].encode()
            while position < len(hashes) and int(hashes[position]) == key:
                term_id = int(self._ids[position])
                if blob[offsets[term_id] : offsets[term_id + 1]] == encoded:
                    out[i] = term_id
                    break
                position += 1
        return out

    def add(self, term: str) -> int:
        term_id = self._new[term] = len(self)
        return term_id

    def terms(self):
        """Every term, in id order (dead ones too, until a compaction drops them)."""
        for term_id in range(len(self._offsets) - 1):
            yield self._blob[self._offsets[term_id] : self._offsets[term_id + 1]].decode()
        yield from self._new

    def freeze(self, df=None) -> None:
        """Move the recent terms into the blob; those of ``df[id] >= HOT_DF`` stay in the dict."""
        if not self._new:
            return
        first = len(self._offsets) - 1
        for term, term_id in self._new.items():
            self._blob += term.encode()
            self._offsets.append(len(self._blob))
            if df is not None and df[term_id] >= self.HOT_DF:
                self._hot[term] = term_id
        hashes = np.fromiter((hash(t) & MASK for t in self._new), dtype=np.uint64, count=len(self._new))
        ids = np.arange(first, first + len(self._new), dtype=np.uint32)
        order = np.argsort(hashes, kind="stable")
        hashes, ids = hashes[order], ids[order]
        at = np.searchsorted(self._hashes, hashes)
        self._hashes, self._ids = np.insert(self._hashes, at, hashes), np.insert(self._ids, at, ids)
        self._new = {}

    def kept(self, keep: np.ndarray, df) -> Vocabulary:
        """A vocabulary of the terms where ``keep`` (by id) is true, in the same order; ``df``:
        their document frequencies (the kept ones, in order)."""
        self.freeze()
        blob, offsets = self._blob, self._offsets
        return Vocabulary([blob[offsets[i] : offsets[i + 1]].decode() for i in np.flatnonzero(keep).tolist()], df)

    @property
    def frozen(self) -> int:
        """Terms in the blob (ids ``0..frozen - 1``): what a sealed segment may refer to."""
        return len(self._offsets) - 1

    def frozen_terms(self, first: int, last: int) -> tuple[bytes, np.ndarray]:
        """Frozen terms ``first..last - 1``: their UTF-8 bytes and each one's end in them (a
        kept vocabulary chunk, text_files.py)."""
        offsets = np.frombuffer(self._offsets, dtype=np.uint64)[first : last + 1].astype(np.int64)
        return bytes(self._blob[int(offsets[0]) : int(offsets[-1])]), (offsets[1:] - offsets[0]).astype(np.uint64)

    @classmethod
    def loaded(cls, blob: bytes, ends: np.ndarray) -> Vocabulary:
        """A frozen vocabulary of the terms ``blob[ends[i - 1]:ends[i]]`` in id order (kept
        chunks, text_files.py), their hashes computed here (``hash`` is per process); the hot
        terms are set once their document frequencies are known (``heat``)."""
        self = cls()
        self._blob = bytearray(blob)
        self._offsets = array("Q", [0])
        self._offsets.extend(np.asarray(ends, dtype=np.uint64).tolist())
        view = memoryview(self._blob)
        starts = [0, *self._offsets[1:-1]]
        terms = [bytes(view[a:b]).decode() for a, b in zip(starts, self._offsets[1:], strict=True)]
        del view
        hashes = np.fromiter((hash(t) & MASK for t in terms), dtype=np.uint64, count=len(terms))
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._ids = hashes[order], order.astype(np.uint32)
        return self

    def heat(self, df) -> None:
        """The frozen terms of ``df[id] >= HOT_DF`` in the dict too (``freeze``'s rule)."""
        hot = np.flatnonzero(np.frombuffer(df, dtype=np.uint32)[: self.frozen] >= self.HOT_DF)
        blob, offsets = self._blob, self._offsets
        self._hot = {blob[offsets[i] : offsets[i + 1]].decode(): i for i in hot.tolist()}

    def nbytes(self) -> int:
        # a recent or frequent term: its str (~60 B) and dict entry (~40 B)
        return (len(self._blob) + self._offsets.itemsize * len(self._offsets) + self._hashes.nbytes
                + self._ids.nbytes + 100 * (len(self._new) + len(self._hot)))  # fmt: skip


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
