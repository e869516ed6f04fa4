"""ChatGPT's ``conversations.json`` (the ``chatgpt_conversations`` format of ``openai.py``;
tests/data/import/README.md §4).

**Conversations** are parsed one at a time (ijson): a conversation's ``mapping`` is a tree of
message nodes and ``current_node`` the leaf of the branch the user saw.  Every node is read in
tree order; each message is one of:

- *said* (what the UI shows; the rules of pionxzh/chatgpt-exporter: not addressed to a tool,
  not ``thoughts``/``reasoning_recap``, not visually hidden or a thinking preamble, not a system
  message, not an empty assistant text, not a tool message unless it shows an image) →
  ``conversation`` event, ``kind: message`` with its role, the text parts joined (an image or
  audio part is kept in ``openai_assets``; a message of images only reads ``[image …]``).
  Messages on the path to ``current_node`` are labelled ``openai_on_path: true``.  **Other
  branches** (a prompt the user edited, a regenerated answer) are real but abandoned history:
  they are imported with ``openai_on_path: false`` and ``directives.extract: []`` (kept and
  searchable, but no facts are derived from them); ``options.branches: "current"`` skips them.
  Without a usable ``current_node`` the path ends at the most recently created leaf.
- a *memory write*: the assistant's message to the ``bio`` tool (the only timestamped record
  of a memory being saved) → ``imported`` text event, ``openai_memory_write: true``, on any
  branch (the tool ran);
- the *memory snapshot* (``model_editable_context``) → one ``imported`` event per saved memory
  it lists (``"N. [date]. text"``; observed at that date), each written once per file however
  many conversations repeat it (keyed by date and text);
- the *custom instructions* (``user_editable_context``, or an older system message with
  ``is_user_system_message``) → one ``imported`` event per distinct version in the file, from
  the user;
- anything else (hidden system nodes, reasoning, tool calls and their output, browsing noise,
  the ``bio`` tool's "Model set context updated.") is skipped and counted as ``skipped``, as
  the exporters do.  ``options.include_hidden: true`` imports those with text as events too
  (``openai_hidden: true``, no extraction).

Consecutive assistant nodes ("Continue generating") stay separate events (one per node: their
keys).  A conversation marked ``is_do_not_remember`` is imported with ``directives.extract: []``.
``message.create_time`` (epoch seconds) is ``observed_at`` (else the conversation's
``create_time``), ``update_time`` ``source_recorded_at``.  Keys: ``(conversation_id, node id)``
(never the node id alone: ``client-created-root`` is the same in every conversation); the
memory snapshot lines and custom instructions are keyed by their content.  Actors: the user
is ``user:<options.user_id>`` (default ``user:chatgpt_user``), the assistant ``agent:chatgpt``,
both with the conversation id as ``session``; the user is the subject of every event.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..mapping import Item, RecordError, actor, digest, expand, failed, key, labels, timestamp

ROLES = {"user": "user", "assistant": "assistant", "tool": "tool", "function": "tool", "system": "system"}
HIDDEN_TYPES = {"thoughts", "reasoning_recap"}
_SNAPSHOT_LINE = re.compile(r"^\s*(?:\d+\.\s*)?(?:\[(\d{4}-\d{2}-\d{2})\]\.?\s*)?(.*\S)\s*$")


def _user(options: dict[str, Any], session: Any = None) -> dict[str, Any]:
    return actor("user", options.get("user_id") or "chatgpt_user", session)


def subject(options: dict[str, Any]) -> dict[str, Any]:
    return {"id": _user(options)["id"], "type": "user"}


def conversation(index: int, conv: Any, options: dict[str, Any], state: dict[str, Any]) -> Iterator[Item]:
    if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
        yield failed(index, "record", RecordError("invalid_record", "a ChatGPT conversation needs its 'mapping' object"))
        return
    cid = conv.get("conversation_id") or conv.get("id")
    if not isinstance(cid, str) or not cid:
        yield failed(index, "record", RecordError("invalid_record", "a ChatGPT conversation needs its 'id'"))
        return
    mapping: dict[str, Any] = conv["mapping"]
    try:
        values = {"conversation_id": cid, "gizmo_id": conv.get("gizmo_id"), "user_id": options.get("user_id")}
        base = {"scope": expand(options["template"], values), "cid": cid, "conv": conv,
                "started": timestamp(conv.get("create_time")), "path": _path(mapping, conv.get("current_node")),
                "quiet": bool(conv.get("is_do_not_remember"))}  # fmt: skip
    except RecordError as exc:
        yield failed(index, "record", RecordError(exc.code, f"conversation {cid}: {exc.detail}"))
        return
    for node_id in _tree_order(mapping):
        node = mapping[node_id]
        message = node.get("message") if isinstance(node, dict) else None
        if message is None and isinstance(node, dict):
            continue  # the root: no message, nothing to import
        try:
            made = _node(node_id, node, message, options, state, base)
        except RecordError as exc:
            yield failed(index, "record", RecordError(exc.code, f"conversation {cid}, node {node_id}: {exc.detail}"))
            continue
        except (TypeError, AttributeError, ValueError) as exc:  # a field of an unexpected type
            yield failed(index, "record", RecordError("invalid_record", f"conversation {cid}, node {node_id}: "
                                                                        f"unexpected shape ({exc})"))  # fmt: skip
            continue
        for envelope, by_key in made:
            yield Item(index, "record", envelope=envelope, replay_by_key=by_key)


def _path(mapping: dict[str, Any], current: Any) -> set[str]:
    """The node ids from ``current`` (else the latest-created leaf) up to the root."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [(_created(node), -n, node_id) for n, (node_id, node) in enumerate(mapping.items())
                  if isinstance(node, dict) and not node.get("children")]  # fmt: skip
        current = max(leaves)[2] if leaves else None
    path: set[str] = set()
    while isinstance(current, str) and current in mapping and current not in path:
        path.add(current)
        node = mapping[current]
        current = node.get("parent") if isinstance(node, dict) else None
    return path


