"""The MCP memory server (``@modelcontextprotocol/server-memory``; tests/data/import/README.md §5):
its storage file ``memory.jsonl`` (``MEMORY_FILE_PATH``; older versions named it ``memory.json``,
same content), one compact JSON object per line:

    {"type":"entity","name":…,"entityType":…,"observations":[…]}
    {"type":"relation","from":…,"to":…,"relationType":…}

| MCP record                 | CortexDB                                                            |
|----------------------------|---------------------------------------------------------------------|
| entity observation         | ``imported`` text event ``"<name>: <observation>"`` (``_`` in the name read as a space, so a search for "Alice Moreau" finds it; the exact observation is in ``mcp_observation``), subject ``entity:<name>`` |
| entity ``entityType``      | ``imported`` triple ``(name, entity_type, entityType)`` (a fact)      |
| relation                   | ``imported`` triple ``(from, relationType, to)``, object an entity (a fact, not single-valued: the graph's relations all hold at once) |

The file has no timestamps, ids or provenance.  Every event is observed at ``options.observed_at``,
else at the import's time, and says so (``mcp_observed_at_assumed``).  Keys come from the
content only — ``mcp:obs`` + hash of (entity name, observation text), ``mcp:type`` + hash of
(name, type), ``mcp:rel`` + hash of the triple — and the items are ``replay_by_key``: a
re-import replays what an earlier one wrote (whatever time that one assumed) and writes only
what is new, observed at the new import's time (when it was first seen).  Corrections
accumulate in the source ("target 2:05", then "changed to 1:55"): both are imported, in file
order.  A relation whose endpoint has no entity line (the server allows it) is imported as
it is.  Lines of another ``type`` are skipped (the server drops them too); a line that is not
JSON, or an entity/relation without its fields, is reported with its line number.  Scope
template variables: ``{user_id}`` (``options.user_id``) only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from ....errors import UnsupportedFormat
from ..mapping import Item, RecordError, actor, digest, expand, failed, key

FORMATS = ("mcp_memory_jsonl",)
KEYS_NAME_SCOPE = True  # its idempotency keys already hash the target scope (or are the user's own: jsonl)
ACTOR = actor("app", "mcp_memory")
MAX_NAME = 1024  # a triple's subject/predicate (envelope schema)


def sniff(path: str) -> str:
    """The format when the first non-empty line is an entity or a relation (an empty file is an
    empty graph: the server writes nothing for one)."""
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                first = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise UnsupportedFormat("not an MCP memory file: its first line is not JSON",
                                        details={"format": None, "known": list(FORMATS)}) from None  # fmt: skip
            if isinstance(first, dict) and first.get("type") in ("entity", "relation"):
                return FORMATS[0]
            raise UnsupportedFormat("not an MCP memory file: its first line is not an entity or a relation",
                                    details={"format": None, "known": list(FORMATS)})  # fmt: skip
    return FORMATS[0]


def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    for number, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
            if not isinstance(record, dict):
                raise RecordError("invalid_record", "a line must be a JSON object")
            kind = record.get("type")
            if kind == "entity":
                envelopes = entity(record, options)
            elif kind == "relation":
                envelopes = [relation(record, options)]
            else:  # the server drops lines of another type when it loads the file
                yield Item(number)
                continue
        except orjson.JSONDecodeError as exc:
            yield failed(number, "line", RecordError("invalid_json", str(exc)))
            continue
        except RecordError as exc:
            yield failed(number, "line", exc)
            continue
        for envelope in envelopes:
            yield Item(number, envelope=envelope, replay_by_key=True)


def _name(record: dict[str, Any], field: str, what: str) -> str:
    value = record.get(field)
    if not isinstance(value, str) or not value.strip():
        raise RecordError("invalid_record", f"an MCP {what} needs a non-empty string {field!r}")
    if len(value) > MAX_NAME:
        raise RecordError("invalid_record", f"the {what}'s {field!r} is longer than {MAX_NAME} characters")
    return value


def _context(options: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    return {"observed_at": options.get("observed_at") or options["imported_at"],
            "labels": {**labels, "mcp_observed_at_assumed": True}}  # fmt: skip


def _subject(name: str) -> dict[str, Any]:
    return {"id": actor("entity", name)["id"], "type": "entity"}


def entity(record: dict[str, Any], options: dict[str, Any]) -> list[dict[str, Any]]:
    name = _name(record, "name", "entity")
    kind = _name(record, "entityType", "entity")
    observations = record.get("observations", [])
    if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
        raise RecordError("invalid_record", "an MCP entity's observations must be a list of strings")
    scope = expand(options["template"], {"user_id": options.get("user_id")})
    found = {"mcp_entity": name, "mcp_entity_type": kind}
    out = [{
        "scope": scope, "observed_actor": ACTOR, "subject": _subject(name), "modality": "imported",
        "content": {"kind": "triple", "subject": name, "predicate": "entity_type", "object": kind},
        "context": _context(options, {**found, "mcp_record": "entity"}),
        "idempotency_key": key("mcp", "type", digest(scope, name, kind)),
    }]  # fmt: skip
    for index, text in enumerate(observations):
        if not text.strip():
            continue
        out.append({
            "scope": scope, "observed_actor": ACTOR, "subject": _subject(name), "modality": "imported",
            "content": {"kind": "text", "text": f"{name.replace('_', ' ')}: {text}"},
            "context": _context(options, {**found, "mcp_record": "observation", "mcp_observation": text,
                                          "mcp_observation_index": index}),
            "idempotency_key": key("mcp", "obs", digest(scope, name, text)),
        })  # fmt: skip
    return out


def relation(record: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    source, target = _name(record, "from", "relation"), _name(record, "to", "relation")
    predicate = _name(record, "relationType", "relation")
    scope = expand(options["template"], {"user_id": options.get("user_id")})
    return {
        "scope": scope, "observed_actor": ACTOR,
        "subject": _subject(source), "modality": "imported",
        "content": {"kind": "triple", "subject": source, "predicate": predicate, "object": target,
                    "datatype": "entity", "single_valued": False},
        "context": _context(options, {"mcp_record": "relation", "mcp_from": source, "mcp_to": target,
                                      "mcp_relation_type": predicate}),
        "idempotency_key": key("mcp", "rel", digest(scope, source, predicate, target)),
    }  # fmt: skip
