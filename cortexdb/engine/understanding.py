"""Understanding (reference §7.5, §8.7.7-§8.7.11): ``Engine.understanding`` reads concepts and runs
the ``synthesize`` job (docs/understanding.md).

Concepts are synthesized by the derivation lane at the end of the consolidation stage
(``actors/stages/understanding``); reads go to the scope's actor (``actors/concept_queries``).
The ``synthesize`` job re-synthesizes and scores (coverage, staleness, support loss) every
concept of a scope, or of its ``descend`` traversal, one scope per step, on the engine's job
runner: its record and its ``synthesis_progress`` / ``synthesis_complete`` lifecycle records say
how far it got.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidBody, InvalidQuery, NotFound, RateLimited
from .actors import messages
from .jobs import COMPLETED, JobKind, JobRun, Phase
from .policy import capabilities as cap
from .scopes import canonical_scope
from .stages import SYNTHESIS_COMPLETE, SYNTHESIS_PROGRESS

MAX_DEPTH = 5  # how far ``depth`` may follow edges
MAX_TOPICS = 50
COUNTS = ("scopes_done", "subjects", "concepts", "concepts_versioned", "deprecated", "stale")


def depth_param(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEPTH:
        raise InvalidQuery(f"depth must be an integer from 1 to {MAX_DEPTH}", details={"field": "depth"})
    return value


class Understanding:
    def __init__(self, engine: Any, ctx: Any, reads: Any, jobs: Any) -> None:
        self._engine, self._ctx, self._reads, self.jobs = engine, ctx, reads, jobs
        jobs.register(JobKind("synthesize", (Phase("synthesize", self._run),), SYNTHESIS_PROGRESS,
                              SYNTHESIS_COMPLETE, "job_id", self._finish))  # fmt: skip

    # -- reads ---------------------------------------------------------------------------------
    async def list(self, scope: str, *, topic: str | None = None, depth: int | None = None,
                   **filters: Any) -> dict[str, Any]:  # fmt: skip
        if topic is not None and (not isinstance(topic, str) or not topic.strip() or len(topic) > 200):
            raise InvalidQuery("topic must be a non-empty string of at most 200 characters", details={"field": "topic"})
        depth = depth_param(depth, 1)
        page = await self._reads.ask(scope, messages.ReadConcepts, topic=topic, depth=depth, **filters)
        return {**page, **self._partial()}

    async def get(self, scope: str, concept_id: str, *, as_of: Any = None) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadConcept, concept_id=concept_id, as_of=as_of)

    async def related(self, scope: str, concept_id: str, *, relation: str | None = None, depth: int | None = None,
                      **filters: Any) -> dict[str, Any]:  # fmt: skip
        if relation is not None and (not isinstance(relation, str) or not 0 < len(relation) <= 128):
            raise InvalidQuery("relation must be a string of 1-128 characters", details={"field": "relation"})
        return await self._reads.ask(scope, messages.ReadRelated, concept_id=concept_id, relation=relation,
                                     depth=depth_param(depth, 1), **filters)  # fmt: skip

    async def coverage(self, scope: str) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadCoverage)

    def _partial(self) -> dict[str, Any]:
        if self._ctx.config.understanding_enabled:
            return {"_partial": False, "_partial_reason": None}
        return {"_partial": True, "_partial_reason": "synthesis_disabled_by_policy"}

    # -- the synthesize job (§8.7.11) ------------------------------------------------------------
    @staticmethod
    def parse(request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise InvalidBody("the body must be a JSON object", details={"field": "body"})
        unknown = sorted(set(request) - {"scope", "topics", "force", "view"})
        if unknown:
            raise InvalidBody(f"{unknown[0]} is not a field of a synthesize request", details={"field": unknown[0]})
        if not isinstance(request.get("scope"), str):
            raise InvalidBody("scope is required: the scope whose concepts to re-synthesize", details={"field": "scope"})
        topics = request.get("topics", [])
        if not isinstance(topics, list) or len(topics) > MAX_TOPICS or not all(
                isinstance(t, str) and 0 < len(t) <= 200 for t in topics):  # fmt: skip
            raise InvalidBody(f"topics must be an array of at most {MAX_TOPICS} strings", details={"field": "topics"})
        force = request.get("force", False)
        if not isinstance(force, bool):
            raise InvalidBody("force must be true or false", details={"field": "force"})
        view = request.get("view", "local")
        if view not in ("local", "descend"):
            raise InvalidBody("view must be local or descend", details={"field": "view"})
        return {"scope": canonical_scope(request["scope"]), "topics": list(topics), "force": force, "view": view}

    async def start(self, request: Any, *, caller: str, tenant_id: str) -> dict[str, Any]:
        """Start re-synthesis (202): the job's id and its lifecycle stream."""
        ctx = self._ctx
        spec = self.parse(request)
        ctx.policy.check(caller, cap.UNDERSTANDING_SYNTHESIZE, spec["scope"])
        if self.jobs.running("synthesize") >= ctx.config.synthesis_max_running:
            raise RateLimited(f"{ctx.config.synthesis_max_running} synthesize jobs are running; retry when one ends",
                              details={"retry_after": 1, "limit": ctx.config.synthesis_max_running})  # fmt: skip
        walk = await self._engine.traverse(spec["scope"], spec["view"], caller=caller)
        scopes = [s for s in walk.scopes if ctx.policy.verdict(caller, cap.UNDERSTANDING_SYNTHESIZE, s).allowed]
        job_id = ctx.ids.new("job")
        params = {**spec, "scopes": scopes, "tenant_id": tenant_id}
        record = self.jobs.new_record("synthesize", job_id, scope=spec["scope"], params=params,
                                      first={"caller": caller, "tenant_id": tenant_id})  # fmt: skip
        record["progress"].update(dict.fromkeys(COUNTS, 0), scopes_total=len(scopes))
        await self.jobs.submit(record)
        return {"job_id": job_id, "status": "running", "scope": spec["scope"], "scopes": scopes,
                "topics": spec["topics"], "force": spec["force"],
                "lifecycle_stream": f"/v1/lifecycle/stream?job_id={job_id}"}  # fmt: skip

    async def _run(self, run: JobRun) -> None:
        """One scope per step; a restart resumes after the last scope done (its checkpoint)."""
        params, done = run.params, run.state.get("done", 0)
        scopes = params["scopes"]
        for position in range(done, len(scopes)):
            counts = await self._ctx.supervisor.request(scopes[position], lambda reply, s=scopes[position]: (
                messages.Synthesize(params["tenant_id"], tuple(params["topics"]), params["force"], reply)))
            progress = run.progress
            for name in ("subjects", "concepts", "concepts_versioned", "deprecated", "stale"):
                progress[name] = progress.get(name, 0) + counts.get(name, 0)
            progress["scopes_done"] = position + 1
            await run.checkpoint(done=position + 1)
            await run.tick((position + 1) / len(scopes) if scopes else 1.0)

    async def _finish(self, run: JobRun, status: str) -> dict[str, Any]:
        progress = run.progress
        return {"summary": {name: progress.get(name, 0) for name in COUNTS}} if status == COMPLETED else {}

    async def status(self, job_id: str) -> dict[str, Any]:
        record = await self.jobs.get(job_id) if isinstance(job_id, str) else None
        if record is None or record["kind"] != "synthesize":
            raise NotFound(f"no synthesize job {str(job_id)[:80]}", details={"job_id": str(job_id)[:80]})
        return record

    async def wait(self, job_id: str) -> dict[str, Any]:
        """The job's record once it has ended (for embedded callers and tests)."""
        async with self._engine.subscribe(job_id=job_id, events=[SYNTHESIS_COMPLETE]) as sub:
            record = await self.status(job_id)
            if record["status"] == "running":
                async for _ in sub:
                    break
        return await self.status(job_id)
