"""What the Letta importer (``letta_read.py``) and exporter (``letta_export.py``) share: the
roles, the v2 fields with the value a Letta file has when they say nothing, and how a message's
readable text is made."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from ...temporal import try_parse_rfc3339
from ..mapping import RecordError

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool",
         "function": "tool", "approval": "user", "summary": "system"}  # fmt: skip
ENVELOPES = ("user_message", "login", "heartbeat", "system_alert")  # MemGPT user-turn envelopes
CONCEPTS = {"persona": "actor_self_description", "human": "actor_subject_description"}
SKIPPED = ("groups.item", "files.item", "sources.item", "mcp_servers.item", "skills.item",
           "agents.item.files_agents.item")  # fmt: skip

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


def refuse(reason: str) -> dict[str, Any]:
    raise RecordError("invalid_record", reason)


def to_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def legacy_settings(raw: dict[str, Any]) -> dict[str, Any]:
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


def render(content: str | list, tool_calls: list) -> str:
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
                pieces.append(render_call(part["name"], part.get("input")))
            elif kind == "tool_return" and isinstance(part.get("content"), str):
                pieces.append(part["content"])
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            raise RecordError("invalid_record", "a tool call needs function.name")
        pieces.append(render_call(function["name"], function.get("arguments")))
    return "\n".join(p for p in pieces if p)


def render_call(name: str, arguments: Any) -> str:
    args = arguments
    if isinstance(arguments, str):
        try:
            args = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return f"{name}({arguments})"
    if name == "send_message" and isinstance(args, dict) and isinstance(args.get("message"), str):
        return args["message"]  # the reply the user saw
    if isinstance(args, dict):
        inner = ", ".join(f"{k}: {v if isinstance(v, str) else to_json(v)}" for k, v in args.items())
        return f"{name}({inner})"
    return f"{name}({'' if args is None else to_json(args)})"


def fallback_text(content: str | list, role: str) -> str:
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


def memgpt_envelope(text: str) -> tuple[str, str | None, str | None] | None:
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


def newest(*times: str | None) -> str | None:
    """The latest of RFC 3339 ``times`` (None and unparseable ones ignored); the last of equals."""
    best, best_at = None, None
    for text in times:
        at = try_parse_rfc3339(text) if isinstance(text, str) else None
        if at is not None and (best_at is None or at >= best_at):
            best, best_at = text, at
    return best


def labelled(labels: dict[str, Any], prefix: str, fields: dict[str, tuple[Any, bool]], field: str) -> Any:  # fmt: skip
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


def field_labels(record: dict[str, Any], prefix: str, fields: dict[str, tuple[Any, bool]], skip: Collection[str],
                 always: Collection[str] = ()) -> dict[str, Any]:  # fmt: skip
    """``record``'s fields as ``prefix``-ed labels: those whose value is not the one a Letta file has
    when it says nothing (those in ``always`` whatever it is); lists and objects as JSON."""
    labels = {}
    for field, value in record.items():
        if field in skip:
            continue
        default, is_json = fields.get(field, (None, False))
        if value != default or field in always:
            labels[prefix + field] = to_json(value) if is_json or isinstance(value, dict | list) else value
    return labels
