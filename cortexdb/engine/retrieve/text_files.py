"""Sealed text segments kept under the data dir between runs, with their vocabulary and manifest.

A ``TextIndex`` made with ``persist`` (a folder of its own: ``text-segments/<scope>/<layer>``)
writes each segment it maps (a seal's, a merge's, a compaction's: ``MergePlan`` with ``keep``) to
a named file there, ``<name>.seg`` (the segment's arrays as text_segments.py maps them, each
slot's text hash and tie-break key among them), ``fsync``-ed in the worker thread that builds it.
The segments refer to terms by id; the vocabulary grows by appending until a compaction renumbers
it, so it is kept as *chunks*, ``<name>.voc`` (the terms of ids ``first..first + count - 1``),
a chunk written when a manifest needs terms no chunk holds (and, past ``VOCAB_CHUNKS_MAX``
chunks, one chunk of them all instead).  ``manifest.json`` names the segments (contiguous from
slot 0, in order, with each file's size, BLAKE2b digest and arrays' layout), the vocabulary
chunks, the layer's id prefixes and whether its ids are keyed, and what the files were built with
(the format and a fingerprint of the tokenizer).  It is written to a temporary file,
``fsync``-ed and renamed over the old one (then the folder is ``fsync``-ed); only then are the
files of the segments and chunks it no longer names deleted.  A crash leaves the old manifest or
the new one, each naming complete files only, and files named by neither, which the next open
deletes.

At open (``load``) every named file's size and digest must match the manifest; a vocabulary that
does not, or a manifest of other settings, refuses everything; a segment that does not refuses it
and every later one (slots stay contiguous); refused and unnamed files are deleted.  What is
mapped is only a candidate: text_reopen.py confirms each slot against the stored document.
docs/decisions.md, "Sealed text segments kept across a reopen".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from typing import Any

import numpy as np
import trio

from ..durable import file_digest, read_json, replace_json
from . import text_segments
from .tokens import tokenize

MANIFEST = "manifest.json"

#: held while a manifest (and its vocabulary chunk) is written in a worker thread, and while a
#: scope's kept folder is purged: a write that checked ``index.persist`` before a purge cannot
#: recreate the folder after it (one lock for the process: both are short and rare)
FOLDERS = threading.Lock()

VERSION = 1
VOCAB_CHUNKS_MAX = 32  # chunks a manifest lists before they are written again as one
# words whose tokens (stop words, stemming, digits, case folding) change with the tokenizer
_PROBE = "The Runners were running 3 marathons in Zürich, Ønsker 42nd-streets' cafés; item_17 [fact_01a2]"


def fingerprint() -> str:
    return hashlib.sha256("\x1f".join(tokenize(_PROBE)).encode()).hexdigest()[:16]


def meta() -> dict:
    return {"version": VERSION, "tokens": fingerprint()}


def remove(folder: str, name: str) -> None:
    for suffix in (".seg", ".voc"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name + suffix))


def _write_chunk(folder: str, blob: bytes, ends: np.ndarray, first: int) -> dict:
    name = uuid.uuid4().hex
    path = os.path.join(folder, f"{name}.voc")
    with open(path, "wb") as handle:
        np.savez(handle, blob=np.frombuffer(blob, dtype=np.uint8), ends=ends)
        handle.flush()
        os.fsync(handle.fileno())
    return {"name": name, "first": first, "count": len(ends), "bytes": os.path.getsize(path), "blake2b": file_digest(path)}


def write_manifest(folder: str, body: dict, retired: list[str]) -> None:
    """Name ``body``'s segments and chunks, atomically, then delete the ``retired`` files."""
    replace_json(folder, MANIFEST, {**meta(), **body})
    for name in retired:
        remove(folder, name)


def kept_prefix(index: Any) -> list:
    """The index's segments with a kept file, contiguous from slot 0 (a segment still in memory,
    and the ones after it, wait for the next manifest)."""
    out, base = [], 0
    for segment in index.segments:
        if segment.entry is None or segment.base != base:
            break
        out.append(segment)
        base += segment.count
    return out


