"""The phases of an erasure job (reference §11.3) and what it writes when it ends.

1. **enumerate** — flush the erased scopes' pipelines, then ``plan.enumerate_scope``;
2. **refcount** — flush the scopes outside that cite them, then ``plan.count_references``;
3. **categorize** — ``plan.categorize``; the plan is stored as the erasure's manifest, which
   phases 4–5 read (so they resume after a restart without planning again).  Phases 2–3 keep
   their inputs in memory: a restart in them re-runs from phase 1, nothing having been changed;
4. **delete** — through ``forget/ops.py``, in chunks of ``erasure_chunk``: each inside scope's
   derived layers dropped whole (``drop_scope``: the derives of the events that stay say
   ``redacted:<id>``; its counts are saved before it deletes), the redact set (``redact_events``,
   actor ``redacted:gdpr_<erasure_id>``), the delete set (``drop_events`` in an inside scope,
   ``delete_events`` elsewhere), then every record outside citing a redacted event
   (``mark_evidence_redacted``).  Each chunk is a step; the record saves the steps done;
5. **demote** — ``demote_beliefs`` in every scope holding marked records, the blobs only the
   erased events referred to and the inside scopes' unreferenced uploads
   (``blobs.release_blobs_of``), the entities only they mentioned (``ops.release_entities_of``),
   ``scrub`` (caches, replay buffers,
   compaction), then the ``body_bytes`` of the audit rows of the writes that
   carried the erased events are removed (row and hashes kept: ``POST /v1/audit/verify`` still
   matches their bodies).

Every operation is idempotent, so a step interrupted by a crash is run again.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

import attrs

from ..actors.messages import Flush
from ..blobs import release_blobs_of
from ..jobs import CANCELLED, COMPLETED, JobRun, Phase
from ..policy.capabilities import FORGET_GDPR
from ..scopes import is_within
from ..stages import ERASURE_PHASES
from ..storage import CHUNK_OPS
from ..temporal import format_ts
from . import ops
from .plan import categorize, count_references, enumerate_scope, expiry, summarize

#: the writes whose bodies carried memory content: an erasure drops their audit rows' body sizes
CONTENT_ENDPOINTS = frozenset({"POST /v1/experience", "POST /v1/experience/bulk"})
#: the delete phase's plan: 2 drops each inside scope whole (``ops.drop_scope``); a job whose
#: delete phase began under plan 1 (per-record deletion) finishes under it
DELETE_PLAN = 2
RECORD_COUNTS = {"facts": "deleted_facts", "beliefs": "deleted_beliefs", "episodes": "deleted_episodes",
                 "understanding": "deleted_understanding"}  # fmt: skip


@attrs.frozen
class Step:
    """One step of the delete phase: ``kind`` of work on ``ids`` of ``scope`` (a ``drop``:
    the scope's erased events, ``kept`` those of them redacted)."""

    kind: str
    scope: str
    ids: list[str]
    kept: list[str] = attrs.field(factory=list)


class ErasureSteps:
    def __init__(self, engine: Any, ctx: Any, manifests: Any) -> None:
        self._engine = engine  # what forget/ops.py takes
        self._ctx = ctx
        self._manifests = manifests

    def phases(self) -> tuple[Phase, ...]:
        enumerate_, refcount, categorize_, delete, demote = ERASURE_PHASES
        return (Phase(enumerate_, self.enumerate, 0.1),
                Phase(refcount, self.refcount, 0.15, resume_from=enumerate_),
                Phase(categorize_, self.categorize, 0.05, resume_from=enumerate_),
                Phase(delete, self.delete, 0.6), Phase(demote, self.demote, 0.1))  # fmt: skip

    async def _flush(self, scopes: list[str]) -> None:
        for scope in scopes:
            await self._ctx.supervisor.request(scope, lambda reply: Flush(False, reply))

    # -- phases 1-3 ----------------------------------------------------------------------------
    async def enumerate(self, run: JobRun) -> None:
        root, params = run.record["scope"], run.params
        await self._flush([s async for s in self._ctx.tables.scopes.ids(starting_with=root) if is_within(s, root)])
        found = await enumerate_scope(self._ctx, root, params["subjects"], propagate=params["propagate"],
                                      allowed=params["allowed"], tick=run.tick)  # fmt: skip
        run.scratch["found"] = found
        await run.tick(1.0, candidate_events=sum(len(ids) for ids in found.events.values()))

    async def refcount(self, run: JobRun) -> None:
        found = run.scratch["found"]
        await self._flush(sorted(set(found.outside) - set(found.inside)))
        run.scratch["references"] = await count_references(self._ctx, found, tick=run.tick)

    async def categorize(self, run: JobRun) -> None:
        found = run.scratch["found"]
        sections = categorize(found, run.scratch["references"])
        head = {"id": run.id, "kind": "erasure", "scope": found.root, "data_subjects": found.subjects,
                "created_at": format_ts(self._ctx.clock.now()), "expires_at": None,
                "wal_offset": found.wal_offset, "summary": summarize(found, sections)}  # fmt: skip
        await self._manifests.put(run.id, head, sections)
        run.state["planned"] = {name: len(lines) for name, lines in sections.items()}
        run.state["touched_scopes"] = sorted(set(found.inside) | set(found.outside))
        await run.tick(1.0)

    # -- phase 4 -------------------------------------------------------------------------------
    async def delete(self, run: JobRun) -> None:
        if "delete_steps_done" not in run.state:
            run.state["delete_plan"] = DELETE_PLAN  # saved with the first step
        steps = await self._delete_steps(run)
        for index, step in enumerate(steps):
            if index < run.state.get("delete_steps_done", 0):
                continue
            counts = await self._apply(run, step)
            for name, value in counts.items():
                run.progress[name] = run.progress.get(name, 0) + value
            run.state["delete_steps_done"] = index + 1
            await run.tick((index + 1) / len(steps))
        await run.tick(1.0)

    async def _delete_steps(self, run: JobRun) -> list[Step]:
        """The steps in order: each inside scope's derived layers dropped whole (``drop``), the
        redactions, the deletions (an inside scope's events: ``drop_events``), the marks;
        ``erasure_chunk`` ids a step — the job's own, fixed when it was submitted, so that a job
        resumed under other settings counts its finished steps the same.  A job that began its
        delete phase before there was a drop (no ``delete_plan``) keeps its per-record steps."""
        chunk = run.params["chunk"]
        sections: dict[str, dict[str, list[str]]] = {}
        for section, position in (("records", 2), ("redact", 1), ("delete", 1), ("citations", 3)):
            by_scope: dict[str, list[str]] = defaultdict(list)
            async for line in self._manifests.lines(run.id, section):
                by_scope[line[0]].append(line[position])
            sections[section] = {scope: sorted(set(ids)) for scope, ids in by_scope.items()}
        dropped: set[str] = set()
        if run.state.get("delete_plan") == DELETE_PLAN:
            inside = (await self._manifests.head(run.id, live=False))["summary"]["inside_scopes"]
            dropped = set(inside) & (set(sections["records"]) | set(sections["redact"]) | set(sections["delete"]))
        steps = [Step("drop", scope, sections["delete"].get(scope, []) + sections["redact"].get(scope, []),
                      sections["redact"].get(scope, [])) for scope in sorted(dropped)]  # fmt: skip
        for section, kind in (("records", "records"), ("redact", "redact"), ("delete", "delete"), ("citations", "mark")):
            for scope, ids in sorted(sections[section].items()):
                if section == "records" and scope in dropped:
                    continue  # dropped whole
                kind_here = "drop_events" if section == "delete" and scope in dropped else kind
                steps += [Step(kind_here, scope, ids[start : start + chunk]) for start in range(0, len(ids), chunk)]
        return steps

    async def _apply(self, run: JobRun, step: Step) -> dict[str, int]:
        engine, kind, scope, ids = self._engine, step.kind, step.scope, step.ids
        if kind == "drop":  # the counts of the first survey: a rerun after a crash finds less
            counted = run.state.setdefault("dropped_records", {})
            if scope not in counted:
                counted[scope] = await ops.survey_scope(engine, scope, ids, kept=step.kept)
                await run.checkpoint()
            await ops.drop_scope(engine, scope, ids, kept=step.kept, surveyed=True)
            return {RECORD_COUNTS[layer]: n for layer, n in counted[scope].items() if layer in RECORD_COUNTS}
        if kind == "records":
            deleted = await ops.delete_records(engine, scope, ids)
            return {RECORD_COUNTS[layer]: n for layer, n in deleted.items() if layer in RECORD_COUNTS}
        if kind == "redact":
            actor = f"redacted:gdpr_{run.id}"
            return {"redacted_events": await ops.redact_events(engine, scope, ids, actor=actor)}
        if kind == "delete":
            return {"deleted_events": await ops.delete_events(engine, scope, ids)}
        if kind == "drop_events":
            return {"deleted_events": await ops.drop_events(engine, scope, ids)}
        return {"marked_records": await ops.mark_evidence_redacted(engine, scope, ids)}

    # -- phase 5 -------------------------------------------------------------------------------
    async def demote(self, run: JobRun) -> None:
        params, state = run.params, run.state
        marked = sorted({line[0] async for line in self._manifests.lines(run.id, "citations")})
        if not state.get("demoted"):
            for scope in marked:
                result = await ops.demote_beliefs(self._engine, scope, factor=params["redaction_factor"],
                                                  floor=params["confidence_floor"])  # fmt: skip
                run.progress["demoted_beliefs"] = run.progress.get("demoted_beliefs", 0) + result["demoted"]
                run.progress["deleted_beliefs"] = run.progress.get("deleted_beliefs", 0) + result["deleted"]
            state["demoted"] = True
            await run.tick(0.3)
        event_ids = [line[1] async for line in self._manifests.lines(run.id, "delete")]
        event_ids += [line[1] async for line in self._manifests.lines(run.id, "redact")]
        if not state.get("blobs_released"):  # the blobs only these events referred to (§8.13),
            inside = (await self._manifests.head(run.id, live=False))["summary"]["inside_scopes"]
            # and those uploaded to an inside scope that no surviving event refers to
            run.progress["released_blobs"] = await release_blobs_of(self._engine, event_ids, scopes=inside)
            state["blobs_released"] = True
            await run.tick(0.5)
        if not state.get("signals_erased"):  # every signal of an inside scope, and those about a
            inside = (await self._manifests.head(run.id, live=False))["summary"]["inside_scopes"]
            count = 0  # data subject in the other scopes the erasure touches (docs/signals.md)
            for scope in sorted(set(inside) | set(state["touched_scopes"])):
                if scope in inside:  # its held writes go too (docs/proposals.md)
                    count += await self._ctx.signals.forget(scope, everything=True)
                    await self._ctx.proposals.drop(scope)
                for subject in params["subjects"]:
                    count += await self._ctx.signals.forget(scope, subject=subject)
            run.progress["erased_signals"] = count
            state["signals_erased"] = True
        if not state.get("entities_released"):  # the names only these events mentioned
            state["released_entities"] = await ops.release_entities_of(self._engine, event_ids)
            state["entities_released"] = True
        if not state.get("scrubbed"):
            record_ids = [line[2] async for line in self._manifests.lines(run.id, "records")]
            await ops.scrub(self._engine, scopes=state["touched_scopes"], event_ids=event_ids,
                            record_ids=record_ids)  # fmt: skip
            state["scrubbed"] = True
            await run.tick(0.7)
        if not state.get("audit_stripped"):
            inside = (await self._manifests.head(run.id, live=False))["summary"]["inside_scopes"]
            state["audit_rows_stripped"] = await strip_body_sizes(self._ctx, run, set(event_ids), inside)
            state["audit_stripped"] = True
        await run.tick(1.0)

    # -- the end ---------------------------------------------------------------------------------
    async def finish(self, run: JobRun, status: str) -> dict[str, Any]:
        """The one audit row of the erasure (§11.3), whatever its end; the manifest's 24 h start."""
        ctx, record = self._ctx, run.record
        progress = run.progress
        summary = {"status": status, "phase": record["phase"],
                   **{name: progress.get(name, 0) for name in (
                       "deleted_events", "redacted_events", "deleted_facts", "demoted_beliefs",
                       "deleted_beliefs", "deleted_episodes", "deleted_understanding", "marked_records",
                       "released_blobs")},
                   "audit_rows_stripped": run.state.get("audit_rows_stripped", 0),
                   "scope_state": scope_state(record, status)}  # fmt: skip
        run.state["summary"] = summary
        audit_id = run.params["audit_id"]
        await ctx.tables.audit_rows.put(audit_id, audit_row(record, summary, status, ctx.clock.now()), sync=True)
        record["audit_id"] = audit_id
        await self._manifests.set_expiry(run.id, expiry(ctx.clock, ctx.config.erasure_manifest_ttl_seconds))
        return {"audit_id": audit_id, "summary": summary}


def scope_state(record: dict[str, Any], status: str) -> str:
    if status == COMPLETED:
        return "erased"
    return "partially_erased" if "delete" in record["phases_started"] else "untouched"


def audit_row(record: dict[str, Any], summary: dict[str, Any], status: str, now: Any) -> dict[str, Any]:
    """The erasure's row (§14 shape, ``gdpr: true``): the request part is the server's (its
    hashes under the tenant pepper), or, for an embedded engine, the request's canonical hash."""
    params = record["params"]
    given = params.get("audit") or {
        "actor": record["caller"], "token_jti": None, "tenant_id": record["tenant_id"],
        "decided_by_tier": "deployment", "client_ip": None, "user_agent": None, "request_id": record["id"],
        "request": {"method": "POST", "path": "/v1/erasures", "body_hash": "sha256:" + record["request_hash"],
                    "headers_hash": "sha256:" + hashlib.sha256(b"").hexdigest()},
    }  # fmt: skip
    return {**given, "id": params["audit_id"], "ts": format_ts(now), "scope": record["scope"],
            "endpoint": "POST /v1/erasures", "capability": FORGET_GDPR, "decision": "allow",
            "response_status": 202, "event_id": None, "elapsed_ms": record["progress"].get("elapsed_ms", 0),
            "gdpr": True, "erasure_id": record["id"], "erasure_status": status, "summary": summary,
            "audit_note": record.get("audit_note"), "cancelled": status == CANCELLED}  # fmt: skip


async def strip_body_sizes(ctx: Any, run: JobRun, event_ids: set[str], inside: list[str]) -> int:
    """Drop ``request.body_bytes`` from the tenant's audit rows of the writes that carried the
    erased events (their ``event_id``, or a write into an inside scope); the rows and their
    hashes stay, so ``POST /v1/audit/verify`` still matches the original body."""
    rows, tenant = ctx.tables.audit_rows, run.record["tenant_id"]
    ops_: list[Any] = []
    stripped = 0
    async for audit_id, row in rows.scan():
        request = row.get("request") or {}
        if row.get("tenant_id") != tenant or "body_bytes" not in request:
            continue
        carried = row.get("event_id") in event_ids or (
            row.get("endpoint") in CONTENT_ENDPOINTS and any(is_within(row.get("scope") or "", s) for s in inside))
        if not carried:
            continue
        request = {k: v for k, v in request.items() if k != "body_bytes"}
        ops_.append(rows.put_op(audit_id, {**row, "request": request, "body_bytes_removed_by": run.id}))
        stripped += 1
        if len(ops_) >= CHUNK_OPS:
            await rows.write(ops_)
            ops_ = []
    if ops_:
        await rows.write(ops_)
    return stripped
