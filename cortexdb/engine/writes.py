"""The write side of the engine: one experience (§8.1), a bulk write (§8.2), idempotency replay,
and the result of a write that waited for a stage (settled from the state the stage committed).

A write is validated, its identities resolved, its capabilities checked (policy hook), its
idempotency key claimed, and it is handed to the scope's actor, which group-commits it.
"""

from __future__ import annotations

from typing import Any

import trio

from ..errors import (
    IdempotencyConflict,
    InvalidEnvelope,
    NotFound,
    PayloadTooLarge,
    PolicyDenied,
)
from .actors.messages import Capture, CaptureItem
from .actors.services import Replay, body_hash
from .envelope import ENVELOPE_SHAPE, resolve_identities, validate_envelope
from .limits import check_event_size
from .model import EventState
from .model.fields import unknown_field
from .model.text import content_text
from .policy.capabilities import SCOPE_WRITE, SCOPE_WRITE_ABOUT_OTHER, SCOPE_WRITE_ON_BEHALF_OF
from .results import BulkResult, ExperienceResult
from .scopes import canonical_scope
from .stages import FOREIGN_DERIVES, STAGE_ORDER, STAGE_TIMING, WAIT_MODES, Stage, at_scope
from .temporal import parse_rfc3339

ORDERINGS = ("strict_temporal", "batch_throughput")
FAMILY_EXPERIENCE = "/v1/experience"
FAMILY_BULK = "/v1/experience/bulk"
# a bulk request's own fields, at every depth; its items are envelopes, each walked once, by
# ``validate_envelope`` (an unknown field named ``items[i].…``), not a second time here
BULK_SHAPE = {
    "scope": None, "actor": ENVELOPE_SHAPE["observed_actor"], "observed_actor": ENVELOPE_SHAPE["observed_actor"],
    "subject": ENVELOPE_SHAPE["subject"], "directives": ENVELOPE_SHAPE["directives"], "ordering": None,
    "items": None,
}  # fmt: skip


