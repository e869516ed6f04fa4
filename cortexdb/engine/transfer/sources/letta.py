"""Letta (reference §15.3; tests/data/import/README.md §3): Agent Files and archival passages.

| format                | file                                                             |
|-----------------------|------------------------------------------------------------------|
| ``agent_file_v2``     | ``.af`` v2 (``AgentFileSchema``, Letta ≥ 0.10): ``agents``, ``blocks``, ``tools``... |
| ``agent_file_legacy`` | legacy single-agent ``.af`` (Letta 0.6.40–0.11.x): ``version``, ``core_memory``... |
| ``letta_passages``    | ``list[Passage]`` of ``GET /v1/agents/{id}/archival-memory`` (in no ``.af``) |

``letta_af`` (the reference's name) may be declared for any of them.  A ``.af`` has no version
field: v2 is told by its ``agents`` list, legacy by its top-level ``version`` (0.6–0.11); any
other version is 422 ``UNSUPPORTED_FORMAT``.  A double-encoded ``.af`` (a JSON string holding the
document, as some published files are) is decoded as it is read.  The document is parsed with
ijson in two passes, never whole: the first keeps the small parts (agent settings, tools, the
file's ``created_at``, wherever they sit in the file), the second streams messages and blocks.

Mapping (each record keeps its source fields in ``letta_*`` labels; docs/import-export.md):

- a **message** becomes a ``message`` event (role ``user|assistant|system|tool``; Letta's
  ``function``/``approval``/``summary`` roles map to ``tool``/``user``/``system`` and keep
  ``letta_role``): ``created_at`` is its ``observed_at`` and ``source_recorded_at`` (legacy:
  ``updated_at``).  The text is the text parts, then each tool call (``send_message`` as its
  message, others as ``name(arg: value, ...)``); reasoning parts are left out of the text.  Tool
  calls, tool returns, approvals and the parts list (when the text alone does not give it back)
  are kept as JSON labels.  System messages and MemGPT heartbeat/login envelopes ask for no
  extraction; a MemGPT ``user_message`` envelope's text is its ``message``.
- a **memory block** becomes an ``imported`` text event (the value; an empty block is
  ``(empty <label> block)`` with ``letta_block_empty``) with ``letta_block_label``,
  ``letta_block_limit``, ``letta_block_metadata`` and its other fields; ``persona`` and
  ``human`` are tagged ``letta_concept`` ``actor_self_description`` /
  ``actor_subject_description``.  v2 blocks carry no time: they are observed at
  ``options.observed_at``, else the file's ``created_at`` (its export time).  A block shared by
  several agents is written once per agent.
- each **agent** becomes one ``imported`` ``json`` event (``letta_record: agent``; no
  extraction): its settings, its **tools** (whole definitions, in ``data.tools``), its block
  labels, and its in-context messages by idempotency key, so an export gives them back.
- an archival **passage** becomes an ``imported`` text event observed at its ``created_at``
  (settable on insert), recorded at ``updated_at``; its ``embedding`` is dropped.
- groups, files, sources, file attachments, MCP servers and skills are counted ``skipped``.

Not kept: file-local ids (``agent-0``, ``message-3``: rewritten on every export), message
``otid`` (random on every export), and secret values (keys kept, values blanked).
Idempotency keys hash what the event holds (with the tool-call or passage id in front), so a
re-import, or the same messages in a later export, replays; a changed record is a new event.

Scope template variables: ``{agent_name}``, ``{agent_id}`` (file-local), ``{agent_type}``,
``{user_id}`` and ``{archive_id}`` (passages); ``options.agent_name``/``agent_id``/``user_id``
fill them when the file has no value (a passages list names no agent).  ``options.user_id`` is
also the ``user:`` actor of user messages (default ``user:letta_user``).

Export (``agent_file_v2``): one agent, streamed: messages as they arrive, then the agent's
settings, its blocks (the latest version of each label) and tools.  See ``export``.
"""  # fmt: skip

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import ijson
import orjson

from ....errors import InvalidBody, UnsupportedFormat
from ...temporal import try_parse_rfc3339
from ..mapping import Item, RecordError, actor, digest, expand, failed, key, timestamp

FORMATS = ("agent_file_v2", "agent_file_legacy", "letta_passages", "letta_af")
ANY_DECLARED = True  # "letta_af" names any of them: the file says which
EXPORT_FORMATS = ("agent_file_v2",)

LEGACY_VERSION = re.compile(r"^0\.(?:[6-9]|1[01])\.\d+")  # the Letta releases that wrote it
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool",
         "function": "tool", "approval": "user", "summary": "system"}  # fmt: skip
ENVELOPES = ("user_message", "login", "heartbeat", "system_alert")  # MemGPT user-turn envelopes
CONCEPTS = {"persona": "actor_self_description", "human": "actor_subject_description"}
SKIPPED = ("groups.item", "files.item", "sources.item", "mcp_servers.item", "skills.item",
           "agents.item.files_agents.item")  # fmt: skip
HEAD = 1 << 16
TAIL = 4096

# v2 fields in Letta's order, with the value a file has when the field says nothing (a label is
# kept only for another value) and whether the value is JSON (kept as a JSON string label)
MESSAGE_FIELDS: dict[str, tuple[Any, bool]] = {
    "type": ("message", False), "role": (None, False), "content": (None, True), "name": (None, False),
    "otid": (None, False), "sender_id": (None, False), "batch_item_id": (None, False), "group_id": (None, False),
    "id": (None, False), "model": (None, False), "agent_id": (None, False), "tool_calls": (None, True),
    "tool_call_id": (None, False), "tool_returns": ([], True), "created_at": (None, False),
    "approve": (None, False), "approval_request_id": (None, False), "denial_reason": (None, False),
    "approvals": ([], True)}  # fmt: skip
