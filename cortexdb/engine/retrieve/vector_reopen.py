"""A restore's use of the sealed vector segments kept under the data dir (vector_files.py).

``Reopen.load`` maps each layer's kept segments, every row dead; the restore (stages/index.py)
then offers each stored vector it would index (``offer``): a vector whose id a kept segment
holds is checked against the row's hash, a batch at a time (``check``: the stored vectors
encoded as the index stores them, hashed together), and the row is revived when they are equal;
otherwise the vector goes to the delta, as on a rebuild, and the row stays dead.  ``finish``
drops the segments left with no live row and rewrites (without their dead rows) those holding a
row whose record has no stored vector to index any more (forgotten, erased, deleted, cancelled):
such a vector's bytes do not stay in a file under the data dir.  docs/decisions.md, "Sealed
vector segments kept across a reopen".
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import numpy as np

from . import vector_files
from .vector_hash import encoded, row_hashes
from .vector_ids import encode

BATCH = 4096  # stored vectors checked together


class Reopen:
    def __init__(self, layered: Any) -> None:
        self.layered = layered
        self._pending: list[tuple[Any, str, np.ndarray, list]] = []
        self.counts = {"segments": 0, "refused": 0, "revived": 0, "changed": 0, "rewritten": 0}

    async def load(self) -> None:
        """Map the kept segments of every layer found under the scope's folder."""
        root = self.layered.persist
        if root is None or not os.path.isdir(root):
            return
        for name in sorted(os.listdir(root)):
            if not re.fullmatch(r"[a-z0-9]{1,32}", name):  # not a layer's folder: never mapped
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                continue
            index = self.layered.layer(name + "_")
            self.counts["refused"] += len(await vector_files.reopen(index))
            self.counts["segments"] += len(index.segments)

    def offer(self, doc_id: str, vector: np.ndarray) -> bool:
        """Whether a kept segment holds ``doc_id``: then the vector waits for ``check``."""
        index = self.layered.layer_holding(doc_id)
        if index is None:
            return False
        key, found = encode(doc_id), []
        for segment in reversed(index.segments):  # the newest first
            if segment.hashes is not None:
                position = segment.ids.find(key)
                if position >= 0 and position in segment.dead:
                    found.append((segment, position))
        if not found:
            return False
        self._pending.append((index, doc_id, vector, found))
        return True

    @property
    def full(self) -> bool:
        return len(self._pending) >= BATCH

    def check(self) -> None:
        """Revive the rows whose stored vector is the one they hold; index the others anew."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        index = pending[0][0]
        rows, scales = encoded(np.stack([np.asarray(p[2], dtype=np.float32) for p in pending]), index.dtype)
        hashes = row_hashes(rows, scales).tolist()
        for (index, doc_id, vector, found), wanted in zip(pending, hashes, strict=True):
            live = doc_id in index
            for segment, position in found:
                if not live and int(segment.hashes[position]) == wanted:
                    segment.dead.revive(position)
                    live = True
                    self.counts["revived"] += 1
                else:  # an older copy, or a vector changed since the segment was kept
                    segment.stale.add(position)
            if not live:
                self.counts["changed"] += 1
                index.add(doc_id, vector)

    async def finish(self) -> None:
        """After the last stored vector: check what waits; drop emptied segments; rewrite those
        holding the row of a record gone; forget the row hashes."""
        self.check()
        for index in self.layered.parts():
            gone = False
            for segment in index.segments:
                if segment.hashes is None:
                    continue
                unconfirmed = segment.dead.mask.copy()
                unconfirmed[list(segment.stale)] = False
                gone = gone or bool(unconfirmed.any()) or segment.dead.count == len(segment.ids)
                segment.hashes, segment.stale = None, set()
            if gone:
                self.counts["rewritten"] += await index.rewrite()
