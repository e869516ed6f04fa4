"""The ``strict_temporal`` import's external merge sort: sorted runs on disk, merged lazily.

The job reads the source once, ``import_window`` records at a time; each chunk's records are
encoded as they are mapped (one frame each, below: the mapped ``Item`` is dropped), sorted by
their key and written as a *run* file under ``<transfer dir>/<import id>.runs/``, flushed and
fsynced (with the directory) before the job's record names it.  When more than
``import_sort_fan_in`` runs exist, the first ``fan_in`` are merged into one (frames copied, not
decoded) until ``fan_in`` remain.  The write step then merges the runs (``heapq.merge`` over a
reader per run, each holding one frame and a ``READ_BUFFER``) into bulk requests, so the job holds
one chunk of encoded records while sorting, then a frame per run and a request's records while
writing, whatever the file's length.

The key is ``(scope, timeless, observed_at, ordinal)``: the record's canonical scope (as written
when it is not one), records without a readable ``observed_at`` after those with one, the time,
then the record's ordinal in the source (file order): unique, so the merged order is a total
order, the same at every resume.  Within a scope, the records are written in ``observed_at``
order across the whole file.

A frame: ``FRAME`` (payload length, scope length, timeless, observed_at as POSIX seconds,
ordinal), the scope in UTF-8, then the payload: ``orjson`` of ``[position, unit, source_id,
replay_by_key, scope as written, envelope]``.  The disk the runs take is bounded by
``import_sort_max_bytes`` (413 ``PAYLOAD_TOO_LARGE`` ends the job, naming the setting).
"""

from __future__ import annotations

import heapq
import os
import shutil
import struct
from collections.abc import Iterator
from typing import Any

import orjson

from ...errors import CortexError, PayloadTooLarge
from ..durable import fsync_path
from ..scopes import canonical_scope
from .mapping import Item
from .window import order

FRAME = struct.Struct("<IHBdq")
READ_BUFFER = 32 * 1024  # per run, while merging
SCOPES_KEPT = 4096  # scopes as written -> canonical, remembered while sorting
SHARED_STRINGS = 4096  # repeated strings of decoded records made one object each (``share``)

Key = tuple[bytes, int, float, int]


def runs_dir(transfer_dir: str, import_id: str) -> str:
    return os.path.join(transfer_dir, f"{import_id}.runs")


class Chunk:
    """Records being sorted: their keys, and their payloads one after another in one buffer.

    One buffer, not a ``bytes`` a record: ``orjson.dumps`` returns its output in the block it
    grew it in (about 4 KiB for a 300-byte record), so 10,000 records held as its results took
    ~40 MB where their bytes are ~3 (measured); appended to a ``bytearray`` and dropped, each
    result's block is reused by the next."""

    def __init__(self) -> None:
        self.keys: list[tuple[Key, int, int]] = []  # (key, start, end) in ``data``
        self.data = bytearray()

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: Key, payload: bytes) -> None:
        start = len(self.data)
        self.data += payload
        self.keys.append((key, start, len(self.data)))

    def frames(self) -> Iterator[tuple[Key, memoryview]]:
        """In key order (sorts the keys in place)."""
        self.keys.sort(key=_key)
        view = memoryview(self.data)
        return ((key, view[start:end]) for key, start, end in self.keys)

    def size(self) -> int:
        return FRAME.size * len(self.keys) + sum(len(key[0]) for key, _, _ in self.keys) + len(self.data)


def encode(item: Item, ordinal: int, scopes: dict[Any, bytes]) -> tuple[Key, bytes]:
    """``item`` (mapped, its scope still in its envelope) as (key, frame body after the key)."""
    envelope = item.envelope
    raw = envelope.pop("scope", None)
    scope = scopes.get(raw) if type(raw) is str else None
    if scope is None:
        scope = _scope_key(raw)
        if type(raw) is str and len(scopes) < SCOPES_KEPT:
            scopes[raw] = scope
    timeless, when, _ = order(envelope, ordinal)
    payload = orjson.dumps([item.position, item.unit, item.source_id, item.replay_by_key, raw, envelope])
    return (scope, int(timeless), when, ordinal), payload


def _scope_key(raw: Any) -> bytes:
    if isinstance(raw, str):
        try:
            return canonical_scope(raw).encode()
        except CortexError:
            return raw.encode("utf-8", "replace")
    return orjson.dumps(raw)  # not a scope: reported when its record is written


def decode(payload: bytes | memoryview, shared: dict[str, str] | None = None) -> Item:
    """The ``Item`` of a frame's payload; with ``shared`` (a dict the job keeps while merging),
    the strings its records repeat are one object each, as the importer's mapping made them."""
    position, unit, source_id, replay, raw, envelope = orjson.loads(payload)
    if shared is not None and type(envelope) is dict:
        share(envelope, shared)
    return Item(position, unit, envelope, replay_by_key=replay, source_id=source_id, scope=raw)


