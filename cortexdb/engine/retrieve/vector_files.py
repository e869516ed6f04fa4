"""Sealed vector segments kept under the data dir between runs, and their manifest.

A ``VectorIndex`` made with ``persist`` (a folder of its own: ``vector-segments/<scope>/<layer>``)
keeps each sealed segment (a flat run or an IVF segment, vector_runs.py and vector_ivf.py) in two
files there: ``<name>.run``, the rows as the run holds them (its sketch after them), and
``<name>.npz``, what the segment keeps in memory (its sorted ids, the int8 scales, the sketch's
per-row figures, the IVF centroids, list offsets and order) with a 64-bit hash of each row as
stored (``row_hashes``).  Both are written and ``fsync``-ed before ``manifest.json`` names them;
the manifest is written to a temporary file, ``fsync``-ed and renamed over the old one (then the
folder is ``fsync``-ed), and only then are the files of the segments it no longer names deleted.

At open (``load``) the manifest's segments are mapped, not rebuilt: each file's size and BLAKE2b
digest must match the manifest's (else the segment is dropped and its rows rebuilt from the stored
vectors), and every row starts *unconfirmed* (dead): the restore (vector_reopen.py) revives a row
only when its id is still a record to index and the hash of its stored vector, encoded as the
index stores it, is the row's hash.  A row whose record was forgotten, erased, re-embedded or
changed after the manifest stays dead, and the stored vector goes to the delta as on a rebuild;
files in the folder that the manifest does not name (a build a crash or a stop cut short) are
deleted.  docs/decisions.md, "Sealed vector segments kept across a reopen".
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any

import numpy as np
import trio

from ..durable import file_digest, fsync_path, read_json, replace_json
from . import vector_runs, vector_sketch
from .vector_ids import Dead, SortedIds
from .vector_ivf import IvfRun
from .vector_segments import Segment

MANIFEST = "manifest.json"
VERSION = 1
def new_name() -> str:
    return uuid.uuid4().hex


def save(folder: str, segment: Any) -> dict:
    """Write ``segment``'s sidecar (its run is in ``folder`` already, ``segment.index.path``) and
    return its manifest entry (in a worker thread)."""
    index = segment.index
    run = index.run if hasattr(index, "centroids") else index
    name = os.path.basename(run.path)[: -len(".run")]
    arrays = {"keys": segment.ids.keys, "hashes": segment.hashes}
    if run.scales is not None:
        arrays["scales"] = run.scales
    if run.sketch is not None:
        arrays.update(zip(("sketch_scale", "sketch_norms", "sketch_errors"), run.sketch, strict=True))
    if run is not index:
        arrays.update(centroids=index.centroids, offsets=index.offsets, order=index.order)
    side = os.path.join(folder, f"{name}.npz")
    with open(side, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_path(run.path)
    files = {suffix: {"bytes": os.path.getsize(p), "blake2b": file_digest(p)}
             for suffix, p in (("run", run.path), ("npz", side))}  # fmt: skip
    return {"name": name, "kind": "run" if run is index else "ivf", "count": len(segment.ids), "files": files}


def write_manifest(folder: str, meta: dict, entries: list[dict], retired: list[str]) -> None:
    """Name ``entries`` (in the index's order) in the manifest, atomically, then delete the files
    of the ``retired`` segment names (in a worker thread)."""
    replace_json(folder, MANIFEST, {"version": VERSION, **meta, "segments": entries})
    for name in retired:
        remove(folder, name)


def remove(folder: str, name: str) -> None:
    for suffix in (".run", ".npz"):
        try:
            os.unlink(os.path.join(folder, name + suffix))
        except FileNotFoundError:
            pass


def load(folder: str, meta: dict) -> tuple[list[tuple[dict, Any, SortedIds, np.ndarray]], list[str]]:
    """The manifest's segments that check out, in its order: (entry, run or IVF run, ids, row
    hashes); and why each other was refused.  Files the manifest does not name are deleted; so
    is every file when the manifest is missing, unreadable or of other settings (in a worker
    thread)."""
    refused: list[str] = []
    manifest, unreadable = read_json(os.path.join(folder, MANIFEST))
    if unreadable:
        refused.append(unreadable)
    if manifest is not None and any(manifest.get(k) != v for k, v in {"version": VERSION, **meta}.items()):
        refused.append("manifest of other settings")
        manifest = None
    entries = manifest.get("segments", []) if isinstance(manifest, dict) else []
    out = []
    for entry in entries:
        try:
            out.append(_open(folder, meta, entry))
        except (OSError, ValueError, KeyError, TypeError) as error:
            refused.append(f"{entry.get('name')}: {error}")
            remove(folder, str(entry.get("name")))
    named = {entry[0]["name"] for entry in out}
    for file in os.listdir(folder):
        if file != MANIFEST and file.split(".", 1)[0] not in named:
            os.unlink(os.path.join(folder, file))
    return out, refused


def _open(folder: str, meta: dict, entry: dict) -> tuple[dict, Any, SortedIds, np.ndarray]:
    name = entry["name"]
    paths = {suffix: os.path.join(folder, f"{name}.{suffix}") for suffix in ("run", "npz")}
    for suffix, path in paths.items():
        expected = entry["files"][suffix]
        if os.path.getsize(path) != expected["bytes"] or file_digest(path) != expected["blake2b"]:
            raise ValueError(f"{suffix} file differs from the manifest")
    with np.load(paths["npz"], allow_pickle=False) as arrays:
        side = {key: arrays[key] for key in arrays.files}
    count, dimension, dtype = int(entry["count"]), int(meta["dimension"]), meta["dtype"]
    if len(side["keys"]) != count or len(side["hashes"]) != count:
        raise ValueError("sidecar of another size")
    sketch = tuple(side[k] for k in ("sketch_scale", "sketch_norms", "sketch_errors")) if "sketch_scale" in side else None
    size = count * (dimension * np.dtype(dtype).itemsize + (dimension if sketch is not None else 0))
    if entry["files"]["run"]["bytes"] != size:
        raise ValueError("run file of another size")
    fd = os.open(paths["run"], os.O_RDONLY)
    run = vector_runs.FlatRun(fd, count, dimension, dtype, side.get("scales"), sketch)
    run.path = paths["run"]
    index = run if entry["kind"] == "run" else IvfRun(run, side["centroids"], side["offsets"], side["order"])
    return entry, index, SortedIds(side["keys"]), side["hashes"]


def meta_of(index: Any) -> dict:
    """What a manifest's segments must have been built with to be mapped by ``index``."""
    return {"dimension": index.dimension, "dtype": index.dtype, "sketch": bool(vector_sketch.usable())}


