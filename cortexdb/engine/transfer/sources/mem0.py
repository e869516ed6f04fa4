"""Mem0 (reference §15.1; tests/data/import/README.md §1).  Every shape Mem0 lists memories in:

| format               | file                                                            |
|----------------------|-----------------------------------------------------------------|
| ``mem0_v1_list``     | a bare array (Platform ``GET /v1/memories/``, ``output_format=v1.0``) |
| ``mem0_results``     | ``{"results": [...], "relations"?: [...]}`` (OSS ``get_all``)       |
| ``mem0_page``        | ``{"count", "next", "previous", "results"}`` (Platform v3 page)     |
| ``mem0_history``     | ``{memory_id: [history rows]}`` (OSS ``history()`` per id)          |
| ``mem0_export_v3``   | one ``get_all`` item per line (the reference's name for a JSONL dump) |

A memory becomes an ``imported`` text event: ``created_at`` is its ``observed_at`` (Mem0 has no
other event time), ``updated_at`` (else ``created_at``) its ``source_recorded_at``; every field
the mapping names is kept in ``mem0_*`` labels (non-scalars as JSON), the raw timestamps too (so
an export gives them back as written).  The key is ``mem0:<id>:<hash of updated_at, text>``: an
updated memory is a new event, a re-import of the same version a replay.  Graph ``relations``
become ``triple`` events (facts with the edge label as predicate), observed at
``options.observed_at``, else the latest time of the file's memories (they carry no time; a
stable choice, so a re-import replays them).  History rows are events of
their own (``mem0_event`` ADD/UPDATE/DELETE); a DELETE row keeps the deleted text but asks for no
extraction (``directives.extract: []``).  Scope template variables: ``{user_id}``,
``{agent_id}``, ``{run_id}`` (Platform's ``session_id``), ``{app_id}``.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson
import orjson

from ....errors import UnsupportedFormat
from ..mapping import (
    Item,
    RecordError,
    actor,
    actor_id,
    digest,
    expand,
    failed,
    key,
    key_of,
    labels,
    scalar,
    timestamp,
)
from . import mem0_fields
from .mem0_categories import categories_label, categories_of
from .mem0_fields import LABELLED as LABELLED  # the fields it keeps (tests, exports read them here)
from .mem0_fields import SCALARS, labelled
from .mem0_scan import may_name_relations

# every envelope ``memory``, ``edge`` and ``history`` build names only fields of the envelope
# (constants below; a source's own names go into ``labels``, which are open): not walked again
SHAPED = True
FORMATS = ("mem0_v1_list", "mem0_results", "mem0_page", "mem0_history", "mem0_export_v3")
PAGE_KEYS = {"count", "next", "previous"}


def sniff(path: str) -> str:
    with open(path, "rb") as fh:
        head = fh.read(1 << 16).lstrip()
        if head[:1] == b"[":
            return "mem0_v1_list"
        if head[:1] != b"{":
            raise UnsupportedFormat("not a Mem0 export: neither a JSON array nor an object", details={"format": None})
        first_line = head.split(b"\n", 1)[0]
        try:
            if "memory" in orjson.loads(first_line):
                return "mem0_export_v3"
        except orjson.JSONDecodeError:
            pass
        fh.seek(0)
        events = ijson.parse(fh)
        try:
            next(events)
            _, event, first = next(events)
            after = next(events)[1] if event == "map_key" else None
        except (ijson.JSONError, StopIteration):
            raise UnsupportedFormat("not a Mem0 export: malformed JSON", details={"format": None}) from None
    if event == "map_key" and first in PAGE_KEYS:
        return "mem0_page"
    if event == "map_key" and first in ("results", "relations"):
        return "mem0_results"
    if event == "map_key" and after == "start_array" and _history_row(path, first):
        return "mem0_history"
    raise UnsupportedFormat(f"not a Mem0 export this importer knows (first key {str(first)[:40]!r})",
                            details={"format": None, "known": list(FORMATS)})  # fmt: skip


def _history_row(path: str, first: str) -> bool:
    """Whether the first list of the object holds Mem0 history rows (``memory_id``, ``event``)."""
    with open(path, "rb") as fh:
        try:
            row = next(iter(ijson.items(fh, f"{first}.item", use_float=True)), None)
        except ijson.JSONError:
            return False
    return isinstance(row, dict) and "event" in row and "memory_id" in row


def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    """The file's records; a document that breaks (truncated, malformed) ends with an
    ``invalid_json`` record where it breaks, after every record before it."""
    position = -1
    try:
        for item in _records(fh, fmt, options):
            position = item.position
            yield item
    except ijson.JSONError as exc:
        reason = (str(exc).strip().splitlines() or ["malformed JSON"])[0][:200]
        yield failed(position + 1, "record", RecordError(
            "invalid_json", f"the JSON breaks at or after record {position + 1}: {reason}"))  # fmt: skip


def _records(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    state: dict[str, Any] = {}
    if fmt == "mem0_export_v3":
        for number, line in enumerate(fh, start=1):
            if line.strip():
                yield _one(number, "line", _line_memory, line, options, state)
        return
    if fmt == "mem0_history":
        position = 0
        for memory_id, rows in ijson.kvitems(fh, "", use_float=True):
            for row in rows if isinstance(rows, list) else [None]:
                yield _one(position, "record", history, memory_id, row, options)
                position += 1
        return
    prefix = "item" if fmt == "mem0_v1_list" else "results.item"
    position = 0
    for position, item in enumerate(ijson.items(fh, prefix, use_float=True)):
        try:  # ``_one(position, "record", memory, item, options, state)``, inlined: once a record
            envelope = memory(item, options, state)
        except (RecordError, orjson.JSONDecodeError) as exc:
            yield _one(position, "record", mem0_fields.reraise, exc)
            continue
        yield Item(position, "record", envelope=envelope)
    if fmt == "mem0_results" and may_name_relations(fh):
        fh.seek(0)
        for index, relation in enumerate(ijson.items(fh, "relations.item", use_float=True)):
            yield _one(position + 1 + index, "record", edge, relation, options, state)


def _line_memory(line: bytes, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    return memory(orjson.loads(line), options, state)


def _one(position: int, unit: str, make: Any, *args: Any) -> Item:
    try:
        return Item(position, unit, envelope=make(*args))
    except orjson.JSONDecodeError as exc:
        return failed(position, unit, RecordError("invalid_json", str(exc)))
    except RecordError as exc:
        return failed(position, unit, exc)


def memory(item: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    get = item.get if isinstance(item, dict) else None
    text = get("memory") if get is not None else None
    if not isinstance(text, str) or not text or text.isspace():  # ``not text.strip()``, without its copy
        raise RecordError("invalid_record", "a Mem0 memory needs a non-empty string 'memory'")
    ident = get("id")
    if not isinstance(ident, str):
        raise RecordError("invalid_record", "a Mem0 memory needs its string 'id'")
    run_id, user = get("run_id") or get("session_id"), get("user_id")
    if "user_id" not in state:
        state["user_id"] = user
    created, updated = timestamp(get("created_at")), timestamp(get("updated_at"))
    observed = created or updated or options.get("observed_at") or options["imported_at"]
    recorded = updated or created
    if recorded is not None and (state.get("latest") is None or recorded > state["latest"]):
        state["latest"] = recorded
    tags: dict[str, Any] = {"mem0_source_id": ident}
    for name, label in labelled(item):  # labels("mem0_", ...), over the fields the record has
        value = item[name]
        if value is not None:
            tags[label] = value if type(value) in SCALARS else scalar(value)
    if get("categories"):
        tags["mem0_categories"] = categories_label(item["categories"])
    tail = hashlib.sha256(orjson.dumps((get("updated_at"), text), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]  # digest
    envelope: dict[str, Any] = {
        "scope": _scope(options, state, user, get("agent_id"), run_id, get("app_id")),
        "observed_actor": _actor(item, run_id), "modality": "imported", "content": {"kind": "text", "text": text},
        "context": {"observed_at": observed, "source_recorded_at": recorded, "labels": tags},
        "idempotency_key": key_of("mem0", ident, tail),
    }  # fmt: skip
    if user:
        envelope["subject"] = {"id": actor_id("user", user), "type": "user"}
    return envelope


SCOPE_CACHE = 4096  # scopes remembered per import (one per user, agent, run and app combination)


def _scope(options: dict[str, Any], state: dict[str, Any], user: Any, agent: Any, run: Any, app: Any) -> str:
    """``expand(template, ...)``, remembered: a file's records go to few scopes."""
    ident = (user, agent, run, app)
    if not ((user is None or type(user) is str) and (agent is None or type(agent) is str)  # 1 and True are one
            and (run is None or type(run) is str) and (app is None or type(app) is str)):  # dict key  # fmt: skip
        return expand(options["template"], {"user_id": user, "agent_id": agent, "run_id": run, "app_id": app})
    cache = state.get("scopes")
    if cache is None or len(cache) >= SCOPE_CACHE:
        cache = state["scopes"] = {}
    found = cache.get(ident)
    if found is None:
        found = cache[ident] = expand(options["template"], {"user_id": user, "agent_id": agent, "run_id": run,
                                                            "app_id": app})  # fmt: skip
    return found


