"""The SDK against a real server on 127.0.0.1 (ephemeral port, the built-in HTTP server): the
README quick start as written, reference Appendix E's flow, and every endpoint family through
both clients."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
from pathlib import Path

import pytest
import trio

from cortexdb.client import (
    AsyncCortexClient,
    Belief,
    Concept,
    CortexClient,
    Erasure,
    Event,
    Fact,
    Pack,
    StreamChunk,
)
from cortexdb.errors import NotFound, PolicyDenied, RateLimited

from .sdk_support import NOW, Sleeps, live

ROOT = Path(__file__).resolve().parents[1]
ALICE = "org:acme/dept:eng/user:alice"


def quick_start() -> str:
    """The README's SDK block (below ``<!-- sdk-quickstart -->``)."""
    text = (ROOT / "README.md").read_text()
    return re.search(r"<!-- sdk-quickstart -->\s*```python\n(.*?)```", text, re.S).group(1)


async def test_the_readme_quick_start_runs_as_written(tmp_path, monkeypatch):
    async with live(tmp_path) as (url, _):
        monkeypatch.setenv("CORTEX_URL", url)
        for name in ("CORTEX_TOKEN", "CORTEX_ACTOR", "CORTEX_SCOPE"):
            monkeypatch.delenv(name, raising=False)
        out = io.StringIO()

        def run() -> None:
            with contextlib.redirect_stdout(out):
                exec(compile(quick_start(), "README.md", "exec"), {})

        await trio.to_thread.run_sync(run)
    assert "Alice likes green tea" in out.getvalue()
    assert len(quick_start().strip().splitlines()) == 4  # the import and three lines


class TokenProvider:
    """Appendix E's ``OktaTokenProvider(...)``: a fresh token whenever the client asks."""

    def __init__(self, keys, sub: str) -> None:
        self.keys, self.sub, self.calls = keys, sub, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.keys.paseto(self.sub)


async def test_reference_appendix_e_flow(tmp_path):
    """Appendix E, step by step (awaited: the async client; `async for` as written).  Deviations:
    the why and GDPR steps name the scope they act in (the server requires it) through the
    client's default scope; the streamed recall is `holistic` (`narrative` needs the LLM of
    /v1/answer); the lifecycle loop stops at `erasure_complete`."""
    async with live(tmp_path, preset="on_prem_enterprise") as (url, keys):
        provider = TokenProvider(keys, "user:alice")
        earlier = NOW - dt.timedelta(minutes=42)  # the SDK's clock, for `observed_at`: before the server's now
        client = AsyncCortexClient(base_url=url, token_provider=provider, scope=ALICE, now=lambda: earlier)
        # Write
        res = await client.experience(
            scope=ALICE, modality="conversation",
            content={"kind": "message", "role": "user", "text": "Alice works at Acme. We decided to launch Q3 in July."},
            context={"happened_at": "2026-05-13T15:00:00Z", "recorded_at": "2026-05-13T15:00:01Z"},
            wait="indexed",
        )  # fmt: skip
        assert res.event_id.startswith("evt_") and res.stages_completed == ["captured", "extracted", "indexed"]
        async for ev in client.lifecycle(event_id=res.event_id):  # beliefs come with `consolidated`
            if ev.event == "consolidated":
                break
        # Recall (stratified pack)
        pack = await client.recall(scope=ALICE, view="holistic", query="What did we decide about Q3?",
                                   layers=["beliefs", "facts", "episodes"], temporal={"natural": "last 30 days"})  # fmt: skip
        assert isinstance(pack, Pack) and "Alice works at Acme" in pack.context_block
        assert pack.layers.beliefs and all(isinstance(b, Belief) for b in pack.layers.beliefs)
        for b in pack.layers.beliefs:
            assert b.claim["predicate"] and 0 < b.confidence < 1
        # Why
        why = await client.beliefs.why(belief_id=pack.layers.beliefs[0].id)
        assert "Alice works at Acme" in why.narrative and why.belief.id == pack.layers.beliefs[0].id
        assert res.event_id in why.narrative and why.support_graph.nodes
        # Streaming recall
        chunks = [chunk async for chunk in client.recall_stream(scope=ALICE, view="holistic", query="Q3 launch")]
        assert all(isinstance(c, StreamChunk) for c in chunks) and chunks[-1].event == "done"
        assert "".join(c.text for c in chunks) == next(c.text for c in chunks if c.event == "context_block")
        # Forget
        facts = await client.facts(scope=ALICE)
        acme = next(f.object["id"] for f in facts if f.predicate == "works_at")
        forgotten = await client.forget(scope=ALICE, layers=["beliefs"], selector={"about_entity": acme},
                                        cascade="derived_only")  # fmt: skip
        assert forgotten.deleted["beliefs"] == 1 and forgotten.audit_id.startswith("audit_")
        # GDPR
        job = await client.forget_gdpr(scope=ALICE, audit_note="DSR #1234")
        assert isinstance(job, Erasure) and job.erasure_id.startswith("erasure_")
        seen = []
        with trio.fail_after(60):  # a hang guard only
            async for ev in client.lifecycle(erasure_id=job.erasure_id):
                seen.append(ev.event)
                if ev.event == "erasure_complete":
                    break
        assert "erasure_progress" in seen and (await client.erasures.status(job.erasure_id)).status == "completed"
        assert provider.calls >= 10  # a token per request (ten here); the actor is its `sub`
        await client.aclose()


