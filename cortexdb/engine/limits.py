"""Per-event size limits, checked before anything is written (``max_event_text_bytes``).

The check runs on the raw envelope, ahead of validation: an oversize text is 413
``PAYLOAD_TOO_LARGE`` whatever else is wrong with the body, and nothing of it reaches the WAL.
Shapes that validation rejects (a non-object content, a non-string text) are left to it.
"""

from __future__ import annotations

from typing import Any

from ..errors import PayloadTooLarge
from . import jsoncodec


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a lone surrogate, only an embedded caller's, counts 3)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def check_event_size(envelope: Any, limit: int, prefix: str = "") -> None:
    """Refuse an envelope whose ``content.text``, triple ``content.object`` or json
    ``content.data`` (as encoded) is larger than ``limit`` bytes of UTF-8."""
    content = envelope.get("content") if isinstance(envelope, dict) else None
    if not isinstance(content, dict):
        return
    for name in ("text", "object"):
        value = content.get(name)
        # a string of at most limit / 4 characters cannot exceed limit bytes: no encoding needed
        if isinstance(value, str) and len(value) > limit // 4:
            size = utf8_size(value)
            if size > limit:
                raise PayloadTooLarge(f"{prefix}content.{name}", limit, size)
    data = content.get("data")
    if isinstance(data, dict | list) and data:
        try:
            size = len(jsoncodec.encode(data))
        except Exception:  # not JSON at all: validation or capture says so
            return
        if size > limit:
            raise PayloadTooLarge(f"{prefix}content.data", limit, size)
