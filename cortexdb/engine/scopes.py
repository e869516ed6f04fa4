"""Scope paths (reference §3.4, Appendix B): grammar, canonical form, ancestry.

A scope is ``type:id`` segments joined by ``/``.  The canonical form drops surrounding
whitespace and one trailing ``/``; everything else must already match the grammar exactly
(types are lowercase, ids are URL-safe).  Errors name the offending segment.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import InvalidScopeGrammar

MAX_SEGMENTS = 32
MAX_LENGTH = 4096
MAX_TYPE = 32
MAX_ID = 128

BUILTIN_TYPES = frozenset(
    {"org", "dept", "team", "app", "user", "agent", "service", "ws", "project", "global", "system"}
)

_TYPE = re.compile(r"[a-z][a-z0-9_]*")
_ID = re.compile(r"[A-Za-z0-9_\-]+")


def _fail(reason: str, path: str, segment: str | None = None, index: int | None = None):
    details: dict = {"scope": path[:256], "reason": reason}
    if segment is not None:
        details["segment"] = segment[:256]
        details["segment_index"] = index
    raise InvalidScopeGrammar(f"invalid scope path: {reason}", details=details)


def canonical_scope(path: str) -> str:
    """Validate ``path`` and return its canonical form, or raise ``INVALID_SCOPE_GRAMMAR``."""
    if not isinstance(path, str):  # before the cache: a list or an object is not hashable
        _fail("scope must be a string", repr(path)[:256])
    return _canonical_scope(path)


@lru_cache(maxsize=65536)
def _canonical_scope(path: str) -> str:
    text = path.strip()
    if text.endswith("/") and len(text) > 1:
        text = text[:-1]
    if not text:
        _fail("scope is empty", path)
    if len(text) > MAX_LENGTH:
        _fail(f"scope is longer than {MAX_LENGTH} characters", path)
    segments = text.split("/")
    if len(segments) > MAX_SEGMENTS:
        _fail(f"scope has {len(segments)} segments; at most {MAX_SEGMENTS} are allowed", path)
    for index, segment in enumerate(segments):
        kind, sep, ident = segment.partition(":")
        if not sep:
            _fail("segment is not of the form type:id", path, segment, index)
        if not _TYPE.fullmatch(kind):
            _fail("segment type must match [a-z][a-z0-9_]*", path, segment, index)
        if len(kind) > MAX_TYPE:
            _fail(f"segment type is longer than {MAX_TYPE} characters", path, segment, index)
        if not _ID.fullmatch(ident):
            _fail("segment id must match [A-Za-z0-9_-]+", path, segment, index)
        if len(ident) > MAX_ID:
            _fail(f"segment id is longer than {MAX_ID} characters", path, segment, index)
    return text


def ancestors(scope: str) -> list[str]:
    """Proper ancestors of a canonical scope, nearest first."""
    segments = scope.split("/")
    return ["/".join(segments[:i]) for i in range(len(segments) - 1, 0, -1)]


def segments(scope: str) -> list[tuple[str, str]]:
    return [tuple(segment.split(":", 1)) for segment in scope.split("/")]  # type: ignore[misc]


def is_within(scope: str, root: str) -> bool:
    """True when ``scope`` equals ``root`` or lies below it."""
    return scope == root or scope.startswith(root + "/")


def depth(scope: str) -> int:
    return scope.count("/") + 1