def _actor(item: dict[str, Any], session: Any) -> dict[str, Any]:
    if item.get("agent_id"):
        return actor("agent", item["agent_id"], session)
    if item.get("role") == "assistant":
        return actor("agent", item.get("actor_id") or "mem0_assistant", session)
    if item.get("user_id") or item.get("actor_id"):
        return actor("user", item.get("user_id") or item.get("actor_id"), session)
    return actor("app", "mem0", session)


def edge(relation: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(relation, dict) or not all(isinstance(relation.get(k), str) and relation[k]
                                                 for k in ("source", "relationship", "target")):  # fmt: skip
        raise RecordError("invalid_record", "a Mem0 relation needs string source, relationship and target")
    values = {"user_id": state.get("user_id") or options.get("user_id")}
    return {
        "scope": expand(options["template"], values), "observed_actor": actor("app", "mem0_graph"),
        "modality": "imported",
        "content": {"kind": "triple", "subject": relation["source"], "predicate": relation["relationship"],
                    "object": relation["target"], "datatype": "entity"},
        "context": {"observed_at": options.get("observed_at") or state.get("latest") or options["imported_at"],
                    "labels": {"mem0_relation": True, "mem0_observed_at_assumed": True}},
        "idempotency_key": key("mem0rel", digest(relation["source"], relation["relationship"], relation["target"])),
    }  # fmt: skip


def history(memory_id: str, row: Any, options: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(row, dict) or row.get("event") not in ("ADD", "UPDATE", "DELETE"):
        raise RecordError("invalid_record", "a Mem0 history row needs event ADD, UPDATE or DELETE")
    text = row.get("new_memory") if row["event"] != "DELETE" else row.get("old_memory")
    if not isinstance(text, str) or not text:
        raise RecordError("invalid_record", f"a Mem0 {row['event']} row needs its memory text")
    when = timestamp(row.get("updated_at")) or timestamp(row.get("created_at")) or options["imported_at"]
    envelope: dict[str, Any] = {
        "scope": expand(options["template"], {}), "observed_actor": actor("app", "mem0"),
        "modality": "imported", "content": {"kind": "text", "text": text},
        "context": {"observed_at": when, "source_recorded_at": when,
                    "labels": {"mem0_source_id": memory_id, **labels("mem0_", {
                        "history_id": row.get("id"), "event": row["event"], "old_memory": row.get("old_memory"),
                        "is_deleted": row.get("is_deleted"), "created_at": row.get("created_at"),
                        "updated_at": row.get("updated_at")})}},
        "idempotency_key": key("mem0h", row.get("id") or digest(memory_id, row)),
    }  # fmt: skip
    if row["event"] == "DELETE":
        envelope["directives"] = {"extract": []}
    return envelope


# -- export ------------------------------------------------------------------------------------
# ``mem0_results`` (OSS ``get_all``): ``{"results": [memory...], "relations"?: [...]}``.
# A text event becomes a memory.  One imported from Mem0 (``mem0_source_id``) gives back every
# field its ``mem0_*`` labels kept, as Mem0 wrote it (raw timestamps, ``metadata`` decoded,
# ``categories`` as a list again: ``categories_of``); ``metadata``, ``created_at`` and ``updated_at`` are always present (null
# when unknown), as OSS writes them.  A native event: its event id's UUID as ``id``, the md5 of
# its text as ``hash``, ``observed_at`` as ``created_at``, its source (else CortexDB) record time
# as ``updated_at``, ``user_id``/``agent_id``/``run_id`` from its subject, actor and session.
# Each version of a memory CortexDB holds (an update is a new event) is a row, oldest first.
# Triple events and the current facts (deduplicated by normalised name) are ``relations``;
# history rows (``mem0_event``), blob references, beliefs and episodes are skipped.
EXPORT_FORMATS = ("mem0_results",)
MEMORY_ORDER = ("hash", "metadata", "created_at", "updated_at", "user_id", "agent_id", "run_id", "session_id",
                "app_id", "actor_id", "role", "attributed_to", "expiration_date", "immutable", "replaced_by",
                "synthesized")  # fmt: skip
ALWAYS = ("metadata", "created_at", "updated_at")


def export(records: Iterator[dict[str, Any]], out: BinaryIO, fmt: str, options: dict[str, Any]) -> dict[str, int]:
    written = skipped = memories = 0
    seen: set[tuple[str, str, str]] = set()
    out.write(b'{"results":[')
    with tempfile.TemporaryFile() as relations:  # written after the memories: spooled, not held
        count = 0
        for record in records:
            kind, row = record["record"], None
            if kind == "event" and record["content"].get("kind") != "triple":
                item = _memory(record)
                if item is None:
                    skipped += 1
                    continue
                out.write((b"," if memories else b"") + orjson.dumps(item))
                memories += 1
                written += 1
                continue
            if kind == "event":
                content = record["content"]
                row = _relation(content["subject"], content["predicate"], content["object"], seen)
            elif kind == "fact":
                row = _fact_relation(record, seen)
            if row is None:  # a belief, an episode, a repeated or a past relation
                skipped += 1
                continue
            relations.write((b"," if count else b"") + orjson.dumps(row))
            count += 1
            written += 1
        out.write(b"]")
        if count:
            out.write(b',"relations":[')
            relations.seek(0)
            shutil.copyfileobj(relations, out)
            out.write(b"]")
    out.write(b"}\n")
    return {"written": written, "skipped": skipped}


def _memory(event: dict[str, Any]) -> dict[str, Any] | None:
    content, context = event["content"], event["context"]
    found = context.get("labels")
    tags = found if isinstance(found, dict) else {}
    if "mem0_event" in tags or "mem0_relation" in tags:
        return None  # a history row, a relation: not a get_all memory
    kind = content.get("kind")
    if kind in ("text", "message"):
        text = content.get("text")
    elif kind == "json":
        text = orjson.dumps(content.get("data")).decode()
    else:
        return None
    if not isinstance(text, str) or not text:
        return None
    if "mem0_source_id" in tags:
        item: dict[str, Any] = {"id": tags["mem0_source_id"], "memory": text}
        for name in MEMORY_ORDER:
            value = tags.get(f"mem0_{name}")
            if name == "metadata" and isinstance(value, str) and value[:1] in ("{", "["):
                value = orjson.loads(value)
            if value is not None or name in ALWAYS:
                item[name] = value
        if tags.get("mem0_categories"):
            item["categories"] = categories_of(tags["mem0_categories"])
        return item
    observed, subject = event.get("observed_actor") or {}, event.get("subject") or {}
    item = {"id": event["id"].removeprefix("evt_"), "memory": text, "hash": hashlib.md5(text.encode()).hexdigest(),
            "metadata": dict(tags) or None, "created_at": context["observed_at"],
            "updated_at": context.get("source_recorded_at") or context["recorded_at"]}  # fmt: skip
    user = _ident(subject.get("id"), "user") or _scope_user(event["scope"])
    if user:
        item["user_id"] = user
    if _ident(observed.get("id"), "agent"):
        item["agent_id"] = _ident(observed.get("id"), "agent")
    if observed.get("session"):
        item["run_id"] = observed["session"]
    if kind == "message" and content.get("role"):
        item["role"] = content["role"]
        item["actor_id"] = str(observed.get("id", "")).split(":", 1)[-1] or None
    return item


def _ident(actor_id: Any, kind: str) -> str | None:
    if isinstance(actor_id, str) and actor_id.startswith(kind + ":"):
        return actor_id.split(":", 1)[1]
    return None


def _scope_user(scope: str) -> str | None:
    for segment in scope.split("/"):
        if segment.startswith("user:"):
            return segment[5:]
    return None


def _name(value: Any) -> str:
    """Mem0's graph node naming: lowercase, spaces as ``_``; a user's own id as its bare id."""
    text = str(value)
    return (_ident(text, "user") or text).strip().lower().replace(" ", "_")


def _relation(source: Any, relationship: Any, target: Any, seen: set[tuple[str, str, str]]) -> dict[str, Any] | None:
    """The relation row, or None when one with the same normalised names was written."""
    found = (_name(source), _name(relationship), _name(target))
    if found in seen:
        return None
    seen.add(found)
    return {"source": source, "relationship": relationship, "target": target}


def _fact_relation(fact: dict[str, Any], seen: set[tuple[str, str, str]]) -> dict[str, Any] | None:
    """A current fact as a graph relation (Mem0 keeps no history of relations)."""
    if fact.get("superseded_by") or fact.get("valid_to") or fact.get("recorded_to") or fact.get("polarity", 1) < 0:
        return None
    obj = fact.get("object") or {}
    target = obj.get("name") if obj.get("type") == "entity" else obj.get("value")
    source = (fact.get("subject") or {}).get("name")
    if source is None or target is None:
        return None
    return _relation(_name(source), fact["predicate"], _name(target), seen)
