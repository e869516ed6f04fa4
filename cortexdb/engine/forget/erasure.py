"""GDPR erasure (reference §8.6, §11.3–11.4): preview, manifest, execute, status, cancel.

``Engine.erasures`` is an ``ErasureService``.  A preview plans the erasure (``plan.py``: phases
1–3 as a dry run) and stores its manifest for ``erasure_manifest_ttl_seconds``.  An execute checks
``forget.gdpr`` on the scope (and ``forget.gdpr.cross_workspace`` on every workspace the plan
propagates into), checks the drift since ``from_preview_id`` (or previews inline), and submits a
job (``jobs.py``) of five phases — enumerate → refcount → categorize → delete → demote — whose
phases 4–5 call the deletion operations of ``forget/ops.py`` (``erasure_job.py``).  When the job
ends, however it ends, one audit row with ``gdpr: true``, the erasure id and its summary is
written.  docs/forget.md ("GDPR erasure") tells what is deleted, what is redacted and why.
"""

from __future__ import annotations

from typing import Any

import trio

from ...errors import ErasurePreviewStale, InvalidBody, NotFound, RateLimited
from ..actors.services import Replay, body_hash
from ..jobs import JobKind, JobRunner
from ..policy.capabilities import FORGET_GDPR, FORGET_GDPR_CROSS_WORKSPACE
from ..scopes import canonical_scope
from ..stages import ERASURE_COMPLETE, ERASURE_PROGRESS
from ..temporal import format_ts
from . import erasure_job
from .plan import (
    Manifests,
    categorize,
    count_references,
    data_subjects,
    drift,
    enumerate_scope,
    expiry,
    summarize,
)

FAMILY = "/v1/erasures"  # the idempotency family of an execute (§18.2 item 9)
PREVIEW_FIELDS = {"scope", "audit_note", "subjects", "cross_workspace"}
EXECUTE_FIELDS = PREVIEW_FIELDS | {"from_preview_id", "idempotency_key"}
LINE_ACTIONS = {"delete": ("delete_event", ("scope", "event_id")),
                "redact": ("redact_event", ("scope", "event_id")),
                "records": ("delete_record", ("scope", "layer", "record_id")),
                "citations": ("mark_record", ("scope", "layer", "record_id", "cites_event")),
                "demote": ("demote_belief", ("scope", "belief_id")),
                "blobs": ("delete_blob", ("scope", "blob_id"))}  # fmt: skip
PROGRESS = ("deleted_events", "redacted_events", "demoted_beliefs", "deleted_beliefs", "deleted_facts",
            "deleted_episodes", "deleted_understanding", "marked_records", "released_blobs", "erased_signals")  # fmt: skip


