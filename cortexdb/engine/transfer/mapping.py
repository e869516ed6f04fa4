"""What every importer shares: a source's records as ``Item``s, scope templates, timestamps of
every shape the sources write, flattened labels and stable idempotency keys.

An importer is a generator of ``Item``: an envelope to write (``envelope``), or a record that
could not be mapped (``error``, with the ``position`` a person finds it at: the 1-based line of a
line-delimited file, or the 0-based index of a record in a JSON document, named by ``unit``).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from ..scopes import canonical_scope
from ..temporal import format_ts

_VAR = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]+")
MAX_KEY = 64  # an idempotency key's length (envelope schema)


@attrs.define(eq=False)  # not frozen: its __init__ is one store a field (a frozen one costs ~3 µs)
class Item:
    position: int
    unit: str = "line"  # line (1-based) | record (0-based index in the document)
    envelope: dict[str, Any] | None = None
    error: str | None = None  # an error code (invalid_json, invalid_record, ...)
    detail: str = ""
    # the importer assumed part of the record (a time the source lacks: ``options.observed_at``
    # or the import's): a key an earlier import wrote is a replay whatever that import assumed
    replay_by_key: bool = False
    # the event id the source gave the record (a line of our JSONL export): its ``preceded_by``
    # links are translated to our ids (``links.py``)
    source_id: str | None = None
    # as an import window holds it (``window.py``): its scope as written (taken out of the
    # envelope) and its ``strict_temporal`` sort key
    scope: Any = None
    order: Any = None

    def where(self) -> dict[str, Any]:
        return {self.unit: self.position}


class RecordError(Exception):
    """A record that cannot be mapped: becomes an ``Item`` with ``error``."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def failed(position: int, unit: str, exc: RecordError) -> Item:
    return Item(position, unit, error=exc.code, detail=exc.detail[:500])


# -- scopes ------------------------------------------------------------------------------------
def template_root(template: str) -> str:
    """The scope every expansion of ``template`` lies within: its segments before the first
    variable (``org:acme/user:{user_id}`` -> ``org:acme``)."""
    segments = template.strip().strip("/").split("/")
    fixed = []
    for segment in segments:
        if "{" in segment:
            break
        fixed.append(segment)
    if not fixed:
        raise RecordError("invalid_template", "the scope template must start with a fixed segment")
    return canonical_scope("/".join(fixed))


def expand(template: str, values: Mapping[str, Any]) -> str:
    """``template`` with each ``{name}`` replaced by ``values[name]`` made a safe segment id."""

    def one(match: re.Match) -> str:
        value = values.get(match.group(1))
        if value in (None, ""):
            raise RecordError("template_variable_missing",
                              f"the record has no value for {{{match.group(1)}}} of the scope template")  # fmt: skip
        return _UNSAFE.sub("_", str(value))[:128]

    return canonical_scope(_VAR.sub(one, template))


def variables(template: str) -> list[str]:
    return _VAR.findall(template)


# -- time ---------------------------------------------------------------------------------------
def timestamp(value: Any) -> str | None:
    """RFC 3339 (UTC) of an ISO-8601 string (an offset kept as given; naive is UTC), epoch
    seconds (int or float), or None; a value that is none of these is a ``RecordError``."""
    if value is None or value == "":
        return None
    if type(value) is str:  # the common case first: the C parser reads every ISO form sources write
        global _last_timestamp
        last = _last_timestamp  # one read of a tuple: another import's thread may replace it
        if value == last[0]:  # created_at == updated_at, a file's one assumed time, ...
            return last[1]
        try:
            parsed = dt.datetime.fromisoformat(value)
            text = _utc_as_written(value) or _utc_text(parsed)
        except (ValueError, OverflowError):
            text = _slow_timestamp(value)
        _last_timestamp = (value, text)
        return text
    if isinstance(value, bool):
        raise RecordError("invalid_timestamp", f"not a timestamp: {value!r}")
    if isinstance(value, int | float):
        try:
            return format_ts(dt.datetime.fromtimestamp(float(value), dt.UTC))
        except (ValueError, OverflowError, OSError):
            raise RecordError("invalid_timestamp", f"not a timestamp: {value!r}") from None
    if isinstance(value, str):
        return _slow_timestamp(value)
    raise RecordError("invalid_timestamp", f"not a timestamp: {str(value)[:64]!r}")


_last_timestamp: tuple[Any, Any] = (None, None)


def _utc_text(parsed: dt.datetime) -> str:
    """``format_ts(parsed)`` (naive is UTC), without its per-field formatting: ``isoformat`` is C."""
    if parsed.tzinfo is not None and parsed.utcoffset():
        parsed = parsed.astimezone(dt.UTC)
    text = parsed.isoformat() if parsed.tzinfo is None else parsed.isoformat()[:-6]  # less "+00:00"
    return (text.rstrip("0") if parsed.microsecond else text) + "Z"


