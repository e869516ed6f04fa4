"""The ``graphiti_json`` exporter of ``sources/zep.py`` (which re-exports ``EXPORT_FORMATS`` and
``export``): the container of tests/data/import/zep/graphiti_graph.json, streamed through four
temporary files.  Imported records come back field by field from their ``zep_*`` labels; an
edge's ``valid_at``/``invalid_at`` come from the fact its event derived (so a later CortexDB
supersession shows as ``invalid_at``) and ``expired_at`` from the fact's ``recorded_to`` when Zep
gave none.  Other events become episodes and other facts edges between synthesised nodes (uuid5
of the CortexDB id).  Beliefs and CortexDB episodes have no Graphiti record (``skipped``).
"""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import orjson

from ....errors import UnsupportedFormat
from ..mapping import RecordError, timestamp

EXPORT_FORMATS = ("graphiti_json",)
NAMESPACE = uuid.UUID("8d4f6f0e-3c55-4a52-9a7e-6c0f2b1d9e41")  # uuid5 of CortexDB ids
_SAFE_GROUP = re.compile(r"[^A-Za-z0-9_-]+")

EPISODE_FIELDS = ("uuid", "name", "group_id", "labels", "created_at", "source", "source_description",
                  "content", "valid_at", "entity_edges", "episode_metadata")  # fmt: skip
NODE_FIELDS = ("uuid", "name", "group_id", "labels", "created_at", "summary", "attributes")
EDGE_FIELDS = ("uuid", "group_id", "source_node_uuid", "target_node_uuid", "created_at", "name", "fact",
               "episodes", "expired_at", "valid_at", "invalid_at", "reference_time", "attributes")  # fmt: skip
MENTION_FIELDS = ("uuid", "group_id", "source_node_uuid", "target_node_uuid", "created_at")
OUT_SECTIONS = ("episodes", "entity_nodes", "entity_edges", "episodic_edges")
CLOUD_EXTRA = ("role", "role_type", "thread_id", "processed", "metadata", "task_id")