class Writes:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx  # the engine's NodeContext

    def authorise(self, caller: str, envelope, identities) -> None:
        check = self.ctx.policy.check
        check(caller, SCOPE_WRITE, envelope.scope)
        if identities.observed_actor["id"] != caller:
            check(caller, SCOPE_WRITE_ON_BEHALF_OF, envelope.scope)
        if identities.subject["id"] != identities.observed_actor["id"]:
            check(caller, SCOPE_WRITE_ABOUT_OTHER, envelope.scope)
        target = envelope.directives.get("consolidate_into")
        if target:
            try:
                check(caller, SCOPE_WRITE, target)
            except PolicyDenied as exc:
                raise InvalidEnvelope(
                    "directives.consolidate_into",
                    "the caller lacks scope.write on the consolidation target",
                    capability=SCOPE_WRITE,
                    denied_by_tier=exc.details.get("denied_by_tier"),
                ) from None

    # -- one experience ------------------------------------------------------------------------
    async def experience(self, envelope: dict[str, Any], *, caller: str, tenant: str,
                         wait: str | None) -> ExperienceResult:  # fmt: skip
        if wait not in WAIT_MODES:
            raise InvalidEnvelope("wait", f"must be one of {[w.value for w in WAIT_MODES if w]} or omitted")
        started = trio.current_time()
        ctx = self.ctx
        check_event_size(envelope, ctx.config.max_event_text_bytes)
        envelope = plain_vector(envelope)
        valid = validate_envelope(envelope, hashed=True)
        check_vector(valid, ctx)
        identities = resolve_identities(caller, valid)
        self.authorise(caller, valid, identities)
        with ctx.blobs.hold() as hold:  # its blobs are not deleted before its references commit
            valid = await ctx.blobs.resolve(valid, caller=caller, tenant=tenant, hold=hold)  # content.media[]
            reservation = None
            if valid.idempotency_key is not None:
                claim = await ctx.idempotency.begin(tenant, caller, FAMILY_EXPERIENCE, valid.idempotency_key,
                                                    valid.body_hash or body_hash(envelope))  # fmt: skip
                if isinstance(claim, Replay):
                    return await self.replayed(claim.record, wait)
                reservation = claim
            wait_for = wait_stages(wait, valid.directives, valid.scope)
            item = CaptureItem(valid, identities, tenant, reservation, None, wait_for)
            try:
                captured = await ctx.supervisor.request(
                    valid.scope, lambda reply: hold.bind(Capture((item,), wait is not None, reply))
                )
            except BaseException:
                if reservation is not None:
                    ctx.idempotency.abort(reservation)
                raise
        event = captured[0].event
        capture_ms = round((trio.current_time() - started) * 1000, 3)
        if wait in (None, Stage.CAPTURED):
            return ExperienceResult(event_id=event.id, status=Stage.CAPTURED.value,
                                    wal_offset=event.wal_offset, scope=valid.scope)  # fmt: skip
        states = [await waiter.wait() for waiter in captured[0].waiters.values()]
        home = await self.committed(states[0], event.id, valid.scope)
        return settle(home, states[1:], event_id=event.id, offset=event.wal_offset, wait=wait,
                      capture_ms=capture_ms)  # fmt: skip

    async def committed(self, state: EventState | None, event_id: str, scope: str) -> EventState:
        """The state a waiter was handed; the stored one if it was handed none."""
        if state is None:
            state = await self.ctx.tables.event_states.get(event_id)
        return state if state is not None else EventState(scope=scope)

    async def replayed(self, record: dict[str, Any], wait: str | None) -> ExperienceResult:
        """A write whose idempotency key is live: the first write's answer (waiting, if asked
        to, for its stage: from the stored state, or from what its waiter is handed)."""
        scope, event_id, offset = record["scope"], record["event_id"], record["wal_offset"]
        if wait in (None, Stage.CAPTURED):
            return ExperienceResult(event_id=event_id, status=Stage.CAPTURED.value, wal_offset=offset,
                                    scope=scope, replay=True)  # fmt: skip
        stage = Stage.INDEXED if wait == Stage.INDEXED else Stage.CONSOLIDATED
        waiter = self.ctx.bus.stage_waiter(event_id, stage)
        state = await self.committed(None, event_id, scope)
        if stage not in state.done and not state.cancelled:
            state = await self.committed(await waiter.wait(), event_id, scope)
        else:
            self.ctx.bus.forget_waiter(event_id, stage)  # it happened already: it never fires
        return settle(state, (), event_id=event_id, offset=offset, wait=wait, capture_ms=None,
                      replay=True)  # fmt: skip

    # -- bulk ----------------------------------------------------------------------------------
    async def bulk(self, request: dict[str, Any], *, caller: str, tenant: str, durable: bool = False,
                   shaped: bool = False) -> BulkResult:  # fmt: skip
        """Up to ``bulk_max_items`` experiences into one scope in one atomic write (§8.2); ``shaped``:
        the items' field names are an importer's own (``validate_envelope``)."""
        envelopes, ordering = self._bulk_envelopes(request, caller, shaped)
        with self.ctx.blobs.hold() as hold:  # its blobs are not deleted before its references commit
            envelopes = [await self._bulk_media(request["items"], entry, caller, tenant, hold) for entry in envelopes]
            scope = envelopes[0][1].scope
            batch_id = self.ctx.ids.new("batch")
            reservations: list = []
            try:
                items, replayed, earlier = await self._bulk_claims(envelopes, tenant, caller, batch_id, reservations,
                                                                   durable)  # fmt: skip
                if items:
                    await self.ctx.supervisor.request(
                        scope, lambda reply: hold.bind(Capture(tuple(items), False, reply))
                    )
            except BaseException:
                for reservation in reservations:
                    if not reservation.finished:
                        self.ctx.idempotency.abort(reservation)
                raise
        if not items and len(earlier) == 1 and None not in earlier:  # the same bulk again: its first answer
            batch_id = earlier.pop()
        return BulkResult(batch_id=batch_id, accepted=len(items), replayed=replayed, scope=scope,
                          ordering=ordering)  # fmt: skip

    def _bulk_envelopes(self, request: Any, caller: str, shaped: bool = False) -> tuple[list[tuple], str]:
        """Validate the request and each item (merged with the request's shared fields)."""
        if not isinstance(request, dict):
            raise InvalidEnvelope("$", "the bulk request must be a JSON object")
        unknown = unknown_field(request, BULK_SHAPE)
        if unknown is not None:
            raise InvalidEnvelope(unknown, "is not a field of the bulk request")
        items = request.get("items")
        limit = self.ctx.config.bulk_max_items
        if not isinstance(items, list) or not items:
            raise InvalidEnvelope("items", "must be a non-empty array")
        if len(items) > limit:
            raise InvalidEnvelope("items", f"has {len(items)} items; at most {limit} are allowed per call",
                                  max_items=limit)  # fmt: skip
        ordering = request.get("ordering") or "strict_temporal"
        if ordering not in ORDERINGS:
            raise InvalidEnvelope("ordering", f"must be one of {list(ORDERINGS)}")
        shared = request.get("directives") or {}
        if not isinstance(shared, dict):
            raise InvalidEnvelope("directives", "must be an object")
        envelopes = [self._bulk_item(request, shared, raw, index, caller, shaped) for index, raw in enumerate(items)]
        if ordering == "strict_temporal":
            envelopes.sort(key=lambda entry: parse_rfc3339(entry[1].context["observed_at"]))
        return envelopes, ordering

    def _bulk_item(self, request: dict, shared: dict, raw: Any, index: int, caller: str, shaped: bool = False) -> tuple:
        """(envelope, validated envelope, identities) of ``items[index]``, authorised."""
        if not isinstance(raw, dict):
            raise InvalidEnvelope(f"items[{index}]", "must be an object")
        envelope = dict(raw)
        envelope["scope"] = request.get("scope")
        if raw.get("scope") is not None and (not isinstance(raw["scope"], str) or not isinstance(envelope["scope"], str)
                                             or canonical_scope(raw["scope"]) != canonical_scope(envelope["scope"])):  # fmt: skip
            raise InvalidEnvelope(f"items[{index}].scope", "must be the request's scope: a bulk write goes to one scope",
                                  item=index)  # fmt: skip
        actor = raw.get("observed_actor") or request.get("observed_actor") or request.get("actor")
        if actor is not None:
            envelope["observed_actor"] = actor
        subject = raw.get("subject") or request.get("subject")
        if subject is not None:
            envelope["subject"] = subject
        if shared or raw.get("directives"):
            if not isinstance(raw.get("directives") or {}, dict):
                raise InvalidEnvelope(f"items[{index}].directives", "must be an object", item=index)
            envelope["directives"] = {**shared, **(raw.get("directives") or {})}
        try:
            check_event_size(envelope, self.ctx.config.max_event_text_bytes, f"items[{index}].")
        except PayloadTooLarge as exc:
            exc.details["item"] = index
            raise
        envelope = plain_vector(envelope)
        try:
            valid = validate_envelope(envelope, shaped=shaped, hashed=True)
            check_vector(valid, self.ctx)
        except InvalidEnvelope as exc:
            extra = {k: v for k, v in exc.details.items() if k not in ("field", "reason")}
            raise InvalidEnvelope(
                _bulk_field(exc.details["field"], raw, index), exc.details["reason"], **extra, item=index
            ) from None
        identities = resolve_identities(caller, valid)
        self.authorise(caller, valid, identities)
        return envelope, valid, identities

    async def _bulk_media(self, items: list, entry: tuple, caller: str, tenant: str, hold: Any) -> tuple:
        """An item with its blob references checked and described (``BlobService.resolve``);
        a failure names the item as the caller wrote it (its content is the caller's object)."""
        envelope, valid, identities = entry
        try:
            return envelope, await self.ctx.blobs.resolve(valid, caller=caller, tenant=tenant, hold=hold), identities
        except InvalidEnvelope as exc:
            index = next(i for i, raw in enumerate(items) if raw.get("content") is envelope.get("content"))
            extra = {k: v for k, v in exc.details.items() if k not in ("field", "reason")}
            raise InvalidEnvelope(f"items[{index}].{exc.details['field']}", exc.details["reason"], **extra,
                                  item=index) from None  # fmt: skip

    async def _bulk_claims(self, envelopes: list[tuple], tenant: str, caller: str, batch_id: str,
                           reservations: list, durable: bool = False) -> tuple[list[CaptureItem], int, set[str]]:  # fmt: skip
        """The items to capture, how many were replays, and the batches the replayed ones were
        first written by: each idempotency key is claimed once (a key twice in the batch with the
        same body is a replay, with another a conflict); ``durable``: the keys never expire."""
        items: list[CaptureItem] = []
        seen: dict[str, str] = {}
        replayed, earlier = 0, set()
        for envelope, valid, identities in envelopes:
            reservation = None
            key = valid.idempotency_key
            if key is not None:
                digest = valid.body_hash or body_hash(envelope)  # from validation's encoding
                if key in seen:
                    if seen[key] != digest:
                        raise IdempotencyConflict("an idempotency key appears twice in this batch with different bodies",
                                                  details={"idempotency_key": key})  # fmt: skip
                    replayed += 1
                    continue
                seen[key] = digest
                claim = await self.ctx.idempotency.begin(tenant, caller, FAMILY_BULK, key, digest)
                if isinstance(claim, Replay):
                    replayed += 1
                    earlier.add(claim.record.get("batch_id"))
                    continue
                reservation = claim
                reservation.durable = durable
                reservations.append(claim)
            items.append(CaptureItem(valid, identities, tenant, reservation, batch_id))
        return items, replayed, earlier

    # -- idempotency ---------------------------------------------------------------------------
    async def by_idempotency_key(self, key: str, *, caller: str, tenant: str) -> dict[str, Any]:
        """The record a (live) idempotency key left, from a single or a bulk write."""
        for family in (FAMILY_EXPERIENCE, FAMILY_BULK):
            record = await self.ctx.idempotency.lookup(tenant, caller, family, key)
            if record is not None:
                return record
        raise NotFound("no live write used this idempotency key", details={"idempotency_key": key})


