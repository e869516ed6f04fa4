"""The one JSON codec: orjson on the hot paths, the standard library as the fallback.

orjson encodes an event record in ~1 µs against ~15 µs for ``json`` (measured; see
docs/decisions.md), which is the difference between meeting the capture target or not.  It
refuses a few things the standard library accepts (integers beyond 64 bits, non-string keys);
those values fall back to ``json`` so no valid input is ever rejected.

Integers are exact end to end.  orjson *decodes* an integer beyond the 64-bit range as the nearest
double, so a document the fallback encoder wrote starts with one space (``_EXACT``: still plain
JSON to any reader) and ``decode`` sends such a document to ``json``, which keeps every digit.
``decode_request`` finds such integers in a request body the same way (a run of 19+ digits).

``decode`` reads stored data and is lenient; request bodies go through ``decode_request``, which
is strict (RFC 8259 and I-JSON, RFC 7493): UTF-8 only, no lone surrogates, no ``NaN`` or
``Infinity``, no number that overflows a double, and a nesting limit.  Every refusal is a
400 ``INVALID_BODY`` with ``details.reason`` (and ``details.field`` or ``details.position`` where
known).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import orjson

from ..errors import InvalidBody

_STDLIB = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_STDLIB_SORTED = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=str
)
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS  # encode_canonical's
_EXACT = b" "  # leads a document written by the fallback encoder (see the module docstring)
_EXACT_MARKS = (_EXACT, " ")
EXACT_MARKS = _EXACT_MARKS  # a stored document that starts with one of these is read by the stdlib

DEFAULT_MAX_DEPTH = 64  # ServerSettings.max_json_depth / CORTEX_MAX_JSON_DEPTH
MAX_DEPTH_CEILING = 512  # the stdlib parser recurses; beyond ~900 levels it raises RecursionError
# Any run of 19 digits (a byte string of only "0" after _DIGITS maps digits to "0"): it may be
# an integer orjson would round (beyond -2**63 .. 2**64-1), so the body is parsed by ``json``.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"0" * 19


def encode(data: Any) -> bytes:
    """Compact UTF-8 JSON."""
    try:
        return orjson.dumps(data, default=str)
    except TypeError:
        return _EXACT + _STDLIB.encode(data).encode()


def encode_canonical(data: Any) -> bytes:
    """Compact UTF-8 JSON with sorted keys (for hashing request bodies)."""
    try:
        return orjson.dumps(data, default=str, option=_SORTED)
    except TypeError:
        return _STDLIB_SORTED.encode(data).encode()


def canonical_digest(data: Any, strict: bool = False) -> str:
    """sha256 (hex) of ``encode_canonical(data)``: a request body's hash (idempotency keys).
    ``strict``: what orjson refuses raises its ``JSONEncodeError`` instead of falling back to the
    standard library's encoder (the envelope's storability check reads the refusal)."""
    if strict:
        return hashlib.sha256(orjson.dumps(data, default=str, option=_SORTED)).hexdigest()
    return hashlib.sha256(encode_canonical(data)).hexdigest()


def decode(raw: bytes | str) -> Any:
    if raw[:1] in _EXACT_MARKS:  # written by the fallback encoder: keep big integers exact
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)  # e.g. integers too long for a double


# -- request bodies --------------------------------------------------------------------------


def decode_request(raw: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse a request body strictly; raise ``InvalidBody`` (400) with ``details.reason``:

    ``not_utf8``, ``lone_surrogate``, ``non_finite_number`` (``NaN``, ``Infinity``, ``1e400``),
    ``number_too_long`` (an integer of more than 4300 digits, Python's conversion limit),
    ``too_deep`` (arrays and objects nested more than ``max_depth`` levels) or ``malformed``.
    ``details.field`` (``$``, ``content.data.x[2]``) names the place of the first two kinds.
    """
    if isinstance(raw, str):
        try:
            raw = raw.encode()
        except UnicodeEncodeError as exc:
            _reject(
                "lone_surrogate", "the body contains a lone UTF-16 surrogate", position=exc.start
            )
    if _LONG_NUMBER in raw.translate(_DIGITS):
        return _decode_exact(raw, max_depth)
    try:
        value = orjson.loads(raw)  # refuses non-UTF-8, lone surrogates, NaN, 1e400, 1024 levels
    except orjson.JSONDecodeError:
        return _decode_exact(raw, max_depth)  # says why (or accepts what orjson alone refuses)
    # no deeper than it has containers: count them (C speed) before walking the tree
    if raw.count(b"[") + raw.count(b"{") > max_depth and _deeper_than(value, max_depth):
        _locate(value, max_depth, strings=False)
    return value


