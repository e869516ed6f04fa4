"""Streaming JSON for the Letta importer (``letta.py``): a double-encoded document unescaped as
it is read, and a walk over ijson's events that builds or skips one value at a time."""

from __future__ import annotations

import re
from typing import Any, BinaryIO

import ijson

HEAD = 1 << 16  # bytes read at a time


_ESCAPE = re.compile(rb'\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\(.)|"',
                     re.S)  # fmt: skip
_SIMPLE = {b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t"}  # fmt: skip


def document(fh: BinaryIO) -> Any:
    """``fh`` from its start, or, when the file is a JSON string, the document inside it."""
    fh.seek(0)
    head = fh.read(4096)
    body = head.lstrip()
    if body[:1] == b'"':
        return Unquoted(fh, len(head) - len(body) + 1)
    fh.seek(0)
    return fh


class Unquoted:
    """A file-like view of the JSON text inside a JSON string, unescaped chunk by chunk (a
    chunk ends before any escape it might cut; a surrogate pair is never split)."""

    def __init__(self, fh: BinaryIO, start: int) -> None:
        fh.seek(start)
        self._fh = fh
        self._carry = b""
        self._done = False

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        while not self._done:
            raw = self._fh.read(size if size > 0 else HEAD)
            buf = self._carry + raw
            cut = _safe_end(buf) if raw else len(buf)
            out, consumed, ended = _unescape(buf[:cut], final=not raw)
            self._carry = buf[consumed:]
            if ended:
                self._done = True
            elif not raw:
                raise ijson.IncompleteJSONError("the JSON string holding the Agent File ends without its closing quote")  # fmt: skip
            if out:
                return out
        return b""


def _safe_end(buf: bytes) -> int:
    """Where ``buf`` may be cut: before the last run of backslashes if it is near the end."""
    at = buf.rfind(b"\\", max(0, len(buf) - 12))
    if at < 0:
        return len(buf)
    while at > 0 and buf[at - 1] == 0x5C:
        at -= 1
    return at


def _unescape(chunk: bytes, final: bool) -> tuple[bytes, int, bool]:
    """(the chunk unescaped up to the closing quote, bytes consumed, whether the string ended)."""
    out: list[bytes] = []
    last = 0
    for match in _ESCAPE.finditer(chunk):
        out.append(chunk[last : match.start()])
        if match.group(0) == b'"':
            return b"".join(out), match.start(), True
        if match.group(1):
            high, low = int(match.group(1), 16), int(match.group(2), 16)
            out.append(chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).encode())
        elif match.group(3):
            point = int(match.group(3), 16)
            if 0xD800 <= point <= 0xDBFF and match.end() == len(chunk) and not final:
                return b"".join(out), match.start(), False  # its pair is in the next chunk
            out.append(chr(point).encode("utf-8", "surrogatepass"))
        else:
            out.append(_SIMPLE.get(match.group(4), match.group(4)))
        last = match.end()
    out.append(chunk[last:])
    return b"".join(out), len(chunk), False


class Walk:
    def __init__(self, src: Any) -> None:
        self.events = ijson.parse(src, use_float=True)

    def value(self, event: str, value: Any) -> Any:
        """The whole value whose first event is ``(event, value)`` (consumes its events)."""
        if event not in ("start_map", "start_array"):
            return value
        builder = ijson.ObjectBuilder()
        builder.event(event, value)
        depth = 1
        for _prefix, ev, val in self.events:
            builder.event(ev, val)
            if ev in ("start_map", "start_array"):
                depth += 1
            elif ev in ("end_map", "end_array"):
                depth -= 1
                if depth == 0:
                    break
        return builder.value

    def count(self, event: str) -> int:
        """Skip the value whose first event is ``event``; the number of items it held."""
        if event not in ("start_map", "start_array"):
            return 0
        depth, items = 1, 0
        for _prefix, ev, _val in self.events:
            if depth == 1 and ev not in ("end_map", "end_array", "map_key"):
                items += 1
            if ev in ("start_map", "start_array"):
                depth += 1
            elif ev in ("end_map", "end_array"):
                depth -= 1
                if depth == 0:
                    break
        return items


def starts(event: str) -> bool:
    return event not in ("end_map", "end_array", "map_key")

