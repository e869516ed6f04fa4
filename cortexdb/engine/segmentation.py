"""Segment strategies per scope: ``Engine.segmentation`` (docs/episodes.md).

A scope's strategy lives in its scope record (``policies.segmentation``: ``{strategy,
gap_seconds?}``), over the engine's ``episode_strategy`` / ``episode_gap_seconds``.  Changing it
(``set``) stores the new setting — events derived from then on use it — and starts a
``resegment`` job on the engine's job runner that windows the scope's existing events again from
its WAL (``actors.stages.segment``), keeping the old episodes readable as of before (bi-temporal:
they were held until the job's moment).  The job reports progress like imports and exports:
``segmentation_progress`` lifecycle records (``events_done`` of ``events_total``) and a
``segmentation_complete`` at the end; its status is ``status(job_id)``.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import NotFound
from .actors import messages
from .derive import episodes as episode_rules
from .jobs import RUNNING, JobKind, JobRun, Phase
from .model import Scope
from .policy.capabilities import POLICY_ADMINISTER_SCOPE, SCOPE_READ_LOCAL
from .scopes import canonical_scope
from .stages import SEGMENTATION_COMPLETE, SEGMENTATION_PROGRESS

KIND = "resegment"


class SegmentationService:
    def __init__(self, engine: Any, ctx: Any, jobs: Any) -> None:
        self._engine = engine
        self._ctx = ctx
        self.jobs = jobs
        jobs.register(JobKind(KIND, (Phase("resegment", self._run),), SEGMENTATION_PROGRESS,
                              SEGMENTATION_COMPLETE, "job_id", self._finish))  # fmt: skip

    @staticmethod
    def check(value: Any, field: str = "policies.segmentation") -> dict[str, Any]:
        """A ``segmentation`` policy checked (422 ``INVALID_SCOPE_REQUEST`` otherwise)."""
        return episode_rules.check_settings(value, field)

    async def get(self, scope: str, *, caller: str | None = None) -> dict[str, Any]:
        """The scope's segmentation (``source``: scope or engine) and its latest job, if any."""
        scope = canonical_scope(scope)
        self._ctx.policy.check(caller or self._ctx.config.default_caller, SCOPE_READ_LOCAL, scope)
        record = await self._ctx.tables.scopes.get(scope)
        policies = record.policies if record else {}
        out = {"scope": scope, **episode_rules.resolve(policies, self._ctx.config).wire(), "job": None}
        job_id = (policies.get("segmentation") or {}).get("job_id")
        if job_id:
            out["job"] = await self.status(job_id)
        return out

    async def set(self, scope: str, settings: Any, *, caller: str | None = None) -> dict[str, Any]:
        """Store the scope's segmentation and start re-segmenting its episodes: the job's status."""
        ctx = self._ctx
        caller = caller or ctx.config.default_caller
        scope = canonical_scope(scope)
        ctx.policy.check(caller, POLICY_ADMINISTER_SCOPE, scope)
        checked = self.check(settings, "segmentation")
        job_id = ctx.ids.new("job")
        now = ctx.clock.now()

        def edit(current: Scope | None) -> Scope:
            if current is None:  # never written: the setting waits for its first events
                current = Scope(path=scope, tenant_id=ctx.config.tenant_id, registered_at=now, created_by=caller,
                                members=[{"actor": caller, "role": "owner"}], auto_provisioned=True)  # fmt: skip
            policies = {**current.policies, "segmentation": {**checked, "job_id": job_id}}
            return attrs.evolve(current, policies=policies)

        await self._engine.edit_scope(scope, edit)
        record = self.jobs.new_record(KIND, job_id, scope=scope, params={"segmentation": checked},
                                      first={"caller": caller})  # fmt: skip
        record["progress"].update({"events_total": 0, "events_done": 0})
        await self.jobs.submit(record)
        return await self.status(job_id)

    async def status(self, job_id: str) -> dict[str, Any]:
        record = await self.jobs.get(job_id) if isinstance(job_id, str) else None
        if record is None or record["kind"] != KIND:
            raise NotFound(f"no re-segmentation job {str(job_id)[:80]}", details={"job_id": str(job_id)[:80]})
        keys = ("id", "status", "scope", "phase", "fraction_complete", "progress", "created_at",
                "finished_at", "error")  # fmt: skip
        out = {k: record.get(k) for k in keys}
        out["job_id"] = out.pop("id")
        out["strategy"] = record["params"]["segmentation"]["strategy"]
        out["summary"] = record["state"].get("summary")
        out["lifecycle_stream"] = f"/v1/lifecycle/stream?job_id={job_id}"
        return out

    async def wait(self, job_id: str) -> dict[str, Any]:
        """The job's status once it has ended (for embedded callers and tests)."""
        async with self._engine.subscribe(job_id=job_id, events=[SEGMENTATION_COMPLETE]) as sub:
            status = await self.status(job_id)
            if status["status"] == RUNNING:
                async for _ in sub:
                    break
        return await self.status(job_id)

    # -- the job -------------------------------------------------------------------------------
    async def _run(self, run: JobRun) -> None:
        async def progress(done: int, total: int) -> None:
            await run.tick(done / total if total else 1.0, events_done=done, events_total=total)

        summary = await self._ctx.supervisor.request(run.record["scope"],
                                                     lambda reply: messages.Resegment(progress, reply))  # fmt: skip
        await run.checkpoint(summary={k: summary[k] for k in ("retired", "episodes", "events")})

    async def _finish(self, run: JobRun, status: str) -> dict[str, Any]:
        return {"scope": run.record["scope"], "strategy": run.params["segmentation"]["strategy"],
                **({"summary": run.state["summary"]} if run.state.get("summary") else {})}  # fmt: skip

