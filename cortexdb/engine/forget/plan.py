"""Planning a GDPR erasure (reference §11.3 phases 1–3, §11.4) and storing its manifest (§8.6.2).

- ``enumerate_scope`` (phase 1): the *inside* scopes — the erased scope and everything below it,
  plus, when propagating (§11.4), every workspace its data subjects solely own — whose every event
  and derived record goes; and the events the data subjects authored in other scopes.
- ``count_references`` (phase 2): refcount(E) = the derived records of scopes NOT inside that
  cite E (a fact's supporting events — the ``FS`` rows, every support, not only the two a fact
  keeps —, a belief's event supports, an episode's events, a concept's supports).
- ``categorize`` (phase 3): refcount 0 → delete, > 0 → redact; the citing records are marked
  ``supporting_evidence_redacted``; beliefs whose every supporting event is erased are forecast
  for demotion (phase 5 decides); the blobs that go (``plan_blobs``: those only erased events
  refer to, and those uploaded to an inside scope that no surviving event refers to) are listed
  (phase 5 releases them, looking again).

The data subjects are the ``user:`` actor the erased scope's path names (its deepest ``user:``
segment) unless the request names them (``subjects``); a scope's *owners* are the ``owner``
members of its explicit registration (an auto-provisioned scope has none: its first writer is not
its owner for §11.4).  docs/forget.md explains the choices.

A manifest (table ``EM``) is a head row and its lines in chunks, one section per kind of line.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs

from ...errors import InvalidQuery, NotFound, ResourceDeleted
from .. import cursor as cursors
from .. import jsoncodec
from ..policy.capabilities import FORGET_GDPR_CROSS_WORKSPACE
from ..scopes import is_within, segments
from ..temporal import format_ts, parse_rfc3339

LAYERS = ("facts", "beliefs", "episodes", "understanding")
SECTIONS = ("delete", "redact", "records", "citations", "demote", "blobs")
PART_LINES = 2000  # manifest lines per stored chunk
STATES_AT_ONCE = 1000  # event states read with one scan (``Table.get_many``) when enumerating
Tick = Callable[[float], Awaitable[None]]


async def _no_tick(fraction: float) -> None:
    return None


def data_subjects(scope: str, given: list[str] | None) -> list[str]:
    """Whose authored events elsewhere the erasure follows: ``given``, else the scope's deepest
    ``user:`` segment (the person a personal scope belongs to), else nobody."""
    if given is not None:
        return sorted(set(given))
    users = [f"user:{ident}" for kind, ident in segments(scope) if kind == "user"]
    return users[-1:]


@attrs.define
class Enumeration:
    root: str
    subjects: list[str]
    propagate: bool
    inside: list[str] = attrs.field(factory=list)  # scopes erased whole
    events: dict[str, list[str]] = attrs.field(factory=dict)  # scope -> candidate event ids
    records: dict[str, dict[str, list[str]]] = attrs.field(factory=dict)  # inside scope -> layer -> ids
    # every other scope the erasure touches -> its workspace entry (a workspace erased whole is
    # inside too: its ``action`` is ``erase_workspace``)
    outside: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    wal_offset: int = 0
    blobs: list[list[str]] = attrs.field(factory=list)  # [scope uploaded to, blob id] that go

    def candidates(self) -> set[str]:
        return {event_id for ids in self.events.values() for event_id in ids}


async def owners(ctx: Any, scope: str) -> list[str]:
    """The owners of a scope's explicit registration (none for an auto-provisioned one)."""
    record = await ctx.tables.scopes.get(scope)
    if record is None or record.auto_provisioned:
        return []
    return sorted(m["actor"] for m in record.members if m.get("role") == "owner")