MESSAGE_OWN = {"id", "agent_id", "otid", "role", "content", "created_at", "text"}  # not labelled as is  # fmt: skip
BLOCK_FIELDS: dict[str, tuple[Any, bool]] = {
    "value": ("", False), "limit": (100000, False), "project_id": (None, False), "template_name": (None, False),
    "is_template": (False, False), "template_id": (None, False), "base_template_id": (None, False),
    "deployment_id": (None, False), "entity_id": (None, False), "preserve_on_migration": (False, False),
    "label": (None, False), "read_only": (False, False), "description": (None, False), "metadata": ({}, True),
    "hidden": (None, False), "tags": (None, True), "id": (None, False)}  # fmt: skip
BLOCK_ALWAYS = ("label", "limit", "metadata")  # labelled even at their default
AGENT_OWN = ("id", "messages", "in_context_message_ids", "block_ids", "tool_ids", "files_agents", "group_ids")  # fmt: skip
LEGACY_TOOL_DROP = ("created_at", "updated_at", "id")  # not fields of a v2 tool (extra fields are refused)  # fmt: skip


# -- sniff ---------------------------------------------------------------------------------------
def sniff(path: str) -> str:
    with open(path, "rb") as fh:
        head = fh.read(HEAD).lstrip()
        first = head[:1]
        if first == b"[":
            fh.seek(0)
            return _sniff_list(fh)
        if first not in (b"{", b'"'):
            raise UnsupportedFormat("not a Letta file: an Agent File is a JSON object, archival passages a JSON array",
                                    details={"format": None, "known": list(FORMATS)})  # fmt: skip
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - TAIL))
        tail = fh.read() if first == b"{" else None  # the tail of a double-encoded file is escaped
        return _sniff_object(_document(fh), tail)


def _sniff_list(fh: BinaryIO) -> str:
    try:
        item = next(iter(ijson.items(fh, "item", use_float=True)), None)
    except ijson.JSONError:
        raise UnsupportedFormat("not a Letta file: malformed JSON", details={"format": None}) from None  # fmt: skip
    if item is None or (isinstance(item, dict) and isinstance(item.get("text"), str)
                        and str(item.get("id", "")).startswith("passage-")):  # fmt: skip
        return "letta_passages"
    raise UnsupportedFormat("a JSON array, but not of Letta archival passages (objects with a passage- id and text)",
                            details={"format": None, "known": list(FORMATS)})  # fmt: skip


def _tail_value(tail: bytes | None, name: str) -> Any:
    """The value of the document's last top-level key when it is ``name`` (Letta writes
    ``created_at`` last in v2 and, keys sorted, ``version`` last in legacy files), else None."""
    if not tail:
        return None
    found = re.search(rb'"%s"\s*:\s*("(?:[^"\\]|\\.)*"|null)\s*\}\s*$' % name.encode(), tail)
    return orjson.loads(found.group(1)) if found else None


def _sniff_object(src: Any, tail: bytes | None) -> str:
    events = ijson.parse(src, use_float=True)
    try:
        start = next(events)
        first = next(events)
        after = next(events) if first[1] == "map_key" else None
    except (ijson.JSONError, StopIteration):
        raise UnsupportedFormat("not a Letta Agent File: malformed JSON", details={"format": None}) from None  # fmt: skip
    if start[1] != "start_map" or first[1] != "map_key" or after is None:
        raise UnsupportedFormat("not a Letta Agent File: an empty or non-object document", details={"format": None})  # fmt: skip
    version = _tail_value(tail, "version")
    keys: dict[str, str] = {first[2]: after[1]}
    if version is None and (first[2] != "agents" or tail is None):
        version = _scan_keys(events, after, keys)
    if "agents" in keys and version is None:
        if keys["agents"] != "start_array":
            raise UnsupportedFormat("not a Letta Agent File: 'agents' is not a list", details={"format": None})  # fmt: skip
        return "agent_file_v2"
    if version is not None and "agents" not in keys and LEGACY_VERSION.match(str(version)):
        return "agent_file_legacy"
    if version is not None:
        raise UnsupportedFormat(f"a Letta Agent File of version {str(version)[:40]!r}, which this importer does not "
                                "read: it reads v2 (an 'agents' list, no version) and legacy 0.6-0.11 files",
                                details={"format": None, "version": str(version)[:40], "known": list(FORMATS)})  # fmt: skip
    raise UnsupportedFormat("not a Letta Agent File: no 'agents' list (v2) and no 'version' (legacy)",
                            details={"format": None, "known": list(FORMATS)})  # fmt: skip


def _scan_keys(events: Iterator, after: tuple, keys: dict[str, str]) -> Any:
    """Walk the rest of the document for its top-level keys; the ``version`` value if any."""
    version = after[2] if after[0] == "version" and after[1] == "string" else None
    depth = 1 if after[1] in ("start_map", "start_array") else 0
    try:
        for _prefix, event, value in events:
            if event in ("start_map", "start_array"):
                depth += 1
            elif event in ("end_map", "end_array"):
                depth -= 1
            elif depth == 0 and event == "map_key":
                _, kind, val = next(events)
                keys[value] = kind
                if value == "version" and kind == "string":
                    version = val
                if kind in ("start_map", "start_array"):
                    depth += 1
    except ijson.JSONError:
        pass  # a file broken further on: judged by what came before (the reader reports the break)
    return version


