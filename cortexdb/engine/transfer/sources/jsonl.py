"""CortexDB JSONL (reference §15.5): one experience envelope per line, or the lines of our own
export (``{"record": "event", "envelope": {...}}``; derived-layer lines are skipped: the engine
derives them again; their ``preceded_by`` links become our ids: ``links.py``).  An envelope without ``idempotency_key`` gets ``jsonl:<hash of it>``, so a
re-import does not duplicate it (two identical lines are one event)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from ..mapping import Item, RecordError, digest, failed, key

FORMATS = ("cortexdb_jsonl_v1",)
SOURCE_IDS = True  # an export's event lines name their source event: preceded_by is translated (links.py)
KEYS_NAME_SCOPE = True  # its idempotency keys already hash the target scope (or are the user's own: jsonl)


def sniff(path: str) -> str:
    return FORMATS[0]  # each line is judged on its own


def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    for number, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            envelope, source_id = envelope_of(line)
            yield Item(number, envelope=envelope, source_id=source_id)
        except RecordError as exc:
            yield failed(number, "line", exc)


def envelope_of(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The line's envelope (None: a derived record of an export) and, on an event line of our
    export, the exporting engine's id of the event (its ``preceded_by`` links are translated)."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordError("invalid_json", str(exc)) from None
    if not isinstance(value, dict):
        raise RecordError("invalid_envelope", "a line must be a JSON object")
    record, source_id = value.get("record"), None
    if record is not None:
        if record != "event":
            return None, None  # a derived record of an export: derived again from the events
        source_id = value.get("id") if isinstance(value.get("id"), str) else None
        value = value.get("envelope")
        if not isinstance(value, dict):
            raise RecordError("invalid_envelope", "an event line of an export needs its envelope object")
    if value.get("idempotency_key") is None:
        value = {**value, "idempotency_key": key("jsonl", digest(value))}
    return value, source_id


# -- export ------------------------------------------------------------------------------------
# Our lossless JSONL (docs/import-export.md, "Export"): a header line, then one line per record,
# in the order the export framework hands them (events, facts, beliefs, episodes).  An event line
# carries its envelope (what the importer above writes again) beside what this engine recorded
# about it; a derived record's line is exactly its wire form, both time axes and provenance
# (``supports``, ``derives``) included.
EXPORT_FORMATS = FORMATS
EVENT_PROVENANCE = ("id", "scope", "recorded_at", "wal_offset", "caller", "tenant_id", "derives")


def export(records: Iterator[dict[str, Any]], out: BinaryIO, fmt: str, options: dict[str, Any]) -> dict[str, int]:
    header = {"record": "export", "format": fmt, "scope": options.get("scope"), "scopes": options.get("scopes"),
              "view": options.get("view"), "layers": options.get("layers"), "as_of": options.get("as_of")}  # fmt: skip
    out.write(orjson.dumps(header) + b"\n")
    written = 0
    for record in records:
        line = event_line(record) if record["record"] == "event" else record
        out.write(orjson.dumps(line) + b"\n")
        written += 1
    return {"written": written, "skipped": 0}


def event_line(record: dict[str, Any]) -> dict[str, Any]:
    """``{"record": "event", <what this engine recorded>, "envelope": {...}}``: the envelope is
    the event as written (without ``recorded_at``, which the importing engine sets).  An event
    written without an idempotency key gets the one the importer would give its envelope
    (``jsonl:<hash>``), so importing the file twice, or exporting it again, changes nothing."""
    context = {name: value for name, value in record["context"].items() if name != "recorded_at"}
    envelope: dict[str, Any] = {"scope": record["scope"], "observed_actor": record["observed_actor"],
                                "subject": record["subject"], "modality": record["modality"],
                                "content": record["content"], "context": context}  # fmt: skip
    if record.get("directives"):
        envelope["directives"] = record["directives"]
    envelope["idempotency_key"] = record.get("idempotency_key") or key("jsonl", digest(envelope))
    line: dict[str, Any] = {"record": "event"}
    for name in EVENT_PROVENANCE:
        line[name] = record["context"]["recorded_at"] if name == "recorded_at" else record.get(name)
    line["envelope"] = envelope
    return line
