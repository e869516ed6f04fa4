"""Whether a Mem0 ``get_all`` document may hold graph ``relations``, without parsing it again.

``mem0.read`` reads ``results`` in one ijson pass; ``relations`` (after them in the document)
need a second pass over the whole file, which cost about as much as the first (~2 µs a record)
on a file without any: most dumps, the graph store being optional.  A byte scan tells the two
apart first (docs/decisions.md, "Mem0 import, session 30").
"""

from __future__ import annotations

from typing import BinaryIO

# A key ``"relations"`` as a file writes it: as it is, or with one of its letters (all in
# U+0061..U+0073) escaped, ``\u006.`` / ``\u007.`` (JSON's escape is a lowercase ``u`` and these
# hex digits have no case).  A file with none of these has no ``relations`` key at any depth.
RELATIONS_HINTS = (b'"relations"', b"\\u006", b"\\u007")
SCAN_CHUNK = 1 << 20


def may_name_relations(fh: BinaryIO) -> bool:
    """Whether the file may hold a ``relations`` key: a scan of its bytes, a chunk at a time,
    much cheaper than a second ijson pass over a file without one (most ``get_all`` dumps:
    the graph store is optional).  True errs on the side of that pass (the key inside a text,
    an escaped ASCII letter)."""
    fh.seek(0)
    tail = b""
    while chunk := fh.read(SCAN_CHUNK):
        window = tail + chunk
        if any(hint in window for hint in RELATIONS_HINTS):
            return True
        tail = window[-16:]
    return False