async def enumerate_scope(ctx: Any, root: str, subjects: list[str], *, propagate: bool,
                          allowed: list[str] | None = None, tick: Tick = _no_tick) -> Enumeration:  # fmt: skip
    """Phase 1.  ``allowed``: the workspaces propagation may touch (None: any).  Propagating, every
    workspace the subjects alone own is erased whole (§11.4), referenced or not."""
    found = Enumeration(root, subjects, propagate, wal_offset=ctx.wal.last)
    every = [scope async for scope in ctx.tables.scopes.ids()]
    queue = [scope for scope in every if is_within(scope, root)]
    authored: dict[str, list[str]] = {}  # outside scope -> events the subjects authored there
    referenced: dict[str, set[str]] = defaultdict(set)  # outside scope -> inside events it cites
    if subjects and propagate:
        wanted = set(subjects)
        outside = [scope for scope in every if not is_within(scope, root)]
        for done, scope in enumerate(outside):
            ids = await _authored(ctx.tables.partition(scope).events, wanted)
            owned_by = await owners(ctx, scope)
            if ids:
                authored[scope] = ids
            elif owned_by and set(owned_by) <= wanted:
                referenced[scope] = set()  # a workspace the subjects alone own: erased whole too
            await tick(0.5 * (done + 1) / len(outside))
    while queue:
        scope = queue.pop(0)
        found.inside.append(scope)
        await _take_whole(ctx, found, scope, referenced)
        for other in sorted(set(referenced) | set(authored)):
            if other in found.inside or other in queue or other in found.outside:
                continue
            entry = await _workspace(ctx, other, subjects, len(referenced.get(other, ())),
                                     len(authored.get(other, ())))  # fmt: skip
            if entry["sole_owned"] and propagate and (allowed is None or other in allowed):
                entry["action"] = "erase_workspace"
                queue.append(other)
            found.outside[other] = entry
        await tick(0.5 + 0.5 * len(found.inside) / (len(found.inside) + len(queue)))
    for scope, ids in authored.items():
        if scope not in found.inside and (allowed is None or scope in allowed):
            found.events[scope] = ids
            found.outside[scope]["action"] = "erase_authored_events"
    for scope, entry in found.outside.items():
        entry["events_referenced"] = len(referenced.get(scope, ()))
    found.blobs = await plan_blobs(ctx, found)
    return found


async def plan_blobs(ctx: Any, found: Enumeration) -> list[list[str]]:
    """The blobs an erasure deletes: every blob whose referring events are all erased, and every
    blob uploaded to an inside scope that no surviving event refers to.  Reads every blob's
    references and metadata once (the node's blobs, not the scope's events)."""
    candidates = found.candidates()
    inside = set(found.inside)
    referring: dict[str, list[str]] = defaultdict(list)
    async for (blob_id, event_id), _ in ctx.tables.blob_references.items():
        referring[blob_id].append(event_id)
    lines = []
    async for blob_id, record in ctx.tables.blobs.json.scan():
        events = referring.get(blob_id, ())
        if (events or record.get("scope") in inside) and all(e in candidates for e in events):
            lines.append([record.get("scope"), blob_id])
    return lines


async def _authored(events: Any, wanted: set[str]) -> list[str]:
    """The events of a scope whose actor is one of ``wanted``: the stored bytes are searched for
    the quoted ids first, and only the events that contain one are decoded."""
    needles = [jsoncodec.encode(actor) for actor in wanted]
    found = []
    async for event_id, raw in events.raw.scan():
        if any(needle in raw for needle in needles) and jsoncodec.decode(raw)["actor"] in wanted:
            found.append(event_id)
    return found


async def _take_whole(ctx: Any, found: Enumeration, scope: str, referenced: dict[str, set[str]]) -> None:
    """Every event and derived record of an inside scope; the scopes its events reached."""
    part = ctx.tables.partition(scope)
    ids = [event_id async for event_id in part.events.ids()]
    found.events[scope] = ids
    states = ctx.tables.event_states.raw
    for start in range(0, len(ids), STATES_AT_ONCE):
        chunk = await states.get_many(ids[start : start + STATES_AT_ONCE])
        for event_id, raw in chunk.items():  # decoded only when it names scopes it reached
            for other in (jsoncodec.decode(raw).get("foreign") or () if b'"foreign"' in raw else ()):
                referenced[other].add(event_id)
    found.records[scope] = {
        "facts": [i async for i in part.facts.ids()],
        "beliefs": [i async for i in part.beliefs.ids()],
        "episodes": [i async for i in part.episodes.ids()],
        "understanding": [i async for i in part.concepts.ids()],
    }


async def _workspace(ctx: Any, scope: str, subjects: list[str], referenced: int, authored: int) -> dict[str, Any]:
    owned_by = await owners(ctx, scope)
    co_owners = [o for o in owned_by if o not in subjects]
    return {"scope": scope, "events_referenced": referenced, "authored_events": authored,
            "co_owners": co_owners, "sole_owned": bool(owned_by) and not co_owners,
            "action": "mark_evidence"}  # fmt: skip