def plain_vector(envelope: Any) -> Any:
    """The envelope with a numpy ``vector`` as a list of numbers: what the idempotency hash
    reads (a numpy array's text elides the middle of a long one)."""
    if isinstance(envelope, dict) and hasattr(envelope.get("vector"), "tolist"):
        return {**envelope, "vector": envelope["vector"].tolist()}
    return envelope


def check_vector(valid: Any, ctx: Any) -> None:
    """A given vector (docs/embedding.md, "Given vectors") has the embedder's dimension, and
    its event is indexed as one document: a text long enough to be split into passages, each
    embedded alone, cannot take one vector."""
    if valid.vector is None:
        return
    embedder = ctx.embedder
    if len(valid.vector) != embedder.dimension:
        raise InvalidEnvelope("vector", f"has {len(valid.vector)} numbers; this store's embedder "
                              f"({embedder.name}) has {embedder.dimension} dimensions",
                              expected_dimension=embedder.dimension, given_dimension=len(valid.vector))  # fmt: skip
    limit = ctx.config.passage_max_chars
    if len(content_text(valid.content)) > limit:
        raise InvalidEnvelope("vector", f"is given for a text of more than {limit} characters "
                              "(passage_max_chars), which is indexed as passages each embedded "
                              "alone: split it into events of at most that many, or omit the vector",
                              passage_max_chars=limit)  # fmt: skip


