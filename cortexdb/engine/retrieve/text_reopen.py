"""A restore's use of the sealed text segments kept under the data dir (text_files.py).

``TextReopen.load`` maps each layer's kept segments and vocabulary into its (empty) ``TextIndex``,
every slot dead.  ``confirm`` then takes the documents the restore would index: a document whose
id a kept slot holds *and* whose text hashes (``text_segments.text_hash``, 64 bits of BLAKE2b) to
the hash that slot was indexed with revives that slot, with no tokenising; every other document
is returned, to be indexed as on a rebuild.  The statistics BM25 reads (live documents, lengths,
document frequencies) are then computed from the confirmed slots' postings (``settle_kept``),
which are exactly those adding their texts would make.  ``finish`` compacts a layer that still
holds a slot whose record is gone (forgotten, erased, deleted, cancelled, no longer indexed) or
whose text changed (a redaction, a re-index), so that the old text's terms and id do not stay in
a file under the data dir, and writes each layer's manifest.  docs/decisions.md, "Sealed text segments kept across a reopen".
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from typing import Any

import trio

from . import text_files
from .layered import layer_folder
from .text_segments import Vocabulary, text_hash

CHECKPOINT_DOCUMENTS = 2048  # documents confirmed between two checkpoints


class TextReopen:
    def __init__(self, layered: Any) -> None:
        self.layered = layered
        self.adopted: list[Any] = []
        self.counts = {"segments": 0, "refused": 0, "confirmed": 0, "tokenised": 0, "gone": 0, "changed": 0, "compacted": 0}

    async def load(self) -> None:
        """Map the kept segments of every layer found under the scope's folder."""
        root = self.layered.persist
        if root is None or not os.path.isdir(root):
            return
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if not re.fullmatch(r"[a-z0-9]{1,32}", name) or not os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
                continue
            loaded = await trio.to_thread.run_sync(text_files.load, path)
            self.counts["refused"] += len(loaded.refused)
            if not loaded.segments or loaded.layer is None or layer_folder(loaded.layer) != name:
                # nothing to adopt, or a manifest that does not name the layer this folder is for
                # (its layer is found by the prefix it records, not by the folder's name, which
                # is hashed for a prefix that is not plain): the folder goes; the layer writes anew
                if loaded.segments:
                    self.counts["refused"] += 1
                await trio.to_thread.run_sync(functools.partial(shutil.rmtree, path, ignore_errors=True))
                continue
            index = self.layered.layer(loaded.layer)
            vocab = await trio.to_thread.run_sync(Vocabulary.loaded, loaded.blob, loaded.ends)
            index.adopt(loaded.segments, vocab, loaded.prefixes, loaded.keyed)
            index.kept_vocab, index.kept_vocab_of = loaded.chunks, vocab
            index.named = None if loaded.refused else [s.entry["name"] for s in loaded.segments]
            self.adopted.append(index)
            self.counts["segments"] += len(loaded.segments)

    async def confirm(self, documents: dict[str, str]) -> dict[str, str]:
        """Revive the kept slots of ``documents`` whose text is the one they indexed; the
        documents to index anew (in their order)."""
        if not self.adopted:
            self.counts["tokenised"] = len(documents)
            return documents
        adopted = {id(index): index for index in self.adopted}
        offered: dict[int, list[str]] = {}
        for doc_id in documents:
            index = self.layered.layer_holding(doc_id)
            if index is not None and id(index) in adopted:
                offered.setdefault(id(index), []).append(doc_id)
        confirmed: set[str] = set()
        for key, ids in offered.items():
            index = adopted[key]
            for start in range(0, len(ids), CHECKPOINT_DOCUMENTS):
                chunk = ids[start : start + CHECKPOINT_DOCUMENTS]
                slots = index.kept_slots(chunk, [text_hash(documents[doc_id]) for doc_id in chunk])
                for doc_id, slot in zip(chunk, slots, strict=True):
                    if slot is not None:
                        index.confirm(slot)
                        confirmed.add(doc_id)
                await trio.lowlevel.checkpoint()
        self.counts["confirmed"] = len(confirmed)
        rest = {doc_id: text for doc_id, text in documents.items() if doc_id not in confirmed}
        for index in self.adopted:
            index.settle_kept()
        self.counts["tokenised"] = len(rest)
        return rest

    async def finish(self) -> None:
        """After the documents not confirmed were indexed: compact the layers holding a kept slot
        of a record gone or of a text changed since (or as many dead pairs as a removal would
        compact), map the compacted segment, and write every layer's manifest."""
        for index in self.adopted:
            gone, changed = index.unconfirmed_ids()
            self.counts["gone"] += len(gone)
            self.counts["changed"] += changed
            if gone or changed or index.compaction_due:
                index.compact()
                self.counts["compacted"] += 1
        for _ in range(64):  # a compacted layer's one segment, mapped (and any merge due)
            if not self.layered.needs_merge:
                break
            await self.layered.merge()
        await self.layered.persist_all()