# -- phase 2 ----------------------------------------------------------------------------------------
async def count_references(ctx: Any, found: Enumeration, tick: Tick = _no_tick) -> dict[str, Any]:
    """Phase 2: ``citations`` ([scope, layer, record id, event id] of records outside citing a
    candidate) and ``demote`` ([scope, belief id] of beliefs whose every event is a candidate)."""
    candidates = found.candidates()
    citations: list[list[str]] = []
    demote: list[list[str]] = []
    scopes = sorted(set(found.outside) - set(found.inside))
    for done, scope in enumerate(scopes):
        await _scan_outside(ctx, scope, candidates, citations, demote)
        await tick((done + 1) / len(scopes))
    return {"citations": citations, "demote": demote}


async def _scan_outside(ctx: Any, scope: str, candidates: set[str], citations: list[list[str]],
                        demote: list[list[str]]) -> None:  # fmt: skip
    part = ctx.tables.partition(scope)
    fact_events: dict[str, list[str]] = defaultdict(list)
    async for (fact_id, event_id), _ in part.fact_supports.items():
        fact_events[fact_id].append(event_id)
    for fact_id, events in fact_events.items():
        citations += [[scope, "facts", fact_id, e] for e in events if e in candidates]
    episode_events: dict[str, list[str]] = {}
    async for episode_id, episode in part.episodes.json.scan():
        episode_events[episode_id] = episode.get("events", [])
        citations += [[scope, "episodes", episode_id, e] for e in episode_events[episode_id] if e in candidates]
    async for concept_id, concept in part.concepts.json.scan():
        citations += [[scope, "understanding", concept_id, e] for e in concept.get("supports", []) if e in candidates]
    async for belief_id, belief in part.beliefs.json.scan():
        events: set[str] = set()
        for ref in belief.get("supports", []):
            if ref.get("type") == "event":
                events.add(ref["id"])
                if ref["id"] in candidates:
                    citations.append([scope, "beliefs", belief_id, ref["id"]])
            events.update(fact_events.get(ref["id"], ()) if ref.get("type") == "fact" else ())
            events.update(episode_events.get(ref["id"], ()) if ref.get("type") == "episode" else ())
        if events and events <= candidates:
            demote.append([scope, belief_id])


# -- phase 3 ----------------------------------------------------------------------------------------
def categorize(found: Enumeration, references: dict[str, Any]) -> dict[str, list[list[str]]]:
    """Phase 3: the manifest's sections (lines are lists: scope first)."""
    cited = {line[3] for line in references["citations"]}
    sections: dict[str, list[list[str]]] = {name: [] for name in SECTIONS}
    for scope, ids in found.events.items():
        for event_id in ids:
            sections["redact" if event_id in cited else "delete"].append([scope, event_id])
    for scope, layers in found.records.items():
        for layer in LAYERS:
            sections["records"] += [[scope, layer, record_id] for record_id in layers[layer]]
    sections["citations"] = references["citations"]
    sections["demote"] = references["demote"]
    sections["blobs"] = found.blobs
    return sections


def summarize(found: Enumeration, sections: dict[str, list[list[str]]]) -> dict[str, Any]:
    """The preview's figures (§8.6.1) of a plan."""
    affected = {layer: 0 for layer in LAYERS}
    for _, layer, _ in sections["records"]:
        affected[layer] += 1
    for _, layer, _ in {tuple(line[:3]) for line in sections["citations"]}:
        affected[layer] += 1
    workspaces = sorted(found.outside.values(), key=lambda w: w["scope"])
    return {
        "estimated_affected": {"events": len(sections["delete"]) + len(sections["redact"]), **affected,
                               "blobs": len(sections.get("blobs", ()))},
        "refcount_breakdown": {"events_to_delete": len(sections["delete"]),
                               "events_to_redact": len(sections["redact"]), "events_under_legal_hold": 0},
        "cross_scope_propagation": {"affected_workspaces": workspaces,
                                    "requires_capability": _requires(workspaces)},
        "beliefs_to_demote": len(sections["demote"]),
        "inside_scopes": list(found.inside),
    }  # fmt: skip


def _requires(workspaces: list[dict[str, Any]]) -> str | None:
    propagating = any(w["action"] != "mark_evidence" for w in workspaces)
    return FORGET_GDPR_CROSS_WORKSPACE if propagating else None


async def drift(ctx: Any, root: str, inside: list[str], since: int) -> int:
    """Events captured under ``root`` (or into an inside scope) after WAL offset ``since``."""
    inside_set = set(inside)
    return sum([1 async for _, scope, _ in ctx.tables.wal.scan(after=since)
                if scope in inside_set or is_within(scope, root)])  # fmt: skip


