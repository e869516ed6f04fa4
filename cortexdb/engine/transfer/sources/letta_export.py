"""The Letta exporter: a scope's records as one Agent File v2 agent (``letta.py`` re-exports
``export``; docs/import-export.md says what goes where)."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from typing import Any, BinaryIO

import orjson

from ....errors import InvalidBody
from .letta_fields import BLOCK_FIELDS, MESSAGE_FIELDS, labelled, newest

EXPORT_FORMATS = ("agent_file_v2",)
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
    writer = _Writer(out)
    out.write(b'{"agents": [{"messages": [')
    for record in records:
        writer.take(record)
    writer.finish(options)
    return {"written": writer.written, "skipped": writer.skipped}


class _Writer:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.written = self.skipped = 0
        self.blocks: dict[str, tuple[str, dict[str, Any]]] = {}  # label -> (observed_at, block)
        self.agent: tuple[str, dict[str, Any]] | None = None  # (observed_at, the agent record's data)
        self.keys: dict[str, int] = {}  # idempotency key of an imported message -> its index
        self.system = bytearray()  # per message: 1 if it is a system message
        self.first: str | None = None
        self.latest: str | None = None
        self.scope: str | None = None

    def take(self, record: dict[str, Any]) -> None:
        context = (record.get("context") or {}) if record.get("record") == "event" else {}
        labels = context.get("labels") if isinstance(context.get("labels"), dict) else {}
        observed = context.get("observed_at") or ""
        content = record.get("content") or {}
        kind = labels.get("letta_record")
        self.scope = self.scope or record.get("scope")
        if not context:
            self.skipped += 1  # derived records: an Agent File has no place for them
        elif kind == "block" and isinstance(labels.get("letta_block_label"), str):
            label = labels["letta_block_label"]
            if self._newer(self.blocks.get(label), observed):
                self.blocks[label] = (observed, block_out(content, labels))
        elif kind == "agent" and isinstance(content.get("data"), dict):
            if self._newer(self.agent, observed):
                self.agent = (observed, content["data"])
        elif content.get("kind") == "message" and content.get("role") in ("user", "assistant", "system", "tool"):  # fmt: skip
            message = message_out(content, labels, observed, len(self.system))
            self.out.write((b",\n" if self.system else b"\n") + orjson.dumps(message))
            self.system.append(message["role"] == "system")
            if str(record.get("idempotency_key")).startswith("letta_msg"):
                self.keys[record["idempotency_key"]] = len(self.system) - 1
            self.first = observed if self.first is None or newest(self.first, observed) == self.first else self.first  # fmt: skip
            self.latest = newest(self.latest, observed)
            self.written += 1
        else:
            self.skipped += 1  # passages, notes, documents...: no place in an Agent File

    def _newer(self, held: tuple[str, Any] | None, observed: str) -> bool:
        """Whether a version observed at ``observed`` replaces ``held`` (counted either way)."""
        if held is None:
            self.written += 1
            return True
        self.skipped += 1
        return newest(held[0], observed) == observed

    def finish(self, options: dict[str, Any]) -> None:
        data = self.agent[1] if self.agent else {}
        settings = dict(data.get("agent") or {}) if self.agent else scope_agent(options, self.scope)
        in_context = array("q", (self.keys[k] for k in data.get("in_context") or () if k in self.keys))
        if self.system and (not in_context or not self.system[in_context[0]]):
            when = self.first or self.latest
            system = {**message_out({"role": "system", "text": settings.get("system") or DEFAULT_SYSTEM}, {},
                                    when or "", len(self.system)), "created_at": when}  # fmt: skip
            self.out.write(b",\n" + orjson.dumps(system))
            in_context = array("q", [len(self.system), *(in_context if self.agent else range(len(self.system)))])
            self.system.append(1)
        tools = [t for t in data.get("tools") or () if isinstance(t, dict)]
        order = [b for b in data.get("block_labels") or () if b in self.blocks]
        order += [b for b in self.blocks if b not in order]
        for name in ("source_ids", "folder_ids"):
            if settings.get(name):
                settings[name] = []  # sources and files are not imported: nothing to point at
        agent = {**settings, "id": "agent-0", "tool_ids": [f"tool-{i}" for i in range(len(tools))],
                 "block_ids": [f"block-{i}" for i in range(len(order))],
                 "in_context_message_ids": [f"message-{i}" for i in in_context], "files_agents": [], "group_ids": []}  # fmt: skip
        self.out.write(b"\n]")
        for field, value in agent.items():
            if field != "messages":
                self.out.write(b", " + orjson.dumps(field) + b": " + orjson.dumps(value))
        self.out.write(b"}],\n")
        file = data.get("file") or {}
        created = options.get("exported_at") or file.get("created_at") or newest(self.latest, *(o for o, _ in self.blocks.values()))  # fmt: skip
        tail = {"groups": [], "blocks": [{**self.blocks[b][1], "id": f"block-{i}"} for i, b in enumerate(order)],
                "files": [], "sources": [], "tools": [{"id": f"tool-{i}", **t} for i, t in enumerate(tools)],
                "mcp_servers": [], "skills": [], "metadata": file.get("metadata") or {}, "created_at": created}  # fmt: skip
        self.out.write(orjson.dumps(tail)[1:])


def message_out(content: dict[str, Any], labels: dict[str, Any], observed: str, index: int) -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {}
    for field in MESSAGE_FIELDS:
        message[field] = labelled(labels, "letta_", MESSAGE_FIELDS, field)
    message["role"] = labels.get("letta_role") or content.get("role")
    if "letta_content" not in labels:
        message["content"] = [{"type": "text", "text": content.get("text") or "", "signature": None}]  # fmt: skip
    message["id"] = f"message-{index}"
    message["agent_id"] = "agent-0"
    message["created_at"] = labels.get("letta_created_at") or observed
    return message


def block_out(content: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    block = {field: labelled(labels, "letta_block_", BLOCK_FIELDS, field) for field in BLOCK_FIELDS if field != "id"}  # fmt: skip
    block["value"] = "" if labels.get("letta_block_empty") else content.get("text") or ""
    return block


def scope_agent(options: dict[str, Any], scope: str | None) -> dict[str, Any]:
    """An agent for a scope that no Letta agent was imported into."""
    name = options.get("agent_name") or (scope or "cortexdb").rsplit("/", 1)[-1].split(":", 1)[-1]
    name = re.sub(r"[^\w '\-]", "_", str(name))[:100] or "cortexdb"
    return {"name": name, **AGENT_DEFAULTS, "description": f"Exported from CortexDB scope {scope}" if scope else None,
            "metadata": {"cortexdb_scope": scope} if scope else None}  # fmt: skip

