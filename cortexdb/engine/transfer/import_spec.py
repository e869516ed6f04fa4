"""An import request, checked (``parse_request``: 400/422 before anything is spooled), and an
import's status as the API answers it (``status_wire``); ``imports.py`` runs the job."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidBody, UnsupportedFormat
from ..temporal import try_parse_rfc3339
from .mapping import RecordError, template_root

ORDERINGS = ("strict_temporal", "batch_throughput")
ON_ERROR = ("skip", "abort")
REQUEST_FIELDS = {"scope_template", "format", "options", "source"}
COUNTS = ("read", "written", "replayed", "skipped", "failed")


def parse_request(request: Any) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(request, dict):
        raise InvalidBody("the import request must be a JSON object")
    unknown = request.keys() - REQUEST_FIELDS
    if unknown:
        raise InvalidBody(f"{sorted(unknown)[0]} is not a field of an import request",
                          details={"field": sorted(unknown)[0]})  # fmt: skip
    template = request.get("scope_template")
    if not isinstance(template, str) or not template.strip():
        raise InvalidBody("scope_template is required: the scope (or scope pattern, e.g. org:acme/user:{user_id}) "
                          "the records go to", details={"field": "scope_template"})  # fmt: skip
    try:
        root = template_root(template)
    except RecordError as exc:
        raise InvalidBody(exc.detail, details={"field": "scope_template"}) from None
    options = request.get("options") or {}
    if not isinstance(options, dict):
        raise InvalidBody("options must be an object", details={"field": "options"})
    options = {"ordering": "strict_temporal", "on_error": "skip", **options}
    if options["ordering"] not in ORDERINGS:
        raise InvalidBody(f"options.ordering must be one of {list(ORDERINGS)}", details={"field": "options.ordering"})
    if options["on_error"] not in ON_ERROR:
        raise InvalidBody(f"options.on_error must be one of {list(ON_ERROR)}", details={"field": "options.on_error"})
    if options.get("observed_at") is not None and try_parse_rfc3339(str(options["observed_at"])) is None:
        raise InvalidBody("options.observed_at must be an RFC 3339 timestamp", details={"field": "options.observed_at"})
    return template.strip(), root, options


def check_declared(source: str, module: Any, found: str, declared: Any) -> str:
    if declared is None or declared == found or (declared in module.FORMATS and found in module.FORMATS
                                                  and getattr(module, "ANY_DECLARED", False)):  # fmt: skip
        return found
    if declared not in module.FORMATS:
        raise UnsupportedFormat(f"the {source} importer does not read the format {str(declared)[:80]!r}",
                                details={"format": str(declared)[:80], "known": list(module.FORMATS)})  # fmt: skip
    raise UnsupportedFormat(f"the file is {found}, not the declared {declared}",
                            details={"format": declared, "found": found, "known": list(module.FORMATS)})  # fmt: skip


def status_wire(record: dict[str, Any]) -> dict[str, Any]:
    params, progress = record["params"], record["progress"]
    return {"import_id": record["id"], "status": record["status"], "source": params["source"],
            "format": params["format"], "scope": record["scope"], "phase": record["phase"],
            "fraction_complete": record["fraction_complete"], "processed": progress.get("read", 0),
            "total": params.get("estimated_items"), "items": {name: progress.get(name, 0) for name in COUNTS},
            "errors": record.get("errors", []), "error": record["error"], "created_at": record["created_at"],
            "updated_at": record["updated_at"], "finished_at": record["finished_at"],
            "cancel_requested_at": record["cancel_requested_at"], "interruptions": record["interruptions"],
            "elapsed_ms": progress.get("elapsed_ms", 0)}  # fmt: skip