# -- manifests ----------------------------------------------------------------------------------------
class Manifests:
    """Manifests in ``EM``: ("h", id) -> head; ("c", id, section, part) -> a chunk of lines.  A head
    past ``expires_at`` loses its lines and answers 410 until ``tombstone`` seconds later."""

    def __init__(self, table: Any, clock: Any, *, tombstone_seconds: float) -> None:
        self._table = table
        self._clock = clock
        self._tombstone = tombstone_seconds

    async def put(self, manifest_id: str, head: dict[str, Any], sections: dict[str, list[list[str]]]) -> None:
        """Store (or replace) a manifest: its lines first, its head last."""
        await self._table.delete_all(("c", manifest_id))
        ops = []
        counts = {}
        for name in SECTIONS:
            lines = sections.get(name, [])
            counts[name] = len(lines)
            for part, start in enumerate(range(0, len(lines), PART_LINES)):
                ops.append(self._table.put_op(("c", manifest_id, name, f"{part:08d}"), lines[start : start + PART_LINES]))
                if len(ops) >= 50:
                    await self._table.write(ops)
                    ops = []
        ops.append(self._table.put_op(("h", manifest_id), {**head, "lines": counts}))
        await self._table.write(ops, sync=True)

    async def head(self, manifest_id: str, *, live: bool = True) -> dict[str, Any]:
        """The head of a manifest: 404 when unknown, 410 once expired (``live``)."""
        head = await self._table.get(("h", manifest_id))
        if head is None:
            raise NotFound(f"no erasure manifest {manifest_id}", details={"manifest_id": manifest_id})
        if live and await self._expire(manifest_id, head):
            raise ResourceDeleted(f"the manifest {manifest_id} expired at {head['expires_at']}; run a new preview",
                                  details={"manifest_id": manifest_id, "reason": "expired",
                                           "expired_at": head["expires_at"]})  # fmt: skip
        return head

    async def set_expiry(self, manifest_id: str, expires_at: str | None) -> None:
        head = await self._table.get(("h", manifest_id))
        if head is not None:
            await self._table.put(("h", manifest_id), {**head, "expires_at": expires_at}, sync=True)

    async def lines(self, manifest_id: str, section: str) -> AsyncIterator[list[str]]:
        async for _, chunk in self._table.scan(("c", manifest_id, section)):
            for line in chunk:
                yield line

    async def page(self, manifest_id: str, cursor: str | None, limit: int) -> tuple[list[list[str]], str | None]:
        """(section, *line) rows in section order, ``limit`` of them, after ``cursor``."""
        at = _position(cursor)
        rows: list[list[str]] = []
        for index in range(at[0], len(SECTIONS)):
            section = SECTIONS[index]
            async for part, chunk in self._table.scan(("c", manifest_id, section)):
                number = int(part)
                if (index, number) < tuple(at[:2]):
                    continue
                skip = at[2] if (index, number) == tuple(at[:2]) else 0
                for offset in range(skip, len(chunk)):
                    if len(rows) == limit:
                        return rows, cursors.encode({"m": [index, number, offset]})
                    rows.append([section, *chunk[offset]])
        return rows, None

    async def _expire(self, manifest_id: str, head: dict[str, Any]) -> bool:
        expires = head.get("expires_at")
        if expires is None or parse_rfc3339(expires) > self._clock.now():
            return False
        if not head.get("expired"):
            await self._table.delete_all(("c", manifest_id))
            await self._table.put(("h", manifest_id), {**head, "expired": True}, sync=True)
        return True

    async def sweep(self) -> int:
        """Expire what is past its time; forget tombstones past ``tombstone`` seconds."""
        swept = 0
        now = self._clock.now()
        async for manifest_id, head in self._table.scan("h"):
            expires = head.get("expires_at")
            if expires is None or parse_rfc3339(expires) > now:
                continue
            if (now - parse_rfc3339(expires)).total_seconds() > self._tombstone:
                await self._table.delete(("h", manifest_id))
            elif not head.get("expired"):
                await self._expire(manifest_id, head)
            swept += 1
        return swept


def _position(cursor: str | None) -> list[int]:
    if not cursor:
        return [0, 0, 0]
    data = cursors.decode(cursor)
    at = data.get("m") if isinstance(data, dict) else None
    if not (isinstance(at, list) and len(at) == 3 and all(type(v) is int and v >= 0 for v in at)):
        raise InvalidQuery("cursor is not one this server issued", details={"field": "cursor"})
    return at


def expiry(clock: Any, seconds: float) -> str:
    return format_ts(clock.now() + dt.timedelta(seconds=seconds))