def _utc_as_written(value: str) -> str | None:
    """The RFC 3339 form of a valid ``YYYY-MM-DD[T ]HH:MM:SS[.f{1,6}][Z|+00:00]`` by slicing it
    (what most sources write; ``fromisoformat`` has checked it), else None."""
    size = len(value)
    if size < 19 or value[4] != "-" or value[7] != "-" or value[13] != ":" or value[16] != ":" or value[10] not in "T ":
        return None
    if value[-1] == "Z":
        size -= 1
    elif value.endswith("+00:00"):
        size -= 6
    elif not value[-1].isdigit() or value[-3] == ":" and size > 22:  # another offset (+05:30)
        return None
    fraction = value[19:size]
    if fraction and (fraction[0] != "." or not fraction[1:].isdigit() or len(fraction) > 7):
        return None
    fraction = fraction.rstrip("0")
    return f"{value[:10]}T{value[11:19]}{'' if fraction == '.' else fraction}Z"


def _slow_timestamp(value: str) -> str:
    """A string ``fromisoformat`` refused as it is: spaces around it, ..."""
    text = value.strip().replace(" ", "T", 1) if len(value) > 10 else value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return _utc_text(dt.datetime.fromisoformat(text))
    except (ValueError, OverflowError):
        raise RecordError("invalid_timestamp", f"not an ISO-8601 timestamp: {value[:64]!r}") from None


def first_time(*values: Any) -> str | None:
    for value in values:
        found = timestamp(value)
        if found is not None:
            return found
    return None


# -- labels and keys -----------------------------------------------------------------------------
def scalar(value: Any) -> Any:
    """A label value: scalars as they are, anything else as compact JSON (the labels object
    holds scalars only)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def labels(prefix: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}{name}": scalar(value) for name, value in fields.items() if value is not None}


def key_of(source: str, ident: Any, tail: str) -> str:
    """``key(source, ident, tail)`` when ``tail`` is a hex digest (safe as it is): one format."""
    text = f"{source}:{_safe(ident)}:{tail}"
    return text if len(text) <= MAX_KEY else key(source, ident, tail)


def key(source: str, *parts: Any) -> str:
    """A stable idempotency key (≤ 64 chars): ``source:<ids>``, hashed when too long."""
    text = f"{source}:" + ":".join([_safe(p) for p in parts])
    if len(text) <= MAX_KEY:
        return text
    if len(source) > MAX_KEY - 2:  # the slice below would be negative: a key too long to be valid
        return f"{source[: MAX_KEY - 18]}:{hashlib.sha256(text.encode()).hexdigest()[:17]}"
    digest = hashlib.sha256(text.encode()).hexdigest()[: MAX_KEY - len(source) - 2]
    return f"{source}:{digest}"


def _safe(part: Any) -> str:
    text = part if type(part) is str else str(part)
    if text.isascii() and text.replace("-", "").replace("_", "").isalnum():  # a uuid, a hash: as it is
        return text
    return _UNSAFE.sub("_", text)


def scoped_key(value: str, scope: str) -> str:
    """An importer's key bound to the scope it is written to: the same source record imported
    into two scopes is two events (idempotency keys are per tenant and caller, not per scope)."""
    text = f"{value}~{_scope_tag(scope)}"
    if len(text) <= MAX_KEY:
        return text
    source = value.split(":", 1)[0]
    # ``key(source, digest(value, scope))`` inlined (a Mem0 key with its uuid is always too long
    # to bind as it is): the digest of two strings is the same without the sort option, and a
    # hex digest is safe as it is
    tail = hashlib.sha256(orjson.dumps((value, scope))).hexdigest()[:16]
    return f"{source}:{tail}" if len(source) + 17 <= MAX_KEY else key(source, tail)


@functools.lru_cache(maxsize=4096)
def _scope_tag(scope: str) -> str:
    return digest(scope)[:8]


def digest(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def actor(kind: str, ident: Any, session: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {"id": _actor_id(kind, ident) if type(ident) is str else _make_actor_id(kind, ident),
                             "type": kind}  # fmt: skip
    if session not in (None, ""):
        value["session"] = str(session)[:256]
    return value


def actor_id(kind: str, ident: Any) -> str:
    """``actor(kind, ident)["id"]`` without the dict."""
    return _actor_id(kind, ident) if type(ident) is str else _make_actor_id(kind, ident)


def _make_actor_id(kind: str, ident: Any) -> str:
    return f"{kind}:{_UNSAFE.sub('_', str(ident))[:128]}"


_actor_id = functools.lru_cache(maxsize=4096)(_make_actor_id)  # a file's records name few actors
