"""Opaque page cursors: the one encoding (DESIGN §1; reference §6.4).

A cursor is unpadded base64url of compact JSON, e.g. ``{"after": "<hex of the last key>"}`` for
a layer read (``storage.table.Table.page``) or ``{"i": 1, "c": ...}`` for a multi-scope view
(the server).  Whoever issues a cursor validates what it decodes to.  Pure.
"""

from __future__ import annotations

import base64
from typing import Any

from . import jsoncodec


def encode(data: Any) -> str:
    return base64.urlsafe_b64encode(jsoncodec.encode(data)).decode().rstrip("=")


def decode(text: str, *, max_depth: int | None = None) -> Any:
    """What ``encode`` made of a cursor, or None when ``text`` is not a cursor at all.  With
    ``max_depth`` the JSON is read with the request-body rules (strict, that nesting limit)."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if max_depth is None:
            return jsoncodec.decode(raw)
        return jsoncodec.decode_request(raw, max_depth=max_depth)
    except Exception:  # not base64, not UTF-8, not JSON, too deep: not a cursor of ours
        return None