# -- a double-encoded document ---------------------------------------------------------------------
_ESCAPE = re.compile(rb'\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\(.)|"',
                     re.S)  # fmt: skip
_SIMPLE = {b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t"}  # fmt: skip


def _document(fh: BinaryIO) -> Any:
    """``fh`` from its start, or, when the file is a JSON string, the document inside it."""
    fh.seek(0)
    head = fh.read(4096)
    body = head.lstrip()
    if body[:1] == b'"':
        return _Unquoted(fh, len(head) - len(body) + 1)
    fh.seek(0)
    return fh


class _Unquoted:
    """A file-like view of the JSON text inside a JSON string, unescaped chunk by chunk (a
    chunk ends before any escape it might cut; a surrogate pair is never split)."""

    def __init__(self, fh: BinaryIO, start: int) -> None:
        fh.seek(start)
        self._fh = fh
        self._carry = b""
        self._done = False

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        while not self._done:
            raw = self._fh.read(size if size > 0 else HEAD)
            buf = self._carry + raw
            cut = _safe_end(buf) if raw else len(buf)
            out, consumed, ended = _unescape(buf[:cut], final=not raw)
            self._carry = buf[consumed:]
            if ended:
                self._done = True
            elif not raw:
                raise ijson.IncompleteJSONError("the JSON string holding the Agent File ends without its closing quote")  # fmt: skip
            if out:
                return out
        return b""


def _safe_end(buf: bytes) -> int:
    """Where ``buf`` may be cut: before the last run of backslashes if it is near the end."""
    at = buf.rfind(b"\\", max(0, len(buf) - 12))
    if at < 0:
        return len(buf)
    while at > 0 and buf[at - 1] == 0x5C:
        at -= 1
    return at


def _unescape(chunk: bytes, final: bool) -> tuple[bytes, int, bool]:
    """(the chunk unescaped up to the closing quote, bytes consumed, whether the string ended)."""
    out: list[bytes] = []
    last = 0
    for match in _ESCAPE.finditer(chunk):
        out.append(chunk[last : match.start()])
        if match.group(0) == b'"':
            return b"".join(out), match.start(), True
        if match.group(1):
            high, low = int(match.group(1), 16), int(match.group(2), 16)
            out.append(chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).encode())
        elif match.group(3):
            point = int(match.group(3), 16)
            if 0xD800 <= point <= 0xDBFF and match.end() == len(chunk) and not final:
                return b"".join(out), match.start(), False  # its pair is in the next chunk
            out.append(chr(point).encode("utf-8", "surrogatepass"))
        else:
            out.append(_SIMPLE.get(match.group(4), match.group(4)))
        last = match.end()
    out.append(chunk[last:])
    return b"".join(out), len(chunk), False


# -- walking the document --------------------------------------------------------------------------
class _Walk:
    def __init__(self, src: Any) -> None:
        self.events = ijson.parse(src, use_float=True)

    def value(self, event: str, value: Any) -> Any:
        """The whole value whose first event is ``(event, value)`` (consumes its events)."""
        if event not in ("start_map", "start_array"):
            return value
        builder = ijson.ObjectBuilder()
        builder.event(event, value)
        depth = 1
        for _prefix, ev, val in self.events:
            builder.event(ev, val)
            if ev in ("start_map", "start_array"):
                depth += 1
            elif ev in ("end_map", "end_array"):
                depth -= 1
                if depth == 0:
                    break
        return builder.value

    def count(self, event: str) -> int:
        """Skip the value whose first event is ``event``; the number of items it held."""
        if event not in ("start_map", "start_array"):
            return 0
        depth, items = 1, 0
        for _prefix, ev, _val in self.events:
            if depth == 1 and ev not in ("end_map", "end_array", "map_key"):
                items += 1
            if ev in ("start_map", "start_array"):
                depth += 1
            elif ev in ("end_map", "end_array"):
                depth -= 1
                if depth == 0:
                    break
        return items


def _starts(event: str) -> bool:
    return event not in ("end_map", "end_array", "map_key")


def _prescan(src: Any, fmt: str) -> dict[str, Any]:
    """Pass 1: everything but messages (and blocks' values), wherever it is in the file."""
    head: dict[str, Any] = {"created_at": None, "metadata": None, "agents": [], "tools": {}, "blocks": {}}  # fmt: skip
    walk = _Walk(src)
    legacy = fmt == "agent_file_legacy"
    if legacy:
        head["agents"].append({})
    try:
        for prefix, event, value in walk.events:
            if legacy and prefix == "" and event == "map_key":
                _, ev, val = next(walk.events)
                if value == "messages":
                    walk.count(ev)
                else:
                    head["agents"][0][value] = walk.value(ev, val)
            elif prefix == "agents.item" and event == "start_map":
                head["agents"].append({})
            elif prefix == "agents.item" and event == "map_key":
                _, ev, val = next(walk.events)
                if value in ("messages", "files_agents"):
                    walk.count(ev)
                else:
                    head["agents"][-1][value] = walk.value(ev, val)
            elif prefix == "tools.item" and _starts(event):
                tool = walk.value(event, value)
                if isinstance(tool, dict) and isinstance(tool.get("id"), str):
                    head["tools"][tool["id"]] = tool
            elif prefix == "blocks.item" and _starts(event):
                block = walk.value(event, value)
                if isinstance(block, dict) and isinstance(block.get("id"), str):
                    head["blocks"][block["id"]] = block.get("label")
            elif prefix in ("created_at", "metadata") and _starts(event):
                head[prefix] = walk.value(event, value)
    except ijson.JSONError:
        pass  # pass 2 reports where the document breaks
    agents = head["agents"]
    # when the untimed records (blocks, agents) were observed: the export time (v2); a legacy
    # file has none, its agent's last update is the nearest
    head["time"] = (agents[0].get("updated_at") or agents[0].get("created_at")) if legacy else head["created_at"]  # fmt: skip
    if legacy:
        head["created_at"] = agents[0].get("created_at")
    return head