async def test_writes_reads_and_layers_with_both_clients(tmp_path):
    async with live(tmp_path) as (url, _):
        async with AsyncCortexClient(url, actor="user:alice", scope=ALICE, now=lambda: NOW) as sdk:
            first = await sdk.experience("Alice works at Acme. Alice likes green tea.", wait="consolidated")
            bulk = await sdk.experience_bulk(["Bob joined Acme.", {"text": "Carol works at Initech.",
                                                                   "idempotency_key": "carol-1"}])  # fmt: skip
            assert bulk.accepted == 2 and bulk.batch_id.startswith("batch_")
            assert (await sdk.find_experience("carol-1")).event_id.startswith("evt_")
            async for ev in sdk.lifecycle(batch_id=bulk.batch_id, events="consolidated"):  # replayed, then live
                if ev.event_id != first.event_id and ev.stage == "consolidated":
                    break
            again = await sdk.experience("Alice works at Acme. Alice likes green tea.", idempotency_key="same")
            replayed = await sdk.experience("Alice works at Acme. Alice likes green tea.", idempotency_key="same")
            assert replayed.replay and replayed.event_id == again.event_id and not again.replay
            events = [e async for e in sdk.events.iter(limit=1)]  # one per page: the cursors are followed
            assert len(events) == 4 and all(isinstance(e, Event) for e in events)
            assert (await sdk.events.get(first.event_id)).text == "Alice works at Acme. Alice likes green tea."
            fact = [f async for f in sdk.facts.iter() if f.predicate == "works_at"][0]
            assert isinstance(fact, Fact) and (await sdk.facts.get(fact.id)).id == fact.id
            timeline = await sdk.facts.timeline(fact.subject["id"], "works_at")
            assert timeline.timeline and timeline.predicate == "works_at"
            assert (await sdk.facts.supports(fact.id)).items
            belief = (await sdk.beliefs()).items[0]
            assert (await sdk.beliefs.get(belief.id)).id == belief.id
            assert (await sdk.beliefs.why(belief)).support_graph.edges
            await sdk.admin.flush(ALICE, seal=True)
            episode = (await sdk.episodes(limit=1)).items[0]
            assert (await sdk.episodes.get(episode.id)).events
            concepts = (await sdk.understanding()).items  # Alice's: what she works at and likes
            assert concepts and all(isinstance(c, Concept) for c in concepts)
            assert (await sdk.understanding.coverage()).concept_count == len(concepts)
            with pytest.raises(NotFound) as missing:
                await sdk.understanding.get("concept_x")
            assert missing.value.request_id.startswith("req_")
            memory = await sdk.lifecycle.memory_event(first.event_id)
            assert memory.stages_completed[:2] == ["captured", "extracted"]
            row = await sdk.lifecycle.get(memory.lifecycle_event_ids[0])
            assert row.stage == "captured" and row.event_id == first.event_id
            rows = [r async for r in sdk.lifecycle.iter(ALICE, event_id=first.event_id, limit=2)]
            assert [r.lifecycle_id for r in rows] == memory.lifecycle_event_ids
            cancelled = await sdk.lifecycle.cancel(again.event_id, audit_note="typo")
            assert cancelled.excluded_from_recall and cancelled.audit_id.startswith("audit_")

        def sync_side() -> tuple:
            with CortexClient(url, actor="user:alice", scope=ALICE, now=lambda: NOW) as sdk:
                receipt = sdk.add("Dave likes espresso.")
                pack = sdk.search("espresso")
                facts = (list(sdk.facts.iter(limit=1)), sdk.facts(limit=100).items)
                chunks = list(sdk.recall_stream("espresso"))
                stream = sdk.lifecycle(event_id=receipt.event_id)
                stages = [next(stream).event for _ in range(3)]
                stream.close()
                answer = sdk.answer("Who likes espresso?", use_pack_id=pack.pack_id)
                told = list(sdk.answer_stream("Who likes espresso?"))
                return receipt, pack, facts, chunks, stages, answer, told

        receipt, pack, facts, chunks, stages, answer, told = await trio.to_thread.run_sync(sync_side)
        assert answer.supported is True and "espresso" in str(answer) and answer.pack_id == pack.pack_id
        assert answer.citations and all(c["marker"] in answer.answer for c in answer.citations)
        assert [c.event for c in told][-1] == "done" and "espresso" in "".join(c.text for c in told)
        assert receipt.status == "indexed" and "espresso" in str(pack), str(pack)
        assert len(facts[0]) >= 2 and facts[0] == facts[1]  # page by page: the same facts
        assert [c.event for c in chunks][0] == "plan" and stages == ["captured", "extracted", "indexed"]


