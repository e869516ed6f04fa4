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
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson
import orjson

from ....errors import InvalidBody, UnsupportedFormat
from ..mapping import Item
from .letta_export import EXPORT_FORMATS, export
from .letta_json import HEAD, document
from .letta_read import Reader, prescan

__all__ = ["ANY_DECLARED", "EXPORT_FORMATS", "FORMATS", "export", "read", "sniff"]

FORMATS = ("agent_file_v2", "agent_file_legacy", "letta_passages", "letta_af")
KEYS_NAME_SCOPE = True  # its idempotency keys already hash the target scope (or are the user's own: jsonl)
ANY_DECLARED = True  # "letta_af" names any of them: the file says which
LEGACY_VERSION = re.compile(r"^0\.(?:[6-9]|1[01])\.\d+")  # the Letta releases that wrote it
TAIL = 4096  # the end of a file Letta writes created_at (v2) or version (legacy, keys sorted) in


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
        return _sniff_object(document(fh), tail)


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


# -- read ------------------------------------------------------------------------------------------
def check_options(options: dict[str, Any]) -> None:
    """400 at the start for an option value this importer does not support."""
    for name in ("map_core_blocks_to", "map_archival_to"):
        if options.get(name) not in (None, "events"):
            raise InvalidBody(f"options.{name}={str(options[name])[:40]!r} is not supported: Letta blocks and "
                              "passages import as events (the Understanding layer is not built)",
                              details={"field": f"options.{name}"})  # fmt: skip


def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    check_options(options)
    if fmt == "letta_passages":
        yield from Reader(fmt, {}, options).passages(document(fh))
        return
    head = prescan(document(fh), fmt)
    yield from Reader(fmt, head, options).document(document(fh))