# -- read ------------------------------------------------------------------------------------------
def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    for name in ("map_core_blocks_to", "map_archival_to"):
        if options.get(name) not in (None, "events"):
            raise InvalidBody(f"options.{name}={str(options[name])[:40]!r} is not supported: Letta blocks and "
                              "passages import as events (the Understanding layer is not built)",
                              details={"field": f"options.{name}"})  # fmt: skip
    if fmt == "letta_passages":
        yield from _Reader(fmt, {}, options).passages(_document(fh))
        return
    head = _prescan(_document(fh), fmt)
    yield from _Reader(fmt, head, options).document(_document(fh))


class _Reader:
    def __init__(self, fmt: str, head: dict[str, Any], options: dict[str, Any]) -> None:
        self.fmt, self.head, self.options = fmt, head, options
        self.position = 0
        self.latest: str | None = None  # the latest message time seen
        self.context: dict[Any, str] = {}  # in-context message (file id or legacy index) -> key
        self.wanted: set[Any] = set()
        owners: dict[str, list[int]] = {}
        for index, agent in enumerate(head.get("agents", ())):
            for block_id in agent.get("block_ids") or ():
                owners.setdefault(block_id, []).append(index)
        self.owners = owners

    # -- items
    def _one(self, where: str, make: Any, *args: Any) -> Item:
        position, self.position = self.position, self.position + 1
        try:
            return Item(position, "record", envelope=make(*args))
        except RecordError as exc:
            return failed(position, "record", RecordError(exc.code, f"{where}: {exc.detail}"))

    def _skipped(self) -> Item:
        position, self.position = self.position, self.position + 1
        return Item(position, "record")

    def _broken(self, where: str, exc: Exception) -> Item:
        position, self.position = self.position, self.position + 1
        return failed(position, "record", RecordError("invalid_json", f"the JSON breaks at or after {where}: {exc}"))  # fmt: skip

    def document(self, src: Any) -> Iterator[Item]:
        walk = _Walk(src)
        legacy = self.fmt == "agent_file_legacy"
        agent, message, block = -1, -1, -1
        where = "its start"
        if legacy:
            agent = 0
            self._begin_agent(0)
        try:
            for prefix, event, value in walk.events:
                if prefix == "agents.item" and event == "start_map":
                    agent, message = agent + 1, -1
                    self._begin_agent(agent)
                elif prefix == "agents.item" and _starts(event):
                    walk.value(event, value)
                    yield self._one(f"agents[{agent + 1}]", _refuse, "an agent must be an object")
                elif prefix == ("messages.item" if legacy else "agents.item.messages.item") and _starts(event):  # fmt: skip
                    message += 1
                    where = f"messages[{message}]" if legacy else f"agents[{agent}].messages[{message}]"  # fmt: skip
                    yield self._one(where, self._message, walk.value(event, value), agent, message)
                elif prefix == "agents.item" and event == "end_map":
                    where = f"agents[{agent}]"
                    yield self._one(where, self._agent, agent)
                elif prefix == ("core_memory.item" if legacy else "blocks.item") and _starts(event):
                    block += 1
                    where = f"core_memory[{block}]" if legacy else f"blocks[{block}]"
                    value = walk.value(event, value)
                    owners = [0] if legacy else self.owners.get(value.get("id") if isinstance(value, dict) else None)  # fmt: skip
                    for owner in owners or [None]:
                        yield self._one(where, self._block, value, owner)
                elif prefix in SKIPPED and _starts(event):
                    walk.value(event, value)
                    yield self._skipped()
                elif legacy and prefix == "" and event == "end_map":
                    yield self._one("the agent", self._agent, 0)
        except ijson.JSONError as exc:
            yield self._broken(where, exc)

    def passages(self, src: Any) -> Iterator[Item]:
        index = -1
        try:
            for index, passage in enumerate(ijson.items(src, "item", use_float=True)):  # noqa: B007
                yield self._one(f"[{index}]", self._passage, passage)
        except ijson.JSONError as exc:
            yield self._broken(f"item {index}" if index >= 0 else "its start", exc)

    # -- shared
    def _agent_of(self, index: int | None) -> dict[str, Any]:
        agents = self.head.get("agents") or []
        return agents[index] if index is not None and 0 <= index < len(agents) else {}

    def _values(self, agent: dict[str, Any], **more: Any) -> dict[str, Any]:
        options = self.options
        return {"agent_name": agent.get("name") or options.get("agent_name"),
                "agent_id": agent.get("id") or options.get("agent_id"),
                "agent_type": agent.get("agent_type"), "user_id": options.get("user_id"), **more}  # fmt: skip

    def _untimed(self) -> str:
        """When a record with no time of its own (a v2 block, an agent) was observed."""
        return (self.options.get("observed_at") and timestamp(self.options["observed_at"])) or \
            timestamp(self.head.get("time")) or self.latest or self.options["imported_at"]  # fmt: skip

    def _user(self) -> dict[str, Any]:
        return actor("user", self.options.get("user_id") or "letta_user")

    def _common(self, agent: dict[str, Any], record: str) -> dict[str, Any]:
        labels = {"letta_record": record, "letta_format": self.fmt}
        if agent.get("name") or self.options.get("agent_name"):
            labels["letta_agent_name"] = agent.get("name") or self.options.get("agent_name")
        return labels

    def _begin_agent(self, index: int) -> None:
        agent = self._agent_of(index)
        self.context = {}
        if self.fmt == "agent_file_legacy":
            indices = agent.get("in_context_message_indices")
            self.wanted = {i for i in indices if isinstance(i, int)} if isinstance(indices, list) else set()  # fmt: skip
        else:
            ids = agent.get("in_context_message_ids")
            self.wanted = {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else set()

    # -- messages
    def _message(self, msg: Any, agent_index: int, number: int) -> dict[str, Any]:
        if not isinstance(msg, dict):
            raise RecordError("invalid_record", "a Letta message must be an object")
        role = msg.get("role")
        if role not in ROLES:
            raise RecordError("invalid_record", f"role {str(role)[:40]!r} is not a Letta message role ({', '.join(ROLES)})")  # fmt: skip
        raw_time = msg.get("created_at")
        created = timestamp(raw_time)
        if created is None:
            raise RecordError("invalid_record", "a Letta message needs its created_at")
        content = msg["content"] if "content" in msg else msg.get("text")  # the first legacy files had `text`  # fmt: skip
        if not isinstance(content, str | list):
            raise RecordError("invalid_record", "a Letta message's content must be a list of parts or a string")  # fmt: skip
        tool_calls = msg.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise RecordError("invalid_record", "tool_calls must be a list")
        agent = self._agent_of(agent_index)
        name = agent.get("name") or self.options.get("agent_name") or "letta_agent"
        text = _render(content, tool_calls or [])
        labels = self._common(agent, "message")
        directives: dict[str, Any] = {}
        envelope_text = _envelope(text) if role == "user" else None
        if envelope_text is not None:
            kind, inner, local = envelope_text
            labels["letta_envelope_type"] = kind
            if local:
                labels["letta_local_time"] = local
            if kind == "user_message" and inner:
                text = inner
            else:
                directives["extract"] = []
        if role == "system":
            directives["extract"] = []
        if not text.strip():
            text = _fallback(content, role)
        mapped = ROLES[role]
        if mapped != role:
            labels["letta_role"] = role
        if content != [{"type": "text", "text": text, "signature": None}]:
            labels["letta_content"] = _json(content)
        labels["letta_created_at"] = raw_time
        for field, value in msg.items():
            if field in MESSAGE_OWN:
                continue
            default, is_json = MESSAGE_FIELDS.get(field, (None, False))
            if value != default:
                labels[f"letta_{field}"] = _json(value) if is_json or isinstance(value, dict | list) else value  # fmt: skip
        recorded = timestamp(msg.get("updated_at")) or created
        self.latest = _newest(self.latest, created)
        who = self._user() if mapped == "user" else actor("agent", name)
        envelope: dict[str, Any] = {
            "scope": expand(self.options["template"], self._values(agent)), "observed_actor": who,
            "modality": "conversation", "content": {"kind": "message", "role": mapped, "text": text},
            "context": {"observed_at": created, "source_recorded_at": recorded, "labels": labels}}  # fmt: skip
        if directives:
            envelope["directives"] = directives
        call = msg.get("tool_call_id") or next((c.get("id") for c in tool_calls or () if isinstance(c, dict)), None)  # fmt: skip
        envelope["idempotency_key"] = key("letta_msg", *([call] if call else []), digest(envelope))
        context_id = number if self.fmt == "agent_file_legacy" else msg.get("id")
        if context_id in self.wanted or msg.get("in_context") is True:  # the first legacy files flagged each  # fmt: skip
            self.context[context_id] = envelope["idempotency_key"]
        return envelope

    # -- blocks
    def _block(self, block: Any, agent_index: int | None) -> dict[str, Any]:
        if not isinstance(block, dict):
            raise RecordError("invalid_record", "a Letta memory block must be an object")
        label, value = block.get("label"), block.get("value")
        if not isinstance(label, str) or not label:
            raise RecordError("invalid_record", "a Letta memory block needs its label")
        if not isinstance(value, str):
            raise RecordError("invalid_record", "a Letta memory block's value must be a string")
        agent = self._agent_of(agent_index)
        fields = dict(block)
        if self.fmt == "agent_file_legacy":
            fields["metadata"] = fields.pop("metadata_", None) or {}
        labels = self._common(agent, "block")
        for field, item in fields.items():
            if field in ("value", "id"):
                continue
            default, is_json = BLOCK_FIELDS.get(field, (None, False))
            if item != default or field in BLOCK_ALWAYS:
                labels[f"letta_block_{field}"] = _json(item) if is_json or isinstance(item, dict | list) else item  # fmt: skip
        if label in CONCEPTS:
            labels["letta_concept"] = CONCEPTS[label]
        if not value.strip():
            labels["letta_block_empty"] = True
        if self.fmt == "agent_file_legacy":
            observed = timestamp(block.get("updated_at")) or timestamp(block.get("created_at")) or self._untimed()  # fmt: skip
        else:
            observed = self._untimed()
        name = agent.get("name") or self.options.get("agent_name") or "letta_agent"
        envelope: dict[str, Any] = {
            "scope": expand(self.options["template"], self._values(agent)), "observed_actor": actor("agent", name),
            "subject": self._user() if label == "human" else actor("agent", name), "modality": "imported",
            "content": {"kind": "text", "text": value if value.strip() else f"(empty {label} block)"},
            "context": {"observed_at": observed, "source_recorded_at": observed, "labels": labels}}  # fmt: skip
        envelope["idempotency_key"] = key("letta_block", digest(envelope))
        return envelope

    # -- agents
    def _agent(self, index: int) -> dict[str, Any]:
        raw = self._agent_of(index)
        legacy = self.fmt == "agent_file_legacy"
        settings = _legacy_settings(raw) if legacy else {k: v for k, v in raw.items() if k not in AGENT_OWN}  # fmt: skip
        for secret in ("tool_exec_environment_variables", "secrets"):
            if isinstance(settings.get(secret), dict):
                settings[secret] = dict.fromkeys(settings[secret], "")  # values are secrets: never stored  # fmt: skip
        if legacy:
            tools = [{k: v for k, v in t.items() if k not in LEGACY_TOOL_DROP} for t in raw.get("tools") or ()
                     if isinstance(t, dict)]  # fmt: skip
            blocks = [b.get("label") for b in raw.get("core_memory") or () if isinstance(b, dict)]
            order = raw.get("in_context_message_indices") or sorted(self.context)
        else:
            tools = [{k: v for k, v in self.head["tools"][t].items() if k != "id"}
                     for t in raw.get("tool_ids") or () if t in self.head["tools"]]  # fmt: skip
            blocks = [self.head["blocks"][b] for b in raw.get("block_ids") or () if b in self.head["blocks"]]  # fmt: skip
            order = raw.get("in_context_message_ids") or []
        name = settings.get("name") or self.options.get("agent_name") or "letta_agent"
        data = {"agent": settings, "tools": tools, "block_labels": blocks,
                "in_context": [self.context[m] for m in order if m in self.context],
                "file": {"format": self.fmt, "created_at": self.head.get("created_at"), "metadata": self.head.get("metadata"),
                         **({"version": raw.get("version"), "updated_at": raw.get("updated_at")} if legacy else {})}}  # fmt: skip
        observed = self._untimed()
        labels = {**self._common(raw, "agent"), "letta_agent_type": settings.get("agent_type")}
        if self.head.get("created_at") is not None:
            labels["letta_file_created_at"] = self.head["created_at"]
        summary = f"Letta agent {name} ({settings.get('agent_type') or 'unknown type'})"
        if settings.get("description"):
            summary += f": {settings['description']}"
        envelope: dict[str, Any] = {
            "scope": expand(self.options["template"], self._values(raw)), "observed_actor": actor("agent", name),
            "modality": "imported", "content": {"kind": "json", "data": data, "text": summary},
            "context": {"observed_at": observed, "source_recorded_at": observed, "labels": labels},
            "directives": {"extract": []}}  # fmt: skip
        envelope["idempotency_key"] = key("letta_agent", digest(envelope))
        return envelope

    # -- passages
    def _passage(self, passage: Any) -> dict[str, Any]:
        if not isinstance(passage, dict) or not isinstance(passage.get("text"), str) or not passage["text"].strip():  # fmt: skip
            raise RecordError("invalid_record", "a Letta passage needs a non-empty string 'text'")
        if not isinstance(passage.get("id"), str) or not passage["id"]:
            raise RecordError("invalid_record", "a Letta passage needs its string 'id'")
        created, updated = timestamp(passage.get("created_at")), timestamp(passage.get("updated_at"))  # fmt: skip
        observed = created or updated or self.options.get("observed_at") or self.options["imported_at"]  # fmt: skip
        labels = self._common({}, "passage")
        for field, value in passage.items():
            if field not in ("text", "embedding") and value is not None:
                labels[f"letta_passage_{field}"] = _json(value) if isinstance(value, dict | list) else value  # fmt: skip
        name = self.options.get("agent_name")
        envelope: dict[str, Any] = {
            "scope": expand(self.options["template"], self._values({}, archive_id=passage.get("archive_id"))),
            "observed_actor": actor("agent", name) if name else actor("app", "letta"), "modality": "imported",
            "content": {"kind": "text", "text": passage["text"]},
            "context": {"observed_at": observed, "source_recorded_at": updated or created, "labels": labels}}  # fmt: skip
        if passage.get("is_deleted"):
            envelope["directives"] = {"extract": []}
        envelope["idempotency_key"] = key("letta_p", passage["id"].removeprefix("passage-"), digest(envelope))  # fmt: skip
        return envelope


def _refuse(reason: str) -> dict[str, Any]:
    raise RecordError("invalid_record", reason)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _legacy_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """A legacy agent's settings under their v2 names (what a v2 export writes back)."""
    tags = [t.get("tag") if isinstance(t, dict) else t for t in raw.get("tags") or ()]
    env = raw.get("tool_exec_environment_variables") or []
    settings = {"name": raw.get("name"), "tool_rules": raw.get("tool_rules") or [], "tags": tags,
                "system": raw.get("system"), "agent_type": raw.get("agent_type"), "description": raw.get("description"),
                "metadata": raw.get("metadata_"), "llm_config": raw.get("llm_config"),
                "embedding_config": raw.get("embedding_config"),
                "message_buffer_autoclear": bool(raw.get("message_buffer_autoclear")),
                "tool_exec_environment_variables": {e.get("key"): "" for e in env if isinstance(e, dict) and e.get("key")}}  # fmt: skip
    return settings


def _render(content: str | list, tool_calls: list) -> str:
    """The readable text of a message: its text parts, then its tool calls."""
    if isinstance(content, str):
        pieces = [content]
    else:
        pieces = []
        for part in content:
            if not isinstance(part, dict):
                raise RecordError("invalid_record", "a content part must be an object")
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif kind == "tool_call" and part.get("name"):
                pieces.append(_call(part["name"], part.get("input")))
            elif kind == "tool_return" and isinstance(part.get("content"), str):
                pieces.append(part["content"])
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            raise RecordError("invalid_record", "a tool call needs function.name")
        pieces.append(_call(function["name"], function.get("arguments")))
    return "\n".join(p for p in pieces if p)


def _call(name: str, arguments: Any) -> str:
    args = arguments
    if isinstance(arguments, str):
        try:
            args = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return f"{name}({arguments})"
    if name == "send_message" and isinstance(args, dict) and isinstance(args.get("message"), str):
        return args["message"]  # the reply the user saw
    if isinstance(args, dict):
        inner = ", ".join(f"{k}: {v if isinstance(v, str) else _json(v)}" for k, v in args.items())
        return f"{name}({inner})"
    return f"{name}({'' if args is None else _json(args)})"


def _fallback(content: str | list, role: str) -> str:
    """A text for a message with nothing readable (an image alone, reasoning alone)."""
    pieces: list[str] = []
    for part in content if isinstance(content, list) else ():
        if part.get("type") == "reasoning" and isinstance(part.get("reasoning"), str):
            pieces.append(part["reasoning"])
        elif part.get("type") == "summarized_reasoning":
            pieces.extend(s.get("text", "") for s in part.get("summary") or () if isinstance(s, dict))  # fmt: skip
        elif part.get("type") == "image":
            pieces.append("[image]")
    text = "\n".join(p for p in pieces if p)
    return text if text.strip() else f"[empty {role} message]"


def _envelope(text: str) -> tuple[str, str | None, str | None] | None:
    """A MemGPT user-turn envelope's (type, message, local time), or None."""
    if not text.startswith("{") or '"type"' not in text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("type") not in ENVELOPES:
        return None
    message = value.get("message")
    return value["type"], message if isinstance(message, str) else None, str(value["time"]) if value.get("time") else None  # fmt: skip


# -- export ----------------------------------------------------------------------------------------
AGENT_DEFAULTS: dict[str, Any] = {
    "memory_blocks": [], "tools": [], "source_ids": [], "folder_ids": None, "tool_rules": [], "tags": [],
    "system": None, "agent_type": "letta_v1_agent", "initial_message_sequence": None, "include_base_tools": True,
    "include_multi_agent_tools": False, "include_base_tool_rules": None, "include_default_source": False,
    "description": None, "metadata": None, "llm_config": None, "embedding_config": None, "model": None,
    "embedding": None, "message_buffer_autoclear": False, "timezone": "UTC"}  # fmt: skip
DEFAULT_SYSTEM = "You are a helpful agent with persistent memory."


def export(records: Iterable[dict[str, Any]], out: BinaryIO, fmt: str, options: dict[str, Any]) -> dict[str, int]:  # fmt: skip
    """Write ``records`` (a scope's events, then its derived records) as one Agent File v2
    agent.  Message events (``content.kind == "message"``, ours or imported from Letta) become
    its messages, written as they arrive; Letta block events its blocks (the latest version of each
    label); the latest Letta agent event its settings, tools and in-context list.  Without one,
    the agent is built from the scope: the name ``options.agent_name`` or the scope's last
    segment, Letta's base tools, every message in context after a system message.  Letta
    passages (no ``.af`` has them), other events and derived records are counted ``skipped``.
    State kept: each imported message's key (for the in-context list), the blocks, one agent."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidBody(f"the Letta exporter writes {list(EXPORT_FORMATS)}, not {str(fmt)[:40]!r}")  # fmt: skip
    written = skipped = 0
    blocks: dict[str, tuple[str, dict[str, Any]]] = {}
    snapshot: tuple[str, dict[str, Any], str] | None = None
    keys: dict[str, int] = {}  # idempotency key of an imported message -> its index
    roles = bytearray()  # 1 where the message is a system message
    first_time: str | None = None
    latest: str | None = None
    scope: str | None = None
    out.write(b'{"agents": [{"messages": [')
    for record in records:
        if record.get("record") != "event":
            skipped += 1
            continue
        context = record.get("context") or {}
        labels = context.get("labels") if isinstance(context.get("labels"), dict) else {}
        observed = context.get("observed_at") or ""
        scope = scope or record.get("scope")
        kind = labels.get("letta_record")
        content = record.get("content") or {}
        if kind == "block" and isinstance(labels.get("letta_block_label"), str):
            label = labels["letta_block_label"]
            if label in blocks and _newest(blocks[label][0], observed) != observed:
                skipped += 1
                continue
            skipped += label in blocks
            written += label not in blocks
            blocks[label] = (observed, _block_out(content, labels))
        elif kind == "agent" and isinstance(content.get("data"), dict):
            if snapshot is not None and _newest(snapshot[0], observed) != observed:
                skipped += 1
                continue
            skipped += snapshot is not None
            written += snapshot is None
            snapshot = (observed, content["data"], labels.get("letta_agent_name") or "")
        elif content.get("kind") == "message" and content.get("role") in ("user", "assistant", "system", "tool"):  # fmt: skip
            message = _message_out(content, labels, observed, len(roles))
            out.write((b",\n" if roles else b"\n") + orjson.dumps(message))
            roles.append(message["role"] == "system")
            if isinstance(record.get("idempotency_key"), str) and record["idempotency_key"].startswith("letta_msg"):  # fmt: skip
                keys[record["idempotency_key"]] = len(roles) - 1
            first_time = observed if first_time is None or _newest(first_time, observed) == first_time else first_time  # fmt: skip
            latest = _newest(latest, observed)
            written += 1
        else:
            skipped += 1  # passages, notes, documents...: no place in an Agent File
    data = snapshot[1] if snapshot else {}
    settings = dict(data.get("agent") or {}) if snapshot else _settings(options, scope)
    in_context = array("q", (keys[k] for k in data.get("in_context") or () if k in keys))
    if roles and (not in_context or not roles[in_context[0]]):
        system = {**_message_out({"role": "system", "text": settings.get("system") or DEFAULT_SYSTEM}, {},
                                 first_time or latest or "", len(roles)), "created_at": first_time or latest}  # fmt: skip
        out.write(b",\n" + orjson.dumps(system))
        in_context = array("q", [len(roles), *(in_context if snapshot else range(len(roles)))])
        roles.append(1)
    tools = [t for t in data.get("tools") or () if isinstance(t, dict)]
    labels_order = [b for b in data.get("block_labels") or () if b in blocks]
    labels_order += [b for b in blocks if b not in labels_order]
    for name in ("source_ids", "folder_ids"):
        if settings.get(name):
            settings[name] = []  # sources and files are not imported: nothing to point at
    agent = {**settings, "id": "agent-0",
             "tool_ids": [f"tool-{i}" for i in range(len(tools))],
             "block_ids": [f"block-{i}" for i in range(len(labels_order))],
             "in_context_message_ids": [f"message-{i}" for i in in_context],
             "files_agents": [], "group_ids": []}  # fmt: skip
    out.write(b"\n]")
    for field, value in agent.items():
        if field != "messages":
            out.write(b", " + orjson.dumps(field) + b": " + orjson.dumps(value))
    out.write(b"}],\n")
    file = data.get("file") or {}
    created = options.get("exported_at") or file.get("created_at") or _newest(latest, *(o for o, _ in blocks.values()))  # fmt: skip
    tail = {"groups": [], "blocks": [{**blocks[label][1], "id": f"block-{i}"} for i, label in enumerate(labels_order)],
            "files": [], "sources": [], "tools": [{"id": f"tool-{i}", **t} for i, t in enumerate(tools)],
            "mcp_servers": [], "skills": [], "metadata": file.get("metadata") or {}, "created_at": created}  # fmt: skip
    out.write(orjson.dumps(tail)[1:])
    return {"written": written, "skipped": skipped}


def _newest(*times: str | None) -> str | None:
    """The latest of RFC 3339 ``times`` (None and unparseable ones ignored); the last of equals."""
    best, best_at = None, None
    for text in times:
        at = try_parse_rfc3339(text) if isinstance(text, str) else None
        if at is not None and (best_at is None or at >= best_at):
            best, best_at = text, at
    return best


def _labelled(labels: dict[str, Any], prefix: str, fields: dict[str, tuple[Any, bool]], field: str) -> Any:  # fmt: skip
    default, is_json = fields[field]
    name = prefix + field
    if name not in labels:
        return default
    value = labels[name]
    if is_json and isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return default
    return value


def _message_out(content: dict[str, Any], labels: dict[str, Any], observed: str, index: int) -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {}
    for field in MESSAGE_FIELDS:
        message[field] = _labelled(labels, "letta_", MESSAGE_FIELDS, field)
    message["role"] = labels.get("letta_role") or content.get("role")
    if "letta_content" not in labels:
        message["content"] = [{"type": "text", "text": content.get("text") or "", "signature": None}]  # fmt: skip
    message["id"] = f"message-{index}"
    message["agent_id"] = "agent-0"
    message["created_at"] = labels.get("letta_created_at") or observed
    return message


def _block_out(content: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    block = {field: _labelled(labels, "letta_block_", BLOCK_FIELDS, field) for field in BLOCK_FIELDS if field != "id"}  # fmt: skip
    block["value"] = "" if labels.get("letta_block_empty") else content.get("text") or ""
    return block


def _settings(options: dict[str, Any], scope: str | None) -> dict[str, Any]:
    """An agent for a scope that no Letta agent was imported into."""
    name = options.get("agent_name") or (scope or "cortexdb").rsplit("/", 1)[-1].split(":", 1)[-1]
    name = re.sub(r"[^\w '\-]", "_", str(name))[:100] or "cortexdb"
    return {"name": name, **AGENT_DEFAULTS, "description": f"Exported from CortexDB scope {scope}" if scope else None,
            "metadata": {"cortexdb_scope": scope} if scope else None}  # fmt: skip