async def test_erasures_blobs_scopes_policy_audit_tokens_phrases_admin(tmp_path):
    async with live(tmp_path) as (url, _), AsyncCortexClient(url, actor="user:root", scope="org:acme/user:root",
                                                             now=lambda: NOW) as sdk:  # fmt: skip
        await sdk.experience("Root lives in Paris.", wait="consolidated")
        preview = await sdk.erasures.preview(audit_note="DSR #1")
        assert preview.preview_id.startswith("ervw_") and preview.refcount_breakdown["events_to_delete"] == 1
        lines = [line async for line in sdk.erasures.manifest_iter(preview.preview_id, limit=1)]
        assert len(lines) >= 2 and (await sdk.erasures.manifest(preview.preview_id)).items
        job = await sdk.erasures.execute(from_preview_id=preview.preview_id)
        async for ev in sdk.lifecycle(erasure_id=job.erasure_id):
            if ev.event == "erasure_complete":
                break
        assert (await sdk.erasures.status(job.erasure_id)).audit_id.startswith("audit_")
        replayed = []  # the job is over: its feed, asked without a resume point, replays it
        with trio.fail_after(60):  # a hang guard only
            async for ev in sdk.lifecycle(erasure_id=job.erasure_id):
                replayed.append(ev.event)
                if ev.event == "erasure_complete":
                    break
        assert replayed[0] == "erasure_progress" and replayed.count("erasure_complete") == 1
        assert (await sdk.erasures.cancel(job.erasure_id)).erasure_id == job.erasure_id
        # blobs: bytes, and a file (streamed); the same bytes again are a replay
        blob = await sdk.blobs.upload(b"\x89PNG fake", content_type="image/png", filename="a.png")
        assert blob.size_bytes == 9 and not blob.replay and blob.content_type == "image/png"
        again = await sdk.blobs.upload(io.BytesIO(b"\x89PNG fake"), content_type="image/png", filename="a.png")
        assert again.replay and again.blob_id == blob.blob_id
        assert await sdk.blobs.download(blob.blob_id) == b"\x89PNG fake"
        # scopes
        registered = await sdk.scopes.register("ws:q3", members=[{"actor": "user:root", "role": "owner"}])
        assert registered.path == "ws:q3" and (await sdk.scopes.get("ws:q3")).members[0]["actor"] == "user:root"
        assert "ws:q3" in [s.path async for s in sdk.scopes.iter(limit=1)]
        diff = await sdk.scopes.set_members("ws:q3", [{"actor": "user:root", "role": "owner"},
                                                      {"actor": "agent:bot", "role": "writer"}])  # fmt: skip
        assert diff.added == [{"actor": "agent:bot", "role": "writer"}]
        assert (await sdk.scopes.prune(older_than="P1D")).get("candidates") is not None
        await sdk.scopes.delete("ws:q3")
        # policy, audit, tokens
        effective = await sdk.policy.effective(scope="org:acme/user:root")
        assert "scope.write" in effective.allowed and effective.actor == "user:root"
        assert (await sdk.policy.get("deployment")).get("preset") == "dev_local"
        actor_doc = await sdk.policy.put("actor", {"deny": ["llm.invoke"]}, "agent:bot")
        assert (await sdk.policy.get("actor", "agent:bot")).to_dict() == actor_doc.to_dict()
        rows = [r async for r in sdk.audit.iter(capability="blob.upload", limit=1)]
        assert len(rows) == 2 and (await sdk.audit.get(rows[0].id)).id == rows[0].id
        write_row = (await sdk.audit.query(capability="scope.write", limit=1)).items[0]
        assert (await sdk.audit.verify(write_row.id, "{}")).match is False
        assert (await sdk.whoami()).caller == "user:root" and (await sdk.auth.whoami()).operator is True
        assert await sdk.auth.revoke("some-jti", reason="rotated") is None
        # temporal phrases, admin
        phrase = await sdk.phrases.add("fiscal_q3", "fiscal Q3", {"valid_during": ["2026-07-01", "2026-10-01"]})
        assert phrase.name == "fiscal_q3" and [p.name for p in await sdk.phrases.list()] == ["fiscal_q3"]
        assert (await sdk.phrases.delete("fiscal_q3")).deleted is True
        assert (await sdk.admin.version()).name == "cortexdb" and (await sdk.admin.health()).status == "ok"
        assert "cortexdb_requests_total" in await sdk.admin.metrics()
        assert (await sdk.admin.compact()).get("compacted") in (True, False)
        assert "/v1/recall" in (await sdk.admin.openapi())["paths"]