def wait_stages(wait: str | None, directives: dict, scope: str) -> tuple[str, ...]:
    """The stages a write with ``wait`` waits for (a consolidation elsewhere: its record too)."""
    if wait == Stage.INDEXED:
        return (Stage.INDEXED,)
    if wait == Stage.CONSOLIDATED:
        target = directives.get("consolidate_into")
        if target and target != scope:
            return (Stage.CONSOLIDATED, at_scope(Stage.CONSOLIDATED, target))
        return (Stage.CONSOLIDATED,)
    return ()


def settle(state: EventState, foreign: Any, *, event_id: str, offset: int, wait: str,
           capture_ms: float | None, replay: bool = False) -> ExperienceResult:  # fmt: skip
    """The result of a ``wait=indexed|consolidated`` write, from the event's committed state (and
    the states the scopes it was consolidated into handed over): the stages up to the one waited
    for, what they derived, and how long each took (later stages may already be running)."""
    upto = STAGE_ORDER.index(wait)
    done = [s.value for s in STAGE_ORDER[: upto + 1] if s in state.done]
    reached = wait in done
    status = wait if reached else ("cancelled" if state.cancelled else done[-1])
    derives: list[str] = []
    stages = done + ([FOREIGN_DERIVES] if wait == Stage.CONSOLIDATED else [])
    for each in (state, *(s for s in foreign if s is not None)):
        by_stage = each.stage_derives or {}
        for stage in stages:
            derives.extend(d for d in by_stage.get(stage, ()) if d not in derives)
    timings = state.elapsed_ms or {}
    elapsed = {STAGE_TIMING[Stage.CAPTURED]: capture_ms} if capture_ms is not None else {}
    for stage in done[1:]:
        name = STAGE_TIMING[stage]
        if name in timings:
            elapsed[name] = timings[name]
    return ExperienceResult(
        event_id=event_id, status=status, wal_offset=offset, scope=state.scope, replay=replay,
        stages_completed=tuple(done), derives=tuple(derives), elapsed_ms=elapsed,
    )  # fmt: skip


def _bulk_field(field: str, item: dict, index: int) -> str:
    """Name a bulk validation error where the caller wrote the offending value: on the request
    (``scope``, the shared ``actor``/``subject``/``directives``) or on ``items[index]``."""
    top = field.split(".", 1)[0].split("[", 1)[0]
    if top == "scope" or (top in ("observed_actor", "subject", "directives") and top not in item):
        return field
    return f"items[{index}].{field}"