class ErasureService:
    """The erasure family of one engine; ``jobs`` is its job runner (the engine starts it)."""

    def __init__(self, engine: Any, ctx: Any) -> None:
        self._ctx = ctx
        self.manifests = Manifests(ctx.tables.erasure_manifests, ctx.clock,
                                   tombstone_seconds=ctx.config.erasure_manifest_tombstone_seconds)  # fmt: skip
        self.jobs = JobRunner(ctx)
        steps = erasure_job.ErasureSteps(engine, ctx, self.manifests)
        self.jobs.register(JobKind("erasure", steps.phases(), ERASURE_PROGRESS, ERASURE_COMPLETE,
                                   "erasure_id", steps.finish))  # fmt: skip

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The job runner, for the engine's lifetime (resumes interrupted erasures)."""
        await self.jobs.run(task_status)

    # -- preview (§8.6.1) ----------------------------------------------------------------------
    async def preview(self, request: dict[str, Any], *, caller: str | None = None,
                      tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """A dry run: what an erasure of ``request["scope"]`` would do; its manifest is kept."""
        scope, subjects, propagate = _parse(request, PREVIEW_FIELDS)
        caller = caller or self._ctx.config.default_caller
        self._ctx.policy.check(caller, FORGET_GDPR, scope)
        head = await self._plan(scope, subjects, propagate, caller, request.get("audit_note"))
        return preview_wire(head)

    async def _plan(self, scope: str, subjects: list[str], propagate: bool, caller: str,
                    note: str | None) -> dict[str, Any]:  # fmt: skip
        ctx = self._ctx
        await self.manifests.sweep()
        found = await enumerate_scope(ctx, scope, subjects, propagate=propagate)
        sections = categorize(found, await count_references(ctx, found))
        summary = summarize(found, sections)
        work = summary["estimated_affected"]["events"] + len(sections["records"])
        preview_id = ctx.ids.new("ervw")
        head = {"id": preview_id, "kind": "preview", "scope": scope, "data_subjects": subjects,
                "propagate": propagate, "caller": caller, "audit_note": note,
                "created_at": format_ts(ctx.clock.now()),
                "expires_at": expiry(ctx.clock, ctx.config.erasure_manifest_ttl_seconds),
                "wal_offset": found.wal_offset, "summary": summary,
                "estimated_duration_ms": int(1000 * work / ctx.config.erasure_estimate_events_per_second)}  # fmt: skip
        await self.manifests.put(preview_id, head, sections)
        return head

    # -- manifests (§8.6.2) --------------------------------------------------------------------
    async def manifest(self, manifest_id: str, *, limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
        """One page of a preview's (``ervw_``) or an erasure's (``erasure_``) manifest: every
        event deleted or redacted, every record deleted, every cross-scope reference marked,
        every belief forecast for demotion.  404 unknown, 410 expired (24 h)."""
        if manifest_id.startswith("erasure_") and await self.jobs.get(manifest_id) is not None:
            try:
                head = await self.manifests.head(manifest_id)
            except NotFound:
                raise NotFound(f"the erasure {manifest_id} has not planned its manifest yet (phase 3)",
                               details={"erasure_id": manifest_id, "reason": "not_planned_yet"}) from None  # fmt: skip
        else:
            head = await self.manifests.head(manifest_id)
        rows, after = await self.manifests.page(manifest_id, cursor, limit)
        key = "preview_id" if head["kind"] == "preview" else "erasure_id"
        return {key: manifest_id, "scope": head["scope"], "created_at": head["created_at"],
                "expires_at": head["expires_at"], "lines": head["lines"], "summary": head["summary"],
                "items": [line_wire(row) for row in rows], "next_cursor": after, "has_more": after is not None}  # fmt: skip

    # -- execute (§8.6.3) ----------------------------------------------------------------------
    async def execute(self, request: dict[str, Any], *, caller: str | None = None, tenant_id: str | None = None,
                      audit: dict[str, Any] | None = None, drift_threshold: int | None = None,
                      redaction_factor: float | None = None) -> dict[str, Any]:  # fmt: skip
        """Start an erasure job (202): ``audit`` is the request's part of the audit row the job
        writes at its end (the server's; an embedded caller's row is built here);
        ``drift_threshold`` and ``redaction_factor`` override the engine's settings (a tenant's)."""
        ctx = self._ctx
        scope, subjects, propagate = _parse(request, EXECUTE_FIELDS)
        caller, tenant = caller or ctx.config.default_caller, tenant_id or ctx.config.tenant_id
        ctx.policy.check(caller, FORGET_GDPR, scope)
        reservation = None
        if request.get("idempotency_key") is not None:
            claim = await ctx.idempotency.begin(tenant, caller, FAMILY, request["idempotency_key"],
                                                body_hash(request))  # fmt: skip
            if isinstance(claim, Replay):
                return accepted_wire(claim.record["erasure_id"])
            reservation = claim
        try:
            head = await self._current_preview(request, scope, subjects, propagate, caller, drift_threshold)
            erasure_id = await self._submit(request, head, caller, tenant, audit, redaction_factor, reservation)
        except BaseException:
            if reservation is not None:
                ctx.idempotency.abort(reservation)
            raise
        if reservation is not None:
            ctx.idempotency.complete(reservation)
        return accepted_wire(erasure_id)

    async def _current_preview(self, request: dict[str, Any], scope: str, subjects: list[str], propagate: bool,
                               caller: str, threshold: int | None) -> dict[str, Any]:  # fmt: skip
        preview_id = request.get("from_preview_id")
        if preview_id is None:  # §8.6.3: without a preview, one runs inline
            return await self._plan(scope, subjects, propagate, caller, request.get("audit_note"))
        if not isinstance(preview_id, str) or not preview_id.startswith("ervw_"):
            raise InvalidBody("from_preview_id must be an ervw_ id", details={"field": "from_preview_id"})
        head = await self.manifests.head(preview_id)
        if head["kind"] != "preview" or head["scope"] != scope:
            raise InvalidBody(f"the preview {preview_id} is of another scope ({head['scope']})",
                              details={"field": "from_preview_id", "preview_scope": head["scope"]})  # fmt: skip
        threshold = self._ctx.config.erasure_drift_threshold if threshold is None else threshold
        new = await drift(self._ctx, scope, head["summary"]["inside_scopes"], head["wal_offset"])
        if new > threshold:
            raise ErasurePreviewStale(
                f"{new} new events under {scope} since the preview (threshold {threshold}); run a fresh preview",
                details={"preview_id": preview_id, "new_events": new, "threshold": threshold})  # fmt: skip
        return head

    async def _submit(self, request: dict[str, Any], head: dict[str, Any], caller: str, tenant: str,
                      audit: dict[str, Any] | None, factor: float | None, reservation: Any) -> str:  # fmt: skip
        ctx = self._ctx
        workspaces = head["summary"]["cross_scope_propagation"]["affected_workspaces"]
        propagated = [w["scope"] for w in workspaces if w["action"] != "mark_evidence"]
        for scope in propagated:  # §8.6.3: propagation needs forget.gdpr.cross_workspace there too
            ctx.policy.check(caller, FORGET_GDPR_CROSS_WORKSPACE, scope)
        if self.jobs.running("erasure") >= ctx.config.erasure_max_running:
            raise RateLimited(f"{ctx.config.erasure_max_running} erasures are running; retry when one ends",
                              details={"limit": ctx.config.erasure_max_running, "retry_after": 1})  # fmt: skip
        erasure_id = ctx.ids.new("erasure")
        params = {"subjects": head["data_subjects"], "propagate": head["propagate"], "allowed": propagated,
                  "redaction_factor": ctx.config.erasure_redaction_factor if factor is None else factor,
                  "confidence_floor": ctx.config.confidence_floor, "audit": audit,
                  "audit_id": ctx.ids.new("audit"), "chunk": ctx.config.erasure_chunk}  # fmt: skip
        first = {"caller": caller, "tenant_id": tenant, "preview_id": head["id"],
                 "audit_note": _note(request.get("audit_note")), "request_hash": body_hash(request)}  # fmt: skip
        record = self.jobs.new_record("erasure", erasure_id, scope=head["scope"], params=params, first=first)
        ops = [] if reservation is None else [ctx.idempotency.record_op(reservation, {"erasure_id": erasure_id})]
        await self.jobs.submit(record, ops)
        return erasure_id

    # -- status and cancel (§8.6.4, §8.6.5) ----------------------------------------------------
    async def status(self, erasure_id: str) -> dict[str, Any]:
        return status_wire(await self._job(erasure_id))

    async def cancel(self, erasure_id: str) -> dict[str, Any]:
        """Stop at the next phase boundary (best effort): what was deleted stays deleted."""
        await self._job(erasure_id)
        record, accepted = await self.jobs.cancel(erasure_id)
        return {"erasure_id": erasure_id, "cancellation_accepted": accepted, "status": record["status"],
                "phase": record["phase"], "scope": record["scope"],
                "deleted_events_before_cancel": record["progress"].get("deleted_events", 0),
                "redacted_events_before_cancel": record["progress"].get("redacted_events", 0),
                "audit_id": record["audit_id"]}  # fmt: skip

    async def _job(self, erasure_id: str) -> dict[str, Any]:
        record = await self.jobs.get(erasure_id) if erasure_id.startswith("erasure_") else None
        if record is None or record["kind"] != "erasure":
            raise NotFound(f"no erasure {erasure_id}", details={"erasure_id": erasure_id})
        return record


# -- requests and wire shapes --------------------------------------------------------------------------
def _parse(request: Any, allowed: set[str]) -> tuple[str, list[str], bool]:
    if not isinstance(request, dict):
        raise InvalidBody("the body must be a JSON object")
    unknown = sorted(set(request) - allowed)
    if unknown:
        raise InvalidBody(f"unknown field {unknown[0]!r}", details={"field": unknown[0], "allowed": sorted(allowed)})
    if not isinstance(request.get("scope"), str) or not request["scope"]:
        raise InvalidBody("scope is required", details={"field": "scope"})
    scope = canonical_scope(request["scope"])
    for name in ("audit_note", "idempotency_key"):
        if request.get(name) is not None and not isinstance(request[name], str):
            raise InvalidBody(f"{name} must be a string", details={"field": name})
    given = request.get("subjects")
    if given is not None and not (isinstance(given, list) and all(isinstance(s, str) and ":" in s for s in given)):
        raise InvalidBody("subjects must be a list of actor ids (type:id)", details={"field": "subjects"})
    propagate = request.get("cross_workspace", True)
    if not isinstance(propagate, bool):
        raise InvalidBody("cross_workspace must be true or false", details={"field": "cross_workspace"})
    return scope, data_subjects(scope, given), propagate


def _note(note: str | None) -> str | None:
    return note[:500] if note else None


def preview_wire(head: dict[str, Any]) -> dict[str, Any]:
    summary = head["summary"]
    return {"preview_id": head["id"], "scope": head["scope"], "data_subjects": head["data_subjects"],
            "estimated_affected": summary["estimated_affected"], "refcount_breakdown": summary["refcount_breakdown"],
            "cross_scope_propagation": summary["cross_scope_propagation"],
            "beliefs_to_demote": summary["beliefs_to_demote"], "legal_holds": [],
            "estimated_duration_ms": head["estimated_duration_ms"],
            "manifest_url": f"/v1/erasures/preview/{head['id']}/manifest", "expires_at": head["expires_at"]}  # fmt: skip


def accepted_wire(erasure_id: str) -> dict[str, Any]:
    return {"erasure_id": erasure_id, "status": "running",
            "manifest_url": f"/v1/erasures/{erasure_id}/manifest",
            "lifecycle_stream": f"/v1/lifecycle/stream?erasure_id={erasure_id}"}  # fmt: skip


def line_wire(row: list[str]) -> dict[str, Any]:
    action, names = LINE_ACTIONS[row[0]]
    return {"action": action, **dict(zip(names, row[1:], strict=True))}


def status_wire(record: dict[str, Any]) -> dict[str, Any]:
    """§8.6.4, plus what a crash, a cancel or a failure left: ``scope_state`` is ``untouched``
    until phase 4 starts, ``erased`` once completed, ``partially_erased`` in between."""
    scope_state = erasure_job.scope_state(record, record["status"])
    progress = {name: record["progress"].get(name, 0) for name in PROGRESS}
    progress["elapsed_ms"] = record["progress"].get("elapsed_ms", 0)
    return {"erasure_id": record["id"], "status": record["status"], "phase": record["phase"],
            "fraction_complete": record["fraction_complete"], "progress": progress,
            "audit_id": record["audit_id"], "scope": record["scope"], "scope_state": scope_state,
            "created_at": record["created_at"], "finished_at": record["finished_at"],
            "preview_id": record.get("preview_id"), "cancel_requested_at": record["cancel_requested_at"],
            "interruptions": record["interruptions"], "error": record["error"],
            "summary": record["state"].get("summary"),
            "manifest_url": f"/v1/erasures/{record['id']}/manifest",
            "lifecycle_stream": f"/v1/lifecycle/stream?erasure_id={record['id']}"}  # fmt: skip
