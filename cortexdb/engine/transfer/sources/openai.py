"""ChatGPT (reference §15.4; tests/data/import/README.md §4).  Two files:

| format                  | file                                                                      |
|-------------------------|---------------------------------------------------------------------------|
| ``chatgpt_conversations`` | ``conversations.json`` of the data export (Settings → Data controls → Export data): an array of conversations (also ``{"conversations": [...]}``, or one conversation object as ``GET /backend-api/conversation/{id}`` returns it) |
| ``chatgpt_memories``      | the saved memories (``GET /backend-api/memories``: ``{"memories": [...]}``; also ``memory_entries``, ``memory_tool_config.memory_entries`` or a bare array of them). Not in the export ZIP |

**Conversations**: see ``openai_conversations.py`` (one conversation at a time, with ijson; the
branch that ends at ``current_node``, the other branches, hidden nodes, memory writes).

**Memories** → ``imported`` text events about the user: the text is the memory's latest version,
so ``updated_at`` (else ``created_timestamp``) is its ``observed_at``; key ``openai:memory`` +
id + hash of (``updated_at``, text): an edited memory is a new event.

Scope template variables: ``{conversation_id}``, ``{gizmo_id}`` (custom GPT / project; absent
on plain chats), ``{user_id}`` (``options.user_id``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson

from ....errors import InvalidBody, UnsupportedFormat
from ..mapping import Item, RecordError, actor, digest, expand, failed, key, labels, timestamp
from .openai_conversations import conversation, subject

FORMATS = ("chatgpt_conversations", "chatgpt_memories")
KEYS_NAME_SCOPE = True  # its idempotency keys already hash the target scope (or are the user's own: jsonl)
MEMORY_LISTS = {"memories": "memories.item", "memory_entries": "memory_entries.item",
                "memory_tool_config": "memory_tool_config.memory_entries.item"}  # fmt: skip
SNIFF_EVENTS = 200_000  # parse events read to find a top-level key before giving up


# -- format --------------------------------------------------------------------------------------
def sniff(path: str) -> str:
    with open(path, "rb") as fh:
        return _layout(fh)[0]


def check_options(options: dict[str, Any]) -> None:
    """400 for a bad option of this importer (``include_hidden`` from a query string: "true"/"false")."""
    hidden = options.get("include_hidden", False)
    options["include_hidden"] = {"true": True, "false": False}.get(hidden, hidden) if isinstance(hidden, str) else hidden
    if options.get("branches", "all") not in ("all", "current"):
        raise InvalidBody("options.branches must be 'all' or 'current'", details={"field": "options.branches"})
    if not isinstance(options.get("include_hidden", False), bool):
        raise InvalidBody("options.include_hidden must be a boolean", details={"field": "options.include_hidden"})


def _unsupported(reason: str) -> UnsupportedFormat:
    return UnsupportedFormat(f"not a ChatGPT export: {reason}", details={"format": None, "known": list(FORMATS)})


def _layout(fh: BinaryIO) -> tuple[str, str]:
    """(format, ijson prefix of its records), from the start of the file."""
    events = ijson.parse(fh)
    try:
        _, event, _ = next(events)
        if event == "start_array":
            return _first_item(events)
        if event != "start_map":
            raise _unsupported("neither a JSON array nor an object")
        for count, (prefix, event, value) in enumerate(events):
            if count > SNIFF_EVENTS:
                break
            if prefix == "" and event == "map_key":
                if value == "conversations":
                    return "chatgpt_conversations", "conversations.item"
                if value == "mapping":
                    return "chatgpt_conversations", ""
                if value in MEMORY_LISTS:
                    return "chatgpt_memories", MEMORY_LISTS[value]
    except StopIteration:
        raise _unsupported("the file is empty") from None
    except ijson.JSONError:
        raise _unsupported("malformed JSON") from None
    raise _unsupported("no 'mapping', 'conversations' or 'memories' at the top level")


def _first_item(events: Iterator[tuple[str, str, Any]]) -> tuple[str, str]:
    """An array: of conversations (its first item has a ``mapping``), of memories (a
    ``content`` and no ``mapping``), or empty (no conversations)."""
    keys = set()
    for prefix, event, value in events:
        if prefix == "" and event == "end_array":
            return "chatgpt_conversations", "item"
        if prefix == "item" and event not in ("start_map", "map_key", "end_map"):
            raise _unsupported("an array of something other than objects")
        if prefix == "item" and event == "map_key":
            keys.add(value)
            if value == "mapping":
                return "chatgpt_conversations", "item"
        if prefix == "item" and event == "end_map":
            break
    if "content" in keys:
        return "chatgpt_memories", "item"
    raise _unsupported(f"the first item has no 'mapping' (keys {sorted(keys)[:8]})")


# -- reading ---------------------------------------------------------------------------------------
def read(fh: BinaryIO, fmt: str, options: dict[str, Any]) -> Iterator[Item]:
    fmt_found, prefix = _layout(fh)
    fh.seek(0)
    make = conversation if fmt_found == "chatgpt_conversations" else memory
    state: dict[str, Any] = {"seen": set()}
    index = -1
    try:
        for index, record in enumerate(ijson.items(fh, prefix, use_float=True)):
            yield from make(index, record, options, state)
    except ijson.JSONError as exc:
        reason = str(exc).split("\n", 1)[0]
        yield failed(index + 1, "record", RecordError("invalid_json", f"the JSON breaks in record {index + 1}: {reason}"))


# -- memories --------------------------------------------------------------------------------------
def memory(index: int, item: Any, options: dict[str, Any], state: dict[str, Any]) -> Iterator[Item]:
    try:
        yield _memory(index, item, options)
    except RecordError as exc:
        yield failed(index, "record", exc)
    except (TypeError, AttributeError, ValueError) as exc:  # a field of an unexpected type
        yield failed(index, "record", RecordError("invalid_record", f"unexpected shape ({exc})"))


def _memory(index: int, item: Any, options: dict[str, Any]) -> Item:
    if not isinstance(item, dict) or not isinstance(item.get("content"), str) or not item["content"].strip():
        raise RecordError("invalid_record", "a ChatGPT memory needs a non-empty string 'content'")
    created, updated = timestamp(item.get("created_timestamp")), timestamp(item.get("updated_at"))
    observed = updated or created
    found = labels("openai_", {"memory_id": item.get("id"), "status": item.get("status"),
                               "created_timestamp": item.get("created_timestamp"), "updated_at": item.get("updated_at")})  # fmt: skip
    if observed is None:
        found["openai_observed_at_assumed"] = True
    scope = expand(options["template"], {"user_id": options.get("user_id")})
    envelope = {
        "scope": scope,
        "observed_actor": actor("agent", "chatgpt"), "subject": subject(options), "modality": "imported",
        "content": {"kind": "text", "text": item["content"]},
        "context": {"observed_at": observed or options.get("observed_at") or options["imported_at"],
                    "source_recorded_at": observed, "labels": found},
        "idempotency_key": key("openai", "memory", digest(scope, item.get("id"), item.get("updated_at"), item["content"])),
    }  # fmt: skip
    return Item(index, "record", envelope=envelope, replay_by_key=observed is None)
