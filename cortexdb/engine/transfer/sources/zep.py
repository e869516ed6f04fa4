"""Zep and Graphiti (reference §15.2; tests/data/import/README.md §2): import and export.

| format           | file                                                                              |
|------------------|-----------------------------------------------------------------------------------|
| ``graphiti_json`` | ``{"episodes", "entity_nodes", "entity_edges", "episodic_edges"}``: graphiti-core  |
|                  | ``EpisodicNode``/``EntityNode``/``EntityEdge``/``EpisodicEdge`` ``model_dump(mode="json")`` |
| ``zep_cloud_v3`` | ``{"thread_messages": {"messages", "user_id"?, "thread_id"?}, "episodes": {"episodes"},`` |
|                  | ``"nodes", "edges"}``: zep-cloud 3.x ``thread.get``/``graph.episode|node|edge`` lists   |

What each record becomes (every source field is kept in ``zep_*`` labels, timestamps as written,
lists and objects as JSON; ``zep_record`` names the record kind and ``zep_uuid`` its id):

- an **episode** -> an ``imported`` ``text`` event (the episode content).  ``valid_at`` (the
  reference time: event time) is its ``observed_at``, ``created_at`` its ``source_recorded_at``
  (Zep Cloud episodes have no ``valid_at``: ``created_at`` is both).
- an **entity edge** (a Zep "fact") -> a ``triple`` event: (source node name, edge name, target
  node name) with the fact sentence as ``text``, ``valid_at``/``invalid_at`` as the triple's
  ``valid_from``/``valid_to`` (so the derived fact keeps Zep's world-time window) and
  ``single_valued: false`` (Zep already decided which edges contradict: CortexDB must not
  supersede an edge Zep kept).  Observed at ``reference_time`` (Graphiti: the producing episode's
  ``valid_at``), else ``created_at``; ``created_at``/``expired_at`` (record time) stay labels.  An
  edge with an end but no start (``valid_at`` null) that ended before it was observed is given
  the empty window ``[invalid_at, invalid_at)`` (``zep_valid_at_unknown``): known to have ended,
  never shown as current.
- an **entity node** -> an ``imported`` ``json`` event: ``{"subject": name, **attributes}`` (custom
  entity-type attributes become facts about the entity), its ``summary`` as ``text`` (found by
  recall); the node's labels (its entity type) stay in ``zep_labels``.
- an **episodic edge** (MENTIONS) -> an ``imported`` ``json`` provenance event
  ``{"episode", "entity"}`` that derives nothing (``extract: []``, ``embed: none``).
- a **thread message** (Zep Cloud) -> a ``conversation`` ``message`` event (role ``function`` is
  ``tool``; ``norole`` is a ``text`` event), observed at ``created_at``.

Episodes and messages are not read for facts again by default: Zep's own edges are their facts,
and a second, rule-based reading would contradict them.  A Zep Cloud record with
``processed: false`` (Zep has not extracted it yet) is read; ``options.extract_facts`` (true |
false) overrides both.  Each record's key is ``zep:<kind>:<uuid>:<hash of the record>``: a
re-import of the same dump replays, a changed record (an edge Zep invalidated since) is a new
event.  Scope template variables: ``{group_id}`` (Graphiti), ``{user_id}`` (the thread's, or
``options.user_id``), ``{thread_id}``, ``{graph_id}`` (``options``).

Export (``graphiti_json``): ``zep_export.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson

from ....errors import InvalidBody, UnsupportedFormat
from ...temporal import try_parse_rfc3339
from ..mapping import Item, RecordError, actor, digest, expand, failed, key, labels, timestamp
from .zep_export import EXPORT_FORMATS, export

__all__ = ["EXPORT_FORMATS", "FORMATS", "export", "read", "sniff"]

FORMATS = ("graphiti_json", "zep_cloud_v3")
GRAPHITI_KEYS = {"entity_nodes", "entity_edges", "episodic_edges", "community_nodes", "community_edges"}
CLOUD_KEYS = {"thread_messages", "nodes", "edges"}
SECTIONS = {
    "graphiti_json": {"episodes.item": "episodes", "entity_nodes.item": "entity_nodes",
                      "entity_edges.item": "entity_edges", "episodic_edges.item": "episodic_edges"},
    "zep_cloud_v3": {"thread_messages.messages.item": "messages", "episodes.episodes.item": "episodes",
                     "nodes.item": "nodes", "edges.item": "edges"},
}  # fmt: skip
NODE_PREFIX = {"graphiti_json": "entity_nodes.item", "zep_cloud_v3": "nodes.item"}
VOLATILE = {"score", "relevance", "selection_rank"}  # search-result fields: not part of a record
JSON_FIELDS = ("labels", "entity_edges", "episode_metadata", "attributes", "episodes", "metadata")
VARIABLES = ("group_id", "user_id", "graph_id", "thread_id")
NO_FACTS = ["entities", "beliefs", "episodes"]
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool", "function": "tool"}


# -- import ------------------------------------------------------------------------------------
def sniff(path: str) -> str:
    """``graphiti_json`` or ``zep_cloud_v3`` from the container's top-level keys (``episodes`` is
    a list in Graphiti's, an object in Zep Cloud's)."""
    with open(path, "rb") as fh:
        events = ijson.parse(fh)
        try:
            first = next(events, None)
            if first is None or first[1] != "start_map":
                raise UnsupportedFormat("not a Zep or Graphiti export: the file is not a JSON object",
                                        details={"format": None, "known": list(FORMATS)})  # fmt: skip
            seen: list[str] = []
            for prefix, event, value in events:
                if event != "map_key" or prefix != "":
                    continue
                _, kind, _ = next(events)
                if value in GRAPHITI_KEYS or (value == "episodes" and kind == "start_array"):
                    return "graphiti_json"
                if value in CLOUD_KEYS or (value == "episodes" and kind == "start_map"):
                    return "zep_cloud_v3"
                seen.append(str(value)[:40])
        except ijson.JSONError:
            raise UnsupportedFormat("not a Zep or Graphiti export: malformed JSON", details={"format": None}) from None
    hint = (" (Zep v2 'facts' with ratings are not read: list the graph with zep-cloud 3.x)"
            if "facts" in seen else "")  # fmt: skip
    raise UnsupportedFormat(f"not a Zep or Graphiti export this importer knows (top-level keys {seen[:8]}){hint}",
                            details={"format": None, "known": list(FORMATS)})  # fmt: skip


def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    nodes, episodes = _names(fh, fmt)
    state: dict[str, Any] = {"fmt": fmt, "nodes": nodes, "episodes": episodes}
    if fmt == "zep_cloud_v3":
        state["thread"] = _thread_fields(fh)
    fh.seek(0)
    make = {"episodes": episode, "entity_nodes": node, "nodes": node, "entity_edges": edge, "edges": edge,
            "episodic_edges": mention, "messages": message}  # fmt: skip
    counters: dict[str, int] = {}
    position = 0
    try:
        for section, record in _records(fh, SECTIONS[fmt]):
            index = counters[section] = counters.get(section, -1) + 1
            if section is None:
                yield Item(position, "record")  # a record of a kind this importer does not map: skipped
            else:
                try:
                    yield Item(position, "record", envelope=make[section](record, options, state))
                except RecordError as exc:
                    yield failed(position, "record", RecordError(exc.code, f"{section}[{index}]: {exc.detail}"))
            position += 1
    except ijson.JSONError as exc:
        yield failed(position, "record", RecordError("invalid_json", f"the JSON breaks after {position} records: {exc}"))


def _records(fh: BinaryIO, sections: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """Each item of the container's record lists, one at a time, in file order: ``(section,
    record)``; the items of other top-level lists come as ``(None, ...)``."""
    builder: Any = None
    depth = 0
    section: str | None = None
    for prefix, event, value in ijson.parse(fh, use_float=True):
        if builder is not None:
            builder.event(event, value)
            depth += event in ("start_map", "start_array")
            depth -= event in ("end_map", "end_array")
            if depth == 0:
                yield section, builder.value
                builder = None
            continue
        if not prefix.endswith(".item") or event in ("end_map", "end_array", "map_key"):
            continue
        known = sections.get(prefix)
        if known is None and prefix.count(".") != 1:
            continue  # inside a known record's container (e.g. thread_messages.row_count)
        section = known
        if event in ("start_map", "start_array"):
            builder, depth = ijson.ObjectBuilder(), 1
            builder.event(event, value)
        else:
            yield section, value


def _names(fh: BinaryIO, fmt: str) -> tuple[dict[str, str], dict[str, str]]:
    """The node table (uuid -> name) edges resolve their ends against (§15.2), and the episode
    names (uuid -> name) mentions are told by."""
    nodes: dict[str, str] = {}
    episodes: dict[str, str] = {}
    wanted = {NODE_PREFIX[fmt]: nodes, "episodes.item": episodes}
    fh.seek(0)
    try:
        for table, item in _records(fh, wanted):
            if table is not None and isinstance(item, dict) and isinstance(item.get("uuid"), str) \
                    and isinstance(item.get("name"), str):  # fmt: skip
                table[item["uuid"]] = item["name"]
    except ijson.JSONError:
        pass  # the main pass reports where the JSON breaks
    return nodes, episodes


def _thread_fields(fh: BinaryIO) -> dict[str, Any]:
    """The scalars of ``thread_messages`` (``user_id`` may follow the messages in the file)."""
    found: dict[str, Any] = {}
    fh.seek(0)
    try:
        for prefix, event, value in ijson.parse(fh, use_float=True):
            if prefix.startswith("thread_messages.") and prefix.count(".") == 1 and event in ("string", "number"):
                found[prefix.split(".", 1)[1]] = value
            elif prefix == "thread_messages" and event == "end_map":
                break
    except ijson.JSONError:
        pass
    return found


def _need(record: Any, *fields: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise RecordError("invalid_record", "a record must be a JSON object")
    for name in fields:
        if not isinstance(record.get(name), str) or not record[name]:
            raise RecordError("invalid_record", f"{name!r} must be a non-empty string")
    for name in JSON_FIELDS:
        value = record.get(name)
        wanted = list if name in ("labels", "entity_edges", "episodes") else dict
        if value is not None and not isinstance(value, wanted):
            raise RecordError("invalid_record", f"{name!r} must be {'an array' if wanted is list else 'an object'}")
    return record


def _labels(kind: str, record: dict[str, Any], *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every field of ``record`` as ``zep_<field>`` (timestamps as written, lists/objects as JSON)."""
    fields = {name: value for name, value in record.items() if name not in skip and name not in VOLATILE}
    return {"zep_record": kind, **labels("zep_", fields)}