def _created(node: dict[str, Any]) -> float:
    message = node.get("message")
    value = message.get("create_time") if isinstance(message, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("-inf")


def _tree_order(mapping: dict[str, Any]) -> list[str]:
    """Every node id, depth first from the roots with children in their order (an edit or a
    regeneration after its older sibling); nodes no root reaches (a broken tree) at the end."""
    order: list[str] = []
    seen: set[str] = set()
    roots = [n for n, node in mapping.items()
             if not isinstance(node, dict) or node.get("parent") is None or node.get("parent") not in mapping]  # fmt: skip
    for root in [*roots, *mapping]:
        stack = [root]
        while stack:
            node_id = stack.pop()
            if node_id in seen or node_id not in mapping:
                continue
            seen.add(node_id)
            order.append(node_id)
            node = mapping[node_id]
            children = node.get("children") if isinstance(node, dict) else None
            if isinstance(children, list):
                stack.extend(c for c in reversed(children) if isinstance(c, str))
    return order


def _node(node_id: str, node: Any, message: Any, options: dict[str, Any], state: dict[str, Any],
          base: dict[str, Any]) -> list[tuple[dict[str, Any] | None, bool]]:  # fmt: skip
    """The envelopes of one message (None: skipped), each with its ``replay_by_key``."""
    if not isinstance(node, dict) or not isinstance(message, dict):
        raise RecordError("invalid_record", "a node must be an object with a message object or null")
    author, content = message.get("author"), message.get("content")
    if not isinstance(author, dict) or not isinstance(content, dict):
        raise RecordError("invalid_record", "a message needs its 'author' and 'content' objects")
    role = ROLES.get(author["role"]) if isinstance(author.get("role"), str) else None
    if role is None:
        raise RecordError("invalid_record", f"unknown author role {str(author.get('role'))[:40]!r}")
    ctype = content.get("content_type") if isinstance(content.get("content_type"), str) else None
    meta = _meta(message)
    recipient = message.get("recipient") if isinstance(message.get("recipient"), str) else "all"
    if ctype == "user_editable_context" or (role == "system" and meta.get("is_user_system_message")):
        return _instructions(message, content, meta, options, state, base)
    if ctype == "model_editable_context":
        return _snapshot(node_id, message, content, options, state, base)
    text, assets = _text(content)
    if recipient == "bio" and role == "assistant":
        if not text.strip():
            return [(None, False)]
        return [(_event(node_id, node, message, options, base, "imported", {"kind": "text", "text": text},
                        {"memory_write": True}, extract=True), False)]  # fmt: skip
    if not text.strip() and assets:
        text = "[" + ", ".join(a.get("name") or a.get("content_type") or "attachment" for a in assets) + "]"
    said = _said(role, recipient, ctype, meta, text, assets)
    if not text.strip() or not (said or options.get("include_hidden")):
        return [(None, False)]
    on_path = node_id in base["path"]
    if said and not on_path and options.get("branches") == "current":
        return [(None, False)]
    extra: dict[str, Any] = {"on_path": on_path}
    if assets:
        extra["assets"] = assets
    if not said:
        extra.update(hidden=True, recipient=recipient)
    return [(_event(node_id, node, message, options, base, "conversation",
                    {"kind": "message", "role": role, "text": text}, extra,
                    extract=said and on_path), False)]  # fmt: skip


def _meta(message: dict[str, Any]) -> dict[str, Any]:
    return message["metadata"] if isinstance(message.get("metadata"), dict) else {}


def _said(role: str, recipient: str, ctype: Any, meta: dict[str, Any], text: str, assets: list) -> bool:
    """Whether the ChatGPT UI shows the message (what the exporters keep)."""
    if recipient != "all" or ctype in HIDDEN_TYPES or role == "system":
        return False
    if meta.get("is_visually_hidden_from_conversation") or meta.get("is_thinking_preamble_message"):
        return False
    if role == "tool":  # only a tool's image (a chart, a generated picture) is shown
        images = meta.get("aggregate_result", {}) if isinstance(meta.get("aggregate_result"), dict) else {}
        shown = any(isinstance(m, dict) and m.get("message_type") == "image" for m in images.get("messages") or [])
        return shown or any(a.get("content_type") == "image_asset_pointer" for a in assets)
    return role != "assistant" or bool(text.strip())


def _text(content: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The readable text of a message's content, and its asset parts (images, audio)."""
    ctype = content.get("content_type")
    texts: list[str] = []
    assets: list[dict[str, Any]] = []
    parts = content.get("parts")
    if isinstance(parts, list):
        for part in parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):  # audio_transcription
                    texts.append(part["text"])
                else:
                    assets.append({k: part[k] for k in ("content_type", "asset_pointer", "size_bytes", "width",
                                                        "height", "name") if part.get(k) is not None})  # fmt: skip
        return "\n".join(t for t in texts if t), assets
    if ctype == "thoughts":
        thoughts = content.get("thoughts") if isinstance(content.get("thoughts"), list) else []
        lines = [": ".join(p for p in (t.get("summary"), t.get("content")) if isinstance(p, str) and p)
                 for t in thoughts if isinstance(t, dict)]  # fmt: skip
        return "\n".join(line for line in lines if line), assets
    for field in ("text", "content", "result", "summary", "title"):  # code, execution_output, tether_*, ...
        if isinstance(content.get(field), str):
            return content[field], assets
    return "", assets


def _event(node_id: str, node: dict[str, Any], message: dict[str, Any], options: dict[str, Any],
           base: dict[str, Any], modality: str, content: dict[str, Any], extra: dict[str, Any], *,
           extract: bool) -> dict[str, Any]:  # fmt: skip
    conv, cid = base["conv"], base["cid"]
    author = message["author"]
    meta = _meta(message)
    created = timestamp(message.get("create_time"))
    when = created or base["started"] or options.get("observed_at") or options["imported_at"]
    who = _user(options, cid) if author.get("role") == "user" else actor("agent", "chatgpt", cid)
    found = labels("openai_", {
        "conversation_id": cid, "node_id": node_id, "parent_id": node.get("parent"), "title": conv.get("title"),
        "content_type": message["content"].get("content_type"), "author_name": author.get("name"),
        "model_slug": meta.get("model_slug"), "create_time": message.get("create_time"),
        "gizmo_id": conv.get("gizmo_id"), "is_archived": conv.get("is_archived") or None,
        "do_not_remember": base["quiet"] or None, **extra})  # fmt: skip
    if created is None:
        found["openai_observed_at_assumed"] = True
    envelope: dict[str, Any] = {
        "scope": base["scope"], "observed_actor": who, "subject": subject(options), "modality": modality,
        "content": content,
        "context": {"observed_at": when, "source_recorded_at": timestamp(message.get("update_time")) or created,
                    "labels": found},
        "idempotency_key": key("openai", digest(base["scope"], cid, node_id)),
    }  # fmt: skip
    if not extract or base["quiet"]:
        envelope["directives"] = {"extract": []}
    return envelope


def _instructions(message: dict[str, Any], content: dict[str, Any], meta: dict[str, Any], options: dict[str, Any],
                  state: dict[str, Any], base: dict[str, Any]) -> list[tuple[dict[str, Any] | None, bool]]:  # fmt: skip
    """The custom instructions: once per distinct version in the file."""
    data = meta.get("user_context_message_data") if isinstance(meta.get("user_context_message_data"), dict) else {}
    about_user = data.get("about_user_message") or content.get("user_profile")
    about_model = data.get("about_model_message") or content.get("user_instructions")
    if about_user is None and about_model is None:  # an older export: a system text message
        about_user = _text(content)[0]
    text = "\n".join(f"{head}{value.strip()}" for head, value in (("About me: ", about_user), ("How to respond: ", about_model))
                     if isinstance(value, str) and value.strip())  # fmt: skip
    ident = key("openai", "instructions", digest(base["scope"], text))
    if not text or ident in state["seen"]:
        return [(None, False)]
    state["seen"].add(ident)
    when = timestamp(message.get("create_time")) or base["started"] or options.get("observed_at") or options["imported_at"]
    return [({
        "scope": base["scope"], "observed_actor": _user(options, base["cid"]), "subject": subject(options),
        "modality": "imported", "content": {"kind": "text", "text": text},
        "context": {"observed_at": when, "labels": {"openai_custom_instructions": True, "openai_observed_at_assumed": True,
                                                    "openai_content_type": content.get("content_type"),
                                                    "openai_conversation_id": base["cid"]}},
        "idempotency_key": ident,
    }, True)]  # fmt: skip


def _snapshot(node_id: str, message: dict[str, Any], content: dict[str, Any], options: dict[str, Any],
              state: dict[str, Any], base: dict[str, Any]) -> list[tuple[dict[str, Any] | None, bool]]:  # fmt: skip
    """The saved memories the conversation was given: one event per memory, once per file."""
    text = content.get("model_set_context")
    out: list[tuple[dict[str, Any] | None, bool]] = []
    for line in text.splitlines() if isinstance(text, str) else []:
        match = _SNAPSHOT_LINE.match(line)
        if match is None:
            continue
        date, memory_text = match.groups()
        ident = key("openai", "context", digest(base["scope"], date, memory_text))
        if ident in state["seen"]:
            continue
        state["seen"].add(ident)
        when = (timestamp(date) or timestamp(message.get("create_time")) or base["started"]
                or options.get("observed_at") or options["imported_at"])  # fmt: skip
        out.append(({
            "scope": base["scope"], "observed_actor": actor("agent", "chatgpt"), "subject": subject(options),
            "modality": "imported", "content": {"kind": "text", "text": memory_text},
            "context": {"observed_at": when,
                        "labels": labels("openai_", {"content_type": "model_editable_context", "memory_date": date,
                                                     "conversation_id": base["cid"], "node_id": node_id,
                                                     "observed_at_assumed": None if date else True})},
            "idempotency_key": ident,
        }, True))  # fmt: skip
    return out or [(None, False)]
