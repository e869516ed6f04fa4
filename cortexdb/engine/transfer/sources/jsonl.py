"""CortexDB JSONL (reference §15.5): one experience envelope per line, or the lines of our own
export (``{"record": "event", "envelope": {...}}``; derived-layer lines are skipped: the engine
derives them again).  An envelope without ``idempotency_key`` gets ``jsonl:<hash of it>``, so a
re-import does not duplicate it (two identical lines are one event)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from ..mapping import Item, RecordError, digest, failed, key

FORMATS = ("cortexdb_jsonl_v1",)
KEYS_NAME_SCOPE = True  # its idempotency keys already hash the target scope (or are the user's own: jsonl)


def sniff(path: str) -> str:
    return FORMATS[0]  # each line is judged on its own


def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    for number, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            yield Item(number, envelope=envelope_of(line))
        except RecordError as exc:
            yield failed(number, "line", exc)


def envelope_of(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordError("invalid_json", str(exc)) from None
    if not isinstance(value, dict):
        raise RecordError("invalid_envelope", "a line must be a JSON object")
    record = value.get("record")
    if record is not None:
        if record != "event":
            return None  # a derived record of an export: derived again from the events
        value = value.get("envelope")
        if not isinstance(value, dict):
            raise RecordError("invalid_envelope", "an event line of an export needs its envelope object")
    if value.get("idempotency_key") is None:
        value = {**value, "idempotency_key": key("jsonl", digest(value))}
    return value