def _key(kind: str, record: dict[str, Any]) -> str:
    return key("zep", kind, record["uuid"], digest({k: v for k, v in record.items() if k not in VOLATILE}))


def _values(record: dict[str, Any], options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    thread = state.get("thread") or {}
    return {name: record.get(name) or thread.get(name) or options.get(name) for name in VARIABLES}


def _when(*values: Any, options: dict[str, Any]) -> str:
    for value in values:
        found = timestamp(value)
        if found is not None:
            return found
    return options.get("observed_at") or options["imported_at"]


def _source(state: dict[str, Any]) -> dict[str, Any]:
    return actor("app", "graphiti" if state["fmt"] == "graphiti_json" else "zep")


def check_options(options: dict[str, Any]) -> None:
    """400 at the start for a bad option (``extract_facts`` from a query string: "true"/"false")."""
    wanted = options.get("extract_facts")
    if isinstance(wanted, str):
        options["extract_facts"] = wanted = {"true": True, "false": False}.get(wanted.lower(), wanted)
    if wanted is not None and not isinstance(wanted, bool):
        raise InvalidBody("options.extract_facts must be a boolean", details={"field": "options.extract_facts"})


def _extract(record: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    wanted = options.get("extract_facts")
    if wanted is None:
        wanted = record.get("processed") is False  # Zep has not extracted it yet
    return {} if wanted else {"directives": {"extract": NO_FACTS}}


def _subject(values: dict[str, Any]) -> dict[str, Any]:
    return {"subject": {"id": actor("user", values["user_id"])["id"], "type": "user"}} if values.get("user_id") else {}


def episode(record: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    record = _need(record, "uuid")
    content = record.get("content")
    if content is not None and not isinstance(content, str):
        raise RecordError("invalid_record", "'content' must be a string")
    extra = _labels("episode", record, skip=("content",))
    text = content
    if not content:  # store_raw_episode_content=False: the name stands in, the label says so
        text = record.get("name") or record.get("source_description") or f"zep episode {record['uuid']}"
        extra["zep_content_empty"] = True
    values = _values(record, options, state)
    observed = _when(record.get("valid_at"), record.get("created_at"), options=options)
    return {"scope": expand(options["template"], values), "observed_actor": _source(state), **_subject(values),
            "modality": "imported", "content": {"kind": "text", "text": text},
            "context": {"observed_at": observed, "source_recorded_at": timestamp(record.get("created_at")),
                        "labels": extra},
            **_extract(record, options), "idempotency_key": _key("ep", record)}  # fmt: skip


def message(record: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    record = _need(record, "uuid", "content")
    values = _values(record, options, state)
    role = ROLES.get(record.get("role"))
    name = record.get("name") if isinstance(record.get("name"), str) else None
    if record.get("role") not in (*ROLES, "norole", None):
        raise RecordError("invalid_record", f"unknown message role {str(record.get('role'))[:40]!r}")
    session = values.get("thread_id")
    if role == "user" or (role is None and (values.get("user_id") or name)):
        who = actor("user", values.get("user_id") or name, session)
    else:
        who = actor("agent", name or record.get("role") or "assistant", session)
    content = {"kind": "message", "role": role, "text": record["content"]} if role else {"kind": "text", "text": record["content"]}  # fmt: skip
    extra = _labels("message", record, skip=("content",))
    extra.update(labels("zep_", {"thread_" + k: v for k, v in (state.get("thread") or {}).items()
                                 if k in ("user_id", "thread_id", "thread_created_at")}))  # fmt: skip
    return {"scope": expand(options["template"], values), "observed_actor": who, **_subject(values),
            "modality": "conversation", "content": content,
            "context": {"observed_at": _when(record.get("created_at"), options=options),
                        "source_recorded_at": timestamp(record.get("created_at")), "labels": extra},
            **_extract(record, options), "idempotency_key": _key("msg", record)}  # fmt: skip


def node(record: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    record = _need(record, "uuid", "name")
    summary = record.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise RecordError("invalid_record", "'summary' must be a string")
    attributes = {k: v for k, v in (record.get("attributes") or {}).items() if k != "subject" and v is not None}
    extra = _labels("entity_node", record, skip=("summary",))
    if not summary:
        extra["zep_summary_empty"] = True
    values = _values(record, options, state)
    return {"scope": expand(options["template"], values), "observed_actor": _source(state), **_subject(values),
            "modality": "imported",
            "content": {"kind": "json", "data": {"subject": record["name"], **attributes},
                        "text": summary or record["name"]},
            "context": {"observed_at": _when(record.get("created_at"), options=options),
                        "source_recorded_at": timestamp(record.get("created_at")), "labels": extra},
            "idempotency_key": _key("node", record)}  # fmt: skip


def edge(record: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    record = _need(record, "uuid", "source_node_uuid", "target_node_uuid", "name")
    names = state["nodes"]
    for end in ("source_node_uuid", "target_node_uuid"):
        if record[end] not in names:
            raise RecordError("invalid_record", f"{end} {record[end][:64]!r} names no node of the file")
    fact = record.get("fact")
    if fact is not None and not isinstance(fact, str):
        raise RecordError("invalid_record", "'fact' must be a string")
    observed = _when(record.get("reference_time"), record.get("created_at"), options=options)
    start, end = timestamp(record.get("valid_at")), timestamp(record.get("invalid_at"))
    extra = _labels("entity_edge", record, skip=("fact",))
    if start is None and end is not None and try_parse_rfc3339(end) < try_parse_rfc3339(observed):
        start = end  # ended before it was observed, start unknown: the empty window at its end
        extra["zep_valid_at_unknown"] = True
    content: dict[str, Any] = {"kind": "triple", "subject": names[record["source_node_uuid"]],
                               "predicate": record["name"], "object": names[record["target_node_uuid"]],
                               "datatype": "entity", "single_valued": False}  # fmt: skip
    if fact:
        content["text"] = fact
    if start is not None:
        content["valid_from"] = start
    if end is not None:
        content["valid_to"] = end
    rating = record.get("rating")  # Zep v2 facts only
    if isinstance(rating, int | float) and not isinstance(rating, bool) and 0 <= rating <= 1:
        content["confidence"] = float(rating)
    values = _values(record, options, state)
    return {"scope": expand(options["template"], values), "observed_actor": _source(state), **_subject(values),
            "modality": "imported", "content": content,
            "context": {"observed_at": observed, "source_recorded_at": timestamp(record.get("created_at")),
                        "labels": extra},
            "idempotency_key": _key("edge", record)}  # fmt: skip


def mention(record: Any, options: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    record = _need(record, "uuid", "source_node_uuid", "target_node_uuid")
    values = _values(record, options, state)
    return {"scope": expand(options["template"], values), "observed_actor": _source(state), **_subject(values),
            "modality": "imported",
            "content": {"kind": "json", "data": {"episode": record["source_node_uuid"],
                                                 "entity": record["target_node_uuid"]},
                        "text": f"{state['episodes'].get(record['source_node_uuid'], 'an episode')} mentions "
                                f"{state['nodes'].get(record['target_node_uuid'], 'an entity')}"},
            "context": {"observed_at": _when(record.get("created_at"), options=options),
                        "source_recorded_at": timestamp(record.get("created_at")),
                        "labels": _labels("episodic_edge", record)},
            "directives": {"extract": [], "embed": "none"}, "idempotency_key": _key("mention", record)}  # fmt: skip