async def persist(index: Any) -> None:
    """After ``index``'s segments changed: name the kept ones in a new manifest (with the
    vocabulary chunks they need), then delete the files it no longer names.  One at a time."""
    if index.persist_lock is None:
        index.persist_lock = trio.Lock()
    async with index.persist_lock:
        await _persist(index)


async def _persist(index: Any) -> None:
    folder = index.persist
    if folder is None:
        return
    segments = kept_prefix(index)
    names = [segment.entry["name"] for segment in segments]
    vocab = index.vocab
    retired = list(index.retired)
    chunks = list(index.kept_vocab)
    if index.kept_vocab_of is not vocab:  # a compaction renumbered the terms
        retired += [chunk["name"] for chunk in chunks]
        chunks = []
    covered = sum(chunk["count"] for chunk in chunks)
    needed = max((int(segment.terms[-1]) + 1 for segment in segments if len(segment.terms)), default=0)
    if names == index.named and not retired and needed <= covered:
        return  # the manifest says this already
    new_chunk = None
    if needed > covered:
        if len(chunks) >= VOCAB_CHUNKS_MAX:
            retired += [chunk["name"] for chunk in chunks]
            chunks, covered = [], 0
        new_chunk = (*vocab.frozen_terms(covered, vocab.frozen), covered)
    body = {"segments": [segment.entry for segment in segments], "prefixes": sorted(index.prefixes),
            "keyed": bool(index.keyed), "layer": index.layer}  # fmt: skip
    index.retired = []

    def work() -> list[dict]:
        with FOLDERS:  # a purge (``LayeredTextIndex.detach``) waits, or finds this done
            if index.persist is None:  # let go meanwhile (a drop or a rebuild may have purged the folder)
                return chunks
            os.makedirs(folder, exist_ok=True)
            written = [*chunks, _write_chunk(folder, *new_chunk)] if new_chunk is not None else chunks
            write_manifest(folder, {**body, "vocabulary": written}, retired)
            return written

    try:
        written = await trio.to_thread.run_sync(work)
    except BaseException:
        index.retired = retired + index.retired  # deleted by the next manifest that succeeds
        index.named = None
        raise
    index.kept_vocab, index.kept_vocab_of, index.named = written, vocab, names


def drop_strays(index: Any, segment: Any) -> None:
    """A kept segment's file built for an index let go (a release, a drop, a rebuild) or for a
    segment a compaction replaced meanwhile: no manifest names it, so delete it (its mapping
    stays valid) and its folder if that is all it held."""
    path = getattr(segment, "path", None)
    if path is None or (index.persist is not None and segment in index.segments):
        return
    with contextlib.suppress(OSError):
        os.unlink(path)
    if index.persist is None:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path))  # only if empty


class Loaded:
    """What ``load`` mapped: segments (contiguous from slot 0), the vocabulary's bytes and term
    ends, the layer's prefixes and keyedness, and why files were refused."""

    def __init__(self) -> None:
        self.segments: list = []
        self.blob, self.ends = b"", np.zeros(0, dtype=np.uint64)
        self.prefixes: list[str] = []
        self.keyed = False
        self.layer: str | None = None  # the layer's id prefix, as the manifest names it
        self.refused: list[str] = []
        self.chunks: list[dict] = []


def _check(path: str, entry: dict) -> None:
    if os.path.getsize(path) != int(entry["bytes"]) or file_digest(path) != entry["blake2b"]:
        raise ValueError(f"{os.path.basename(path)} differs from the manifest")