def share(envelope: dict[str, Any], shared: dict[str, str]) -> None:
    """Make the strings a file's records repeat one object each again: ``orjson.loads`` makes a
    new ``str`` of every value (only keys are cached), where the importer's mapping gave every
    record the same modality, content kind, actor and subject ids and types (constants and
    caches), and one object for ``observed_at`` and ``source_recorded_at`` when they are equal.
    The engine keeps what it is given: the lane caches ``pipeline_cache_events`` events (their
    content, context and actors), each holding these strings; fresh copies cost ~400 bytes an
    event of a Mem0 file (measured with tracemalloc, docs/decisions.md, session 33).  Values
    only, never what they are: the event stored is the same.  ``shared`` is bounded by
    ``SHARED_STRINGS`` (cleared when full)."""
    if len(shared) >= SHARED_STRINGS:
        shared.clear()
    get = shared.setdefault
    modality = envelope.get("modality")
    if type(modality) is str:
        envelope["modality"] = get(modality, modality)
    content = envelope.get("content")
    if type(content) is dict:
        kind = content.get("kind")
        if type(kind) is str:
            content["kind"] = get(kind, kind)
        role = content.get("role")
        if type(role) is str:
            content["role"] = get(role, role)
    for name in ("observed_actor", "subject"):
        actor = envelope.get(name)
        if type(actor) is dict:
            for field, value in actor.items():
                if type(value) is str:
                    actor[field] = get(value, value)
    context = envelope.get("context")
    if type(context) is dict:
        observed = context.get("observed_at")
        if type(observed) is str and context.get("source_recorded_at") == observed:
            context["source_recorded_at"] = observed


class Runs:
    """The run files of one import job: written, merged, removed."""

    def __init__(self, directory: str, max_bytes: int, fan_in: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.fan_in = fan_in  # at least 2 (EngineConfig checks it)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def prune(self, keep: list[dict[str, Any]]) -> None:
        """Remove every file of the directory the job's record does not name (a run being
        written or merged when the job stopped); make the directory if it is missing."""
        os.makedirs(self.directory, exist_ok=True)
        names = {run["name"] for run in keep}
        missing = sorted(names - set(os.listdir(self.directory)))
        if missing:  # removed by hand, or another transfer dir configured since
            raise CortexError(f"the sorted runs of this import are missing from {self.directory} ({missing[0]}, ...): "
                              "import the file again")  # fmt: skip
        for name in os.listdir(self.directory):
            if name not in names:
                os.remove(self.path(name))

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def check(self, runs: list[dict[str, Any]], adding: int) -> None:
        used = sum(run["bytes"] for run in runs) + adding
        if used > self.max_bytes:
            raise PayloadTooLarge("sort_runs", self.max_bytes, used,
                                  message=f"the strict_temporal import's sorted runs need {used} bytes of disk, more "
                                  f"than import_sort_max_bytes ({self.max_bytes}); raise it or import with "
                                  "ordering=batch_throughput")  # fmt: skip

    def spill(self, name: str, chunk: Chunk, runs: list[dict[str, Any]]) -> dict[str, Any]:
        """Sort ``chunk`` and write it as the run ``name``, durably: {name, count, bytes}."""
        size = chunk.size()
        self.check(runs, size)
        return self._write(name, chunk.frames(), len(chunk), size)

    def merge_pass(self, name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
        """The first ``fan_in`` of ``runs`` merged into the run ``name`` (frames copied)."""
        first = runs[: self.fan_in]
        size, count = sum(run["bytes"] for run in first), sum(run["count"] for run in first)
        self.check(runs, size)  # the merged copy and its inputs, until these are removed
        return self._write(name, self.merged(first), count, size)

    def _write(self, name: str, frames: Any, count: int, size: int) -> dict[str, Any]:
        path = self.path(name)
        with open(path, "wb", buffering=256 * 1024) as out:
            for (scope, timeless, when, ordinal), payload in frames:
                out.write(FRAME.pack(len(payload), len(scope), timeless, when, ordinal))
                out.write(scope)
                out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        fsync_path(self.directory)
        return {"name": name, "count": count, "bytes": size}

    def merged(self, runs: list[dict[str, Any]]) -> Iterator[tuple[Key, memoryview]]:
        """Every frame of ``runs`` in key order: (key, payload).  A payload is valid until the
        next frame is asked for (each run reads into one buffer of its own)."""
        return heapq.merge(*(self._read(run["name"]) for run in runs))

    def _read(self, name: str) -> Iterator[tuple[Key, memoryview]]:
        # one buffer a run, read into: not a bytes object a frame, each a block of the C heap
        # (a Mem0 payload is over pymalloc's 512 bytes) freed among the engine's long-lived ones
        buffer = bytearray(4096)
        with open(self.path(name), "rb", buffering=READ_BUFFER) as fh:
            while header := fh.read(FRAME.size):
                length, scope_length, timeless, when, ordinal = FRAME.unpack(header)
                scope = fh.read(scope_length)
                if length > len(buffer):
                    buffer = bytearray(max(length, 2 * len(buffer)))
                payload = memoryview(buffer)[:length]
                fh.readinto(payload)
                yield (scope, timeless, when, ordinal), payload


def _key(frame: tuple[Key, bytes]) -> Key:
    return frame[0]


def sweep(transfer_dir: str, running: set[str]) -> list[str]:
    """Remove the run directories of import jobs that are not running (ended, or gone): what
    they removed."""
    removed = []
    try:
        names = os.listdir(transfer_dir)
    except FileNotFoundError:
        return removed
    for name in names:
        if name.endswith(".runs") and name[: -len(".runs")] not in running:
            shutil.rmtree(os.path.join(transfer_dir, name), ignore_errors=True)
            removed.append(name)
    return removed