class _Spool:
    """One output list, spooled to a temporary file as a line per record; a record written again
    under the same uuid (a newer version) replaces the earlier one when the list is copied out."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()
        self.last: dict[str, int] = {}
        self.count = 0

    def add(self, record: dict[str, Any], meta: Any = None) -> None:
        self.last[record["uuid"]] = self.count
        self.file.write(orjson.dumps([record, meta]) + b"\n")
        self.count += 1

    def lines(self) -> Iterator[tuple[dict[str, Any], Any]]:
        self.file.seek(0)
        for number, line in enumerate(self.file):
            record, meta = orjson.loads(line)
            if self.last.get(record["uuid"]) == number:
                yield record, meta


def export(records: Iterable[dict[str, Any]], out: BinaryIO, fmt: str, options: dict[str, Any]) -> dict[str, int]:
    if fmt not in EXPORT_FORMATS:
        raise UnsupportedFormat(f"the zep exporter does not write {str(fmt)[:40]!r}",
                                details={"format": str(fmt)[:40], "known": list(EXPORT_FORMATS)})  # fmt: skip
    spools = {name: _Spool() for name in OUT_SECTIONS}
    writer = _Writer(spools, options)
    try:
        for record in records:
            kind = record.get("record")
            if kind == "event":
                writer.event(record)
            elif kind == "fact":
                writer.fact(record)
            else:
                writer.skipped += 1  # beliefs and CortexDB episodes have no Graphiti record
        written = 0
        out.write(b"{")
        for index, name in enumerate(OUT_SECTIONS):
            out.write(b"%s\n  %s: [" % (b"," if index else b"", orjson.dumps(name)))
            lines = spools[name].lines()
            if name == "entity_edges":
                lines = ((writer.patch(rec, meta), meta) for rec, meta in lines)
            for number, (rec, _) in enumerate(lines):
                out.write(b"%s\n    %s" % (b"," if number else b"", orjson.dumps(rec)))
                written += 1
            out.write(b"\n  ]")
        out.write(b"\n}\n")
        duplicates = sum(spool.count - len(spool.last) for spool in spools.values())
        return {"written": written, "skipped": writer.skipped + duplicates}
    finally:
        for spool in spools.values():
            spool.file.close()


def _decode(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _same_instant(a: Any, b: Any) -> bool:
    try:
        return a is not None and b is not None and timestamp(a) == timestamp(b)
    except RecordError:
        return False


class _Writer:
    """The exporter's per-entity state: which events are Zep edges and nodes, the node uuid of
    each entity name, the synthesised nodes written, and the fact each edge event derived."""

    def __init__(self, spools: dict[str, _Spool], options: dict[str, Any]) -> None:
        self.spools = spools
        self.options = options
        self.skipped = 0
        self.edge_events: set[str] = set()
        self.node_events: set[str] = set()
        self.episode_uuid: dict[str, str] = {}  # event id -> Zep episode uuid (for native edges)
        self.node_by_name: dict[str, str] = {}
        self.nodes_written: set[str] = set()
        self.validity: dict[str, dict[str, Any]] = {}  # edge event id -> the fact it derived

    # -- events -------------------------------------------------------------------------------
    def event(self, event: dict[str, Any]) -> None:
        context = event.get("context") or {}
        raw = context.get("labels")
        lab = raw if isinstance(raw, dict) else {}
        kind = lab.get("zep_record")
        group = lab.get("zep_group_id") or lab.get("zep_user_id") or lab.get("zep_thread_user_id") or self._group(event)
        content = event.get("content") or {}
        if kind == "entity_node" and lab.get("zep_uuid"):
            self.node_events.add(event["id"])
            name = lab.get("zep_name") or (content.get("data") or {}).get("subject")
            self.node_by_name.setdefault(str(name).casefold(), lab["zep_uuid"])
            self.nodes_written.add(lab["zep_uuid"])
            self.spools["entity_nodes"].add({
                "uuid": lab["zep_uuid"], "name": name, "group_id": group,
                "labels": _decode(lab.get("zep_labels"), ["Entity"]), "created_at": lab.get("zep_created_at"),
                "summary": "" if lab.get("zep_summary_empty") else content.get("text", ""),
                "attributes": _decode(lab.get("zep_attributes"), {})})  # fmt: skip
        elif kind == "entity_edge" and lab.get("zep_uuid"):
            self.edge_events.add(event["id"])
            self.spools["entity_edges"].add({
                "uuid": lab["zep_uuid"], "group_id": group, "source_node_uuid": lab.get("zep_source_node_uuid"),
                "target_node_uuid": lab.get("zep_target_node_uuid"), "created_at": lab.get("zep_created_at"),
                "name": lab.get("zep_name", content.get("predicate")), "fact": content.get("text", ""),
                "episodes": _decode(lab.get("zep_episodes"), []), "expired_at": lab.get("zep_expired_at"),
                "valid_at": lab.get("zep_valid_at"), "invalid_at": lab.get("zep_invalid_at"),
                "reference_time": lab.get("zep_reference_time"),
                "attributes": _decode(lab.get("zep_attributes"), {})},
                {"event": event["id"], "default_from": content.get("valid_from") or context.get("observed_at")})  # fmt: skip
        elif kind == "episodic_edge" and lab.get("zep_uuid"):
            self.spools["episodic_edges"].add({
                "uuid": lab["zep_uuid"], "group_id": group, "source_node_uuid": lab.get("zep_source_node_uuid"),
                "target_node_uuid": lab.get("zep_target_node_uuid"), "created_at": lab.get("zep_created_at")})  # fmt: skip
        elif kind in ("episode", "message") and lab.get("zep_uuid"):
            self.episode_uuid[event["id"]] = lab["zep_uuid"]
            self.spools["episodes"].add(self._zep_episode(event, lab, group, kind))
        else:
            self.spools["episodes"].add(self._native_episode(event, group))

    def _zep_episode(self, event: dict[str, Any], lab: dict[str, Any], group: str, kind: str) -> dict[str, Any]:
        context, content = event.get("context") or {}, event.get("content") or {}
        text = "" if lab.get("zep_content_empty") else content.get("text", "")
        metadata = _decode(lab.get("zep_episode_metadata"), None)
        cloud = {name: _decode(lab.get(f"zep_{name}"), None) for name in CLOUD_EXTRA if f"zep_{name}" in lab}
        if cloud:  # a Zep Cloud record: what Graphiti has no field for
            metadata = {**(metadata or {}), **cloud}
        if kind == "message":
            speaker = lab.get("zep_name") or lab.get("zep_role") or "user"
            return {"uuid": lab["zep_uuid"], "name": lab["zep_uuid"], "group_id": group, "labels": [],
                    "created_at": lab.get("zep_created_at"), "source": "message", "source_description": "zep thread",
                    "content": f"{speaker}: {text}", "valid_at": lab.get("zep_created_at") or context.get("observed_at"),
                    "entity_edges": [], "episode_metadata": metadata}  # fmt: skip
        return {"uuid": lab["zep_uuid"], "name": lab.get("zep_name", lab["zep_uuid"]), "group_id": group,
                "labels": _decode(lab.get("zep_labels"), []), "created_at": lab.get("zep_created_at"),
                "source": lab.get("zep_source", "text"), "source_description": lab.get("zep_source_description", ""),
                "content": text, "valid_at": lab.get("zep_valid_at") or context.get("observed_at"),
                "entity_edges": _decode(lab.get("zep_entity_edges"), []), "episode_metadata": metadata}  # fmt: skip

    def _native_episode(self, event: dict[str, Any], group: str) -> dict[str, Any]:
        context, content = event.get("context") or {}, event.get("content") or {}
        kind = content.get("kind")
        if kind == "message":
            who = str(event.get("observed_actor", {}).get("id") or event.get("actor") or "user").split(":", 1)[-1]
            text, source = f"{who}: {content.get('text', '')}", "message"
        elif kind == "json":
            text, source = orjson.dumps(content.get("data")).decode(), "json"
        elif kind == "triple":
            text, source = content.get("text") or f"{content.get('subject')} {content.get('predicate')} {content.get('object')}", "text"  # fmt: skip
        else:
            text, source = str(content.get("text") or content.get("blob_id") or ""), "text"
        return {"uuid": self._uuid(event["id"]), "name": event["id"], "group_id": group, "labels": [],
                "created_at": context.get("recorded_at"), "source": source,
                "source_description": f"cortexdb {event.get('modality', 'event')}", "content": text,
                "valid_at": context.get("observed_at"), "entity_edges": [],
                "episode_metadata": {"cortexdb_event_id": event["id"], "scope": event.get("scope")}}  # fmt: skip

    # -- facts --------------------------------------------------------------------------------
    def fact(self, fact: dict[str, Any]) -> None:
        supports = fact.get("supports") or []
        first = supports[0] if supports else None
        if first in self.edge_events:
            self.validity[first] = {k: fact.get(k) for k in ("valid_from", "valid_to", "recorded_to")}
            return
        if first in self.node_events:
            self.skipped += 1  # an attribute of a Zep node: exported on the node
            return
        group = self._group(fact)
        source = self._node(fact.get("subject") or {}, group, fact.get("recorded_from"))
        target = self._node(fact.get("object") or {}, group, fact.get("recorded_from"))
        obj = fact.get("object") or {}
        attributes: dict[str, Any] = {"cortexdb_fact_id": fact.get("id"), "confidence": fact.get("confidence")}
        if fact.get("polarity") == -1:
            attributes["negated"] = True
        subject_name = (fact.get("subject") or {}).get("name")
        object_text = obj.get("name") if obj.get("type") != "literal" else obj.get("value")
        self.spools["entity_edges"].add({
            "uuid": self._uuid(fact["id"]), "group_id": group, "source_node_uuid": source, "target_node_uuid": target,
            "created_at": fact.get("recorded_from"), "name": str(fact.get("predicate", "")).upper(),
            "fact": f"{subject_name} {str(fact.get('predicate', '')).replace('_', ' ')} {object_text}",
            "episodes": [self.episode_uuid.get(e) or self._uuid(e) for e in supports],
            "expired_at": fact.get("recorded_to"), "valid_at": fact.get("valid_from"),
            "invalid_at": fact.get("valid_to"), "reference_time": fact.get("valid_from"),
            "attributes": attributes})  # fmt: skip

    def _node(self, term: dict[str, Any], group: str, when: Any) -> str:
        if term.get("type") == "literal":
            name, ident = str(term.get("value")), f"literal:{term.get('value')}"
        else:
            name, ident = str(term.get("name") or term.get("id")), str(term.get("id"))
        found = self.node_by_name.get(name.casefold())
        if found is not None:
            return found
        node_uuid = self._uuid(ident)
        self.node_by_name[name.casefold()] = node_uuid
        if node_uuid not in self.nodes_written:
            self.nodes_written.add(node_uuid)
            self.spools["entity_nodes"].add({"uuid": node_uuid, "name": name, "group_id": group, "labels": ["Entity"],
                                             "created_at": when, "summary": "", "attributes": {}})  # fmt: skip
        return node_uuid

    def patch(self, record: dict[str, Any], meta: Any) -> dict[str, Any]:
        """An imported edge's window from the fact its event derived: the source's values where
        the fact agrees (as written), CortexDB's where it knows better."""
        fact = self.validity.get(meta["event"]) if isinstance(meta, dict) else None
        if fact is None:
            return record
        start, end = fact.get("valid_from"), fact.get("valid_to")
        if record["valid_at"] is None and _same_instant(start, meta.get("default_from")):
            pass  # Zep had no valid_at: CortexDB's is the default it was given
        elif not _same_instant(start, record["valid_at"]):
            record["valid_at"] = start
        if end is None:
            record["invalid_at"] = None
        elif not _same_instant(end, record["invalid_at"]):
            record["invalid_at"] = end
        if record["expired_at"] is None and fact.get("recorded_to") is not None:
            record["expired_at"] = fact["recorded_to"]
        return record

    def _group(self, item: dict[str, Any]) -> str:
        if self.options.get("group_id"):
            return str(self.options["group_id"])
        last = str(item.get("scope") or "default").rsplit("/", 1)[-1]
        return _SAFE_GROUP.sub("_", last.split(":", 1)[-1]) or "default"

    @staticmethod
    def _uuid(ident: str) -> str:
        return str(uuid.uuid5(NAMESPACE, str(ident)))
