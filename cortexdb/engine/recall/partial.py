"""Saying a pack is incomplete (``_partial``), whoever finds out: ranking, or the context document."""

from __future__ import annotations

from typing import Any


def mark_partial(pack: dict[str, Any], reason: str) -> None:
    """The pack is incomplete: ``_partial`` on the pack (and in its diagnostics, when it has any);
    the first reason found stays."""
    for holder in (pack, pack.get("diagnostics")):
        if holder is not None and not holder.get("_partial_reason"):
            holder["_partial"], holder["_partial_reason"] = True, reason
