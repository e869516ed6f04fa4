"""What an export job is asked and says (reference §8.12; ``exports.py`` runs it): the request
checked (``parse_request``: 400/422 before anything is read), the status (``status_wire``) and the
file an exporter writes into (``Sink``: counts bytes, stops at the export's limit)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...errors import InvalidBody, MissingRequiredField, UnsupportedFormat
from ..jobs import COMPLETED
from ..policy import capabilities as cap
from ..scopes import canonical_scope
from ..temporal import format_ts, parse_rfc3339

CAPABILITY = {"jsonl": cap.EXPORT_FORMAT_JSONL, "mem0": cap.EXPORT_FORMAT_MEM0, "zep": cap.EXPORT_FORMAT_ZEP,
              "letta": cap.EXPORT_FORMAT_LETTA}  # fmt: skip
LAYERS = ("events", "facts", "beliefs", "episodes")
VIEWS = ("descend", "local")
DESTINATIONS = ("file", "inline", "url")
REQUEST_FIELDS = {"scope", "format", "layers", "as_of", "view", "destination"}


class TooLarge(Exception):
    """Raised into the exporter when the file would pass its limit (the job fails 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class Sink:
    """The export file as an exporter writes it: counts bytes and stops at ``limit``."""

    def __init__(self, fh: Any, limit: int) -> None:
        self._fh = fh
        self.limit = limit
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise TooLarge(self.limit)
        return self._fh.write(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._fh.flush()


def zero() -> dict[str, int]:
    """The counts an export's progress starts from."""
    return {**dict.fromkeys(LAYERS, 0), "withheld": 0, "written": 0, "skipped": 0, "size_bytes": 0}


def parse_request(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise InvalidBody("the export request must be a JSON object")
    unknown = request.keys() - REQUEST_FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidBody(f"{name} is not a field of an export request", details={"field": name})
    scope = request.get("scope")
    if scope is None:
        raise MissingRequiredField("scope is required: the scope to export", details={"field": "scope"})
    if not isinstance(scope, str):
        raise InvalidBody("scope must be a scope path", details={"field": "scope"})
    target = request.get("format")
    if target is None:
        raise MissingRequiredField(f"format is required: one of {list(CAPABILITY)}", details={"field": "format"})
    if not isinstance(target, str) or target not in CAPABILITY:
        raise UnsupportedFormat(f"format must be one of {list(CAPABILITY)}, not {str(target)[:80]!r}",
                                details={"field": "format", "format": str(target)[:80], "known": list(CAPABILITY)})  # fmt: skip
    layers = request.get("layers")
    if layers is None:
        layers = list(LAYERS)
    if not isinstance(layers, list) or not layers or any(layer not in LAYERS for layer in layers):
        extra = " (understanding is not built: it holds nothing to export)" if isinstance(layers, list) and \
            "understanding" in layers else ""  # fmt: skip
        raise InvalidBody(f"layers must be a non-empty array drawn from {list(LAYERS)}{extra}",
                          details={"field": "layers"})  # fmt: skip
    as_of = request.get("as_of")
    if as_of is not None:
        if not isinstance(as_of, str):
            raise InvalidBody("as_of must be an RFC 3339 timestamp", details={"field": "as_of"})
        as_of = format_ts(parse_rfc3339(as_of, field="as_of"))
    view = request.get("view", "descend")
    if view not in VIEWS:
        raise InvalidBody(f"view must be one of {list(VIEWS)}", details={"field": "view"})
    destination = request.get("destination") or {}
    if not isinstance(destination, dict):
        raise InvalidBody("destination must be an object", details={"field": "destination"})
    kind = destination.get("kind", "file")
    if kind not in DESTINATIONS:
        raise InvalidBody(f"destination.kind must be one of {list(DESTINATIONS)}", details={"field": "destination.kind"})
    if kind == "url":
        raise InvalidBody("destination.kind \"url\" is not available: this server has no delivery to object stores or "
                          "URLs; ask for \"file\" (then GET /v1/export/{export_id}/download) or \"inline\"",
                          details={"field": "destination.kind"})  # fmt: skip
    return {"scope": canonical_scope(scope), "format": target, "layers": [x for x in LAYERS if x in layers],
            "as_of": as_of, "view": view, "destination": kind}  # fmt: skip


def status_wire(record: dict[str, Any], expires: dt.datetime | None, now: dt.datetime) -> dict[str, Any]:
    params, progress = record["params"], record["progress"]
    done = record["status"] == COMPLETED
    expired = done and expires is not None and expires <= now
    return {"export_id": record["id"], "status": record["status"], "format": params["format"],
            "format_version": params["format_version"], "scope": record["scope"], "view": params["view"],
            "scopes": params["scopes"], "scopes_skipped": record.get("scopes_skipped", []),
            "layers": params["layers"], "as_of": params["as_of"], "destination": {"kind": params["destination"]},
            "phase": record["phase"], "fraction_complete": record["fraction_complete"],
            "records": {layer: progress.get(layer, 0) for layer in LAYERS}, "withheld": progress.get("withheld", 0),
            "written": progress.get("written", 0), "skipped": progress.get("skipped", 0),
            "size_bytes": progress.get("size_bytes", 0), "estimated_records": params["estimated_records"],
            "estimated_size_bytes": params["estimated_size_bytes"], "extension": params["extension"],
            "download": f"/v1/export/{record['id']}/download" if done and not expired else None,
            "expires_at": format_ts(expires) if expires is not None and done else None, "expired": expired,
            "error": record["error"], "caller": record["caller"], "created_at": record["created_at"],
            "updated_at": record["updated_at"], "finished_at": record["finished_at"],
            "cancel_requested_at": record["cancel_requested_at"], "interruptions": record["interruptions"],
            "elapsed_ms": progress.get("elapsed_ms", 0)}  # fmt: skip
