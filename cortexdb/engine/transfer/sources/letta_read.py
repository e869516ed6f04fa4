"""The Letta importer's two passes over a document (``letta.py`` names the formats and the
mapping): ``prescan`` keeps the small parts, ``Reader`` maps every record to an ``Item``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ijson

from ..mapping import Item, RecordError, actor, digest, expand, failed, key, timestamp
from .letta_fields import (
    AGENT_OWN,
    BLOCK_ALWAYS,
    BLOCK_FIELDS,
    CONCEPTS,
    LEGACY_TOOL_DROP,
    MESSAGE_FIELDS,
    MESSAGE_OWN,
    ROLES,
    SKIPPED,
    fallback_text,
    field_labels,
    legacy_settings,
    memgpt_envelope,
    newest,
    refuse,
    render,
    to_json,
)
from .letta_json import Walk, starts


def prescan(src: Any, fmt: str) -> dict[str, Any]:
    """Pass 1: everything but messages (and blocks' values), wherever it is in the file."""
    head: dict[str, Any] = {"created_at": None, "metadata": None, "agents": [], "tools": {}, "blocks": {}}  # fmt: skip
    walk = Walk(src)
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
            elif prefix == "tools.item" and starts(event):
                tool = walk.value(event, value)
                if isinstance(tool, dict) and isinstance(tool.get("id"), str):
                    head["tools"][tool["id"]] = tool
            elif prefix == "blocks.item" and starts(event):
                block = walk.value(event, value)
                if isinstance(block, dict) and isinstance(block.get("id"), str):
                    head["blocks"][block["id"]] = block.get("label")
            elif prefix in ("created_at", "metadata") and starts(event):
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


class Reader:
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
        walk = Walk(src)
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
                elif prefix == "agents.item" and starts(event):
                    walk.value(event, value)
                    yield self._one(f"agents[{agent + 1}]", refuse, "an agent must be an object")
                elif prefix == ("messages.item" if legacy else "agents.item.messages.item") and starts(event):  # fmt: skip
                    message += 1
                    where = f"messages[{message}]" if legacy else f"agents[{agent}].messages[{message}]"  # fmt: skip
                    yield self._one(where, self._message, walk.value(event, value), agent, message)
                elif prefix == "agents.item" and event == "end_map":
                    where = f"agents[{agent}]"
                    yield self._one(where, self._agent, agent)
                elif prefix == ("core_memory.item" if legacy else "blocks.item") and starts(event):
                    block += 1
                    where = f"core_memory[{block}]" if legacy else f"blocks[{block}]"
                    value = walk.value(event, value)
                    owners = [0] if legacy else self.owners.get(value.get("id") if isinstance(value, dict) else None)  # fmt: skip
                    for owner in owners or [None]:
                        yield self._one(where, self._block, value, owner)
                elif prefix in SKIPPED and starts(event):
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
        text = render(content, tool_calls or [])
        labels = self._common(agent, "message")
        directives: dict[str, Any] = {}
        envelope_text = memgpt_envelope(text) if role == "user" else None
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
            text = fallback_text(content, role)
        mapped = ROLES[role]
        if mapped != role:
            labels["letta_role"] = role
        if content != [{"type": "text", "text": text, "signature": None}]:
            labels["letta_content"] = to_json(content)
        labels["letta_created_at"] = raw_time
        labels.update(field_labels(msg, "letta_", MESSAGE_FIELDS, MESSAGE_OWN))
        recorded = timestamp(msg.get("updated_at")) or created
        self.latest = newest(self.latest, created)
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
        labels.update(field_labels(fields, "letta_block_", BLOCK_FIELDS, ("value", "id"), BLOCK_ALWAYS))
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
        settings = legacy_settings(raw) if legacy else {k: v for k, v in raw.items() if k not in AGENT_OWN}  # fmt: skip
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
                labels[f"letta_passage_{field}"] = to_json(value) if isinstance(value, dict | list) else value  # fmt: skip
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