async def test_a_real_servers_refusals_arrive_as_typed_errors(tmp_path):
    preset = tmp_path / "tight.yaml"
    preset.write_text("preset: tight\nallow: ['*']\ndefaults:\n  actor.require_signed: true\n"
                      "  rate_limit.write: '1/h'\n  rate_limit.read: '1000/s'\n")  # fmt: skip
    async with live(tmp_path, preset=str(preset)) as (url, keys):
        narrow = keys.paseto("user:alice", caps=["scope.write"])
        sleeps = Sleeps()
        async with AsyncCortexClient(url, token=narrow, scope=ALICE, sleep=sleeps.asleep, now=lambda: NOW) as sdk:
            with pytest.raises(PolicyDenied) as denied:
                await sdk.recall("anything")
            assert denied.value.details["denied_by_tier"] == "token" and denied.value.request_id.startswith("req_")
            await sdk.experience("one write an hour")
            with pytest.raises(RateLimited) as limited:  # Retry-After 3600 s > max_retry_after: not waited
                await sdk.experience("a second one")
            assert limited.value.retry_after == 3600.0 and sleeps.pauses == []
        async with AsyncCortexClient(url, token=narrow, scope=ALICE, sleep=sleeps.asleep, max_retries=2,
                                     max_retry_after=7200, now=lambda: NOW) as patient:  # fmt: skip
            with pytest.raises(RateLimited):
                await patient.experience("a second one")
            assert sleeps.pauses == [3600.0, 3600.0]