async def persist(index: Any) -> None:
    """After ``index``'s segments changed: save those not saved yet, name them all in a new
    manifest, then delete the files of the segments it replaced (a worker thread)."""
    if index.persist is None:
        _drop_strays(index)
        return
    segments, retired, folder = index.segments, index.retired, index.persist
    named = [segment.entry["name"] if segment.entry is not None else None for segment in segments]
    if not retired and None not in named and named == index.named:
        return  # the manifest says this already (a rewrite that changed nothing)
    index.retired = []
    meta = meta_of(index)

    def work() -> None:
        os.makedirs(folder, exist_ok=True)
        for segment in segments:
            if segment.entry is None:
                segment.entry = save(folder, segment)
                segment.hashes = None  # checked at a reopen only, from the file
        write_manifest(folder, meta, [segment.entry for segment in segments], retired)

    await trio.to_thread.run_sync(work)
    index.named = [segment.entry["name"] for segment in segments]


def _drop_strays(index: Any) -> None:
    """A build the index meant to keep (``keep``) that finished after the index was let go (a
    drop or a rebuild purged its folder meanwhile): no manifest names its file, so delete it (the
    mapping holds its descriptor), and the folder its write made again if that is all it held."""
    for segment in index.segments:
        run = getattr(segment.index, "run", segment.index)
        path = getattr(run, "path", None)
        if path and segment.entry is None:
            with contextlib.suppress(OSError):
                os.unlink(path)
            run.path = None
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))  # only if empty


async def reopen(index: Any) -> list[str]:
    """Map ``index``'s kept segments (an empty index, before its restore), every row dead until
    the restore confirms it (vector_reopen.py); returns why segments were refused."""
    if index.persist is None or not os.path.isdir(index.persist):
        return []
    loaded, refused = await trio.to_thread.run_sync(load, index.persist, meta_of(index))
    for entry, run, ids, hashes in loaded:
        segment = Segment(run, ids, run)
        segment.dead, segment.hashes, segment.entry = Dead.every(len(ids)), hashes, entry
        index.adopt(segment)
    index.named = None if refused else [entry["name"] for entry, *_ in loaded]
    if refused:  # a manifest without them
        await persist(index)
    return refused