def _reject(reason: str, message: str, **details: Any) -> None:
    raise InvalidBody(message, details={"reason": reason, **details})


def _decode_exact(raw: bytes, max_depth: int) -> Any:
    """The standard library's parser with every rule checked (the slow path, exact integers)."""
    try:
        text = raw.decode("utf-8")  # strict: invalid bytes and UTF-8-encoded surrogates fail
    except UnicodeDecodeError as exc:
        _reject("not_utf8", f"the body is not UTF-8 (invalid byte at offset {exc.start})",
                position=exc.start)  # fmt: skip
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                           parse_int=_int)  # fmt: skip
    except RecursionError:
        _reject("too_deep", f"the body nests arrays and objects more than {max_depth} levels deep",
                limit=max_depth)  # fmt: skip
    except json.JSONDecodeError as exc:
        _reject("malformed", f"malformed JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                position=exc.pos)  # fmt: skip
    escapes = "\\u" in text  # a lone surrogate can only come from a \uXXXX escape
    if _deeper_than(value, max_depth) or (escapes and _has_lone_surrogate(value)):
        _locate(value, max_depth, strings=escapes)
    return value


def _no_constant(name: str) -> None:
    _reject("non_finite_number", f"{name} is not a JSON number; send null or a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        _reject("non_finite_number", f"the number {text[:40]} is beyond the range of a double")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # Python refuses to convert more than 4300 digits (CVE-2020-10735)
        _reject("number_too_long", f"an integer of {len(text)} digits is too long (at most 4300)")


def _deeper_than(value: Any, max_depth: int) -> bool:
    """Whether arrays and objects nest more than ``max_depth`` levels (breadth first)."""
    level = [value] if type(value) is dict or type(value) is list else []
    for _ in range(max_depth):
        level = [child for node in level for child in (node.values() if type(node) is dict else node)
                 if type(child) is dict or type(child) is list]  # fmt: skip
        if not level:
            return False
    return bool(level)


def _surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is str:
            if _surrogate(node):
                return True
        elif type(node) is dict:
            if any(_surrogate(key) for key in node):
                return True
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return False


def first_fault(value: Any, max_depth: int, *, strings: bool = True) -> tuple[str, str] | None:
    """The first ``(reason, path)`` in document order: ``too_deep`` (a container nested more than
    ``max_depth`` levels; a reference cycle is infinitely deep) or, with ``strings``,
    ``lone_surrogate`` (a string or key that no UTF-8 can carry).  For error paths: it builds
    every path it visits."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 1)]
    while stack:
        node, path, depth = stack.pop()
        if type(node) is str:
            if strings and _surrogate(node):
                return "lone_surrogate", path
            continue
        if isinstance(node, dict):
            children = []
            for key, child in node.items():
                if strings and type(key) is str and _surrogate(key):
                    return "lone_surrogate", path
                children.append((child, _join(path, key), depth + 1))
        elif isinstance(node, list | tuple):
            children = [(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(node)]
        else:
            continue
        if depth > max_depth:
            return "too_deep", path
        stack.extend(reversed(children))
    return None


def _locate(value: Any, max_depth: int, *, strings: bool) -> None:
    fault = first_fault(value, max_depth, strings=strings)
    if fault is None:
        raise AssertionError("_locate found no fault")  # callers only call it when there is one
    reason, path = fault
    if reason == "too_deep":
        _reject("too_deep", f"{path}: arrays and objects nest more than {max_depth} levels deep",
                field=path, limit=max_depth)  # fmt: skip
    _reject("lone_surrogate", f"{path}: a string or key holds a lone UTF-16 surrogate", field=path)


def _join(path: str, key: Any) -> str:
    key = (key if type(key) is str else str(key))[:64]
    if _surrogate(key):  # the path goes into an error body, which must encode
        key = key.encode("utf-8", "backslashreplace").decode()
    return key if path == "$" else f"{path}.{key}"