def load(folder: str) -> Loaded:
    """The manifest's segments and vocabulary that check out (in a worker thread); files the
    manifest does not name, and refused ones, are deleted."""
    out = Loaded()
    manifest, unreadable = read_json(os.path.join(folder, MANIFEST))
    if unreadable:
        out.refused.append(unreadable)
    if isinstance(manifest, dict) and any(manifest.get(k) != v for k, v in meta().items()):
        out.refused.append("manifest of other settings")
        manifest = None
    if manifest is not None and not isinstance(manifest, dict):
        out.refused.append("manifest unreadable")
        manifest = None
    named: set[str] = set()
    if manifest is not None:
        entries = _load_vocabulary(folder, manifest, out)
        base = 0
        for entry in entries:
            try:
                if int(entry["base"]) != base:
                    raise ValueError("segments not contiguous")
                path = os.path.join(folder, f"{entry['name']}.seg")
                _check(path, entry)
                segment = text_segments.Segment.opened(path, entry)
                _valid(segment, len(out.ends))
            except (OSError, ValueError, KeyError, TypeError) as error:
                out.refused.append(f"{entry.get('name') if isinstance(entry, dict) else entry}: {error}")
                break  # the later slots need this one: rebuilt from the stored documents too
            segment.path = path
            out.segments.append(segment)
            base += segment.count
        named = {segment.entry["name"] for segment in out.segments} | {chunk["name"] for chunk in out.chunks}
    for file in os.listdir(folder):
        if file != MANIFEST and file.split(".", 1)[0] not in named:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, file))
    return out


def _load_vocabulary(folder: str, manifest: dict, out: Loaded) -> list:
    """The manifest's vocabulary chunks into ``out`` (all of them, in order, or none) and its
    segment entries (none when the vocabulary is refused)."""
    try:
        blobs, ends, total = [], [], 0
        for chunk in manifest["vocabulary"]:
            if int(chunk["first"]) != total:
                raise ValueError("vocabulary chunks out of order")
            path = os.path.join(folder, f"{chunk['name']}.voc")
            _check(path, chunk)
            with np.load(path, allow_pickle=False) as arrays:
                blob, chunk_ends = arrays["blob"].tobytes(), arrays["ends"].astype(np.uint64)
            if len(chunk_ends) != int(chunk["count"]) or (len(chunk_ends) and int(chunk_ends[-1]) != len(blob)):
                raise ValueError("vocabulary chunk of another size")
            ends.append(chunk_ends + np.uint64(sum(map(len, blobs))))
            blobs.append(blob)
            total += len(chunk_ends)
        out.blob = b"".join(blobs)
        out.ends = np.concatenate(ends) if ends else np.zeros(0, dtype=np.uint64)
        out.chunks = list(manifest["vocabulary"])
        out.prefixes = [str(prefix) for prefix in manifest["prefixes"]]
        out.keyed = bool(manifest["keyed"])
        layer = manifest.get("layer")
        out.layer = layer if isinstance(layer, str) else None
        return list(manifest["segments"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        out.refused.append(f"vocabulary: {error}")
        out.chunks = []
        return []


def _valid(segment: Any, terms: int) -> None:
    """A mapped segment's arrays agree with one another and with the vocabulary's size."""
    count = segment.count
    if len(segment.fwd_start) != count + 1 or len(segment.id_start) != count + 1:
        raise ValueError("segment of another size")
    if len(segment.doc_hash) != count or len(segment.doc_key) != count:
        raise ValueError("segment of another size")
    if len(segment.starts) != len(segment.terms) + 1 or int(segment.starts[-1]) != len(segment.slots):
        raise ValueError("postings of another size")
    if len(segment.tfs) != len(segment.slots) or int(segment.fwd_start[-1]) != len(segment.fwd_terms):
        raise ValueError("postings of another size")
    if len(segment.terms) and int(segment.terms[-1]) >= terms:
        raise ValueError("a term the vocabulary does not hold")
    if len(segment.fwd_terms) and int(np.max(segment.fwd_terms)) >= terms:
        raise ValueError("a term the vocabulary does not hold")
    if len(segment.slots) and not (segment.base <= int(np.min(segment.slots)) and int(np.max(segment.slots)) < segment.base + count):
        raise ValueError("a posting outside the segment")
    if int(segment.id_start[-1]) != len(segment.id_blob):
        raise ValueError("ids of another size")
