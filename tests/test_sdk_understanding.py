"""The SDK's understanding job and vocabularies (reference §8.7.11, §8.14) against a live server,
through both clients: synthesize then wait on the job's end, vocabularies created, read and
replaced (a tenant admin's), and what a non-admin and a bad body get."""

from __future__ import annotations

import pytest
import trio

from cortexdb.client import AsyncCortexClient, Concept, CortexClient, SynthesisJob, Vocabulary
from cortexdb.errors import InvalidBody, NotFound, PolicyDenied, VocabularyExists

from .sdk_support import NOW, Sleeps, live

ALICE = "org:acme/user:alice"


async def test_synthesize_and_wait_with_the_async_client(tmp_path):
    async with live(tmp_path, enable_experimental=True) as (url, _), \
            AsyncCortexClient(url, actor="user:alice", scope=ALICE, now=lambda: NOW) as sdk:  # fmt: skip
        await sdk.experience("Acme has 200 seats. Acme is in Berlin.", wait="consolidated")
        before = (await sdk.understanding()).items
        assert [c.name for c in before] == ["Acme"] and isinstance(before[0], Concept)
        job = await sdk.understanding.synthesize(force=True)
        assert isinstance(job, SynthesisJob) and job.job_id.startswith("job_") and job.scope == ALICE
        assert job.status == "running" and job.scopes == [ALICE] and job.force is True
        done = await sdk.understanding.wait_synthesis(job, poll_interval=0.01)
        assert done.done and done.status == "completed" and done.job_id == job.job_id, done
        assert done.summary["subjects"] == 1 and done.summary["concepts_versioned"] == 1, done
        after = await sdk.understanding.get(before[0].id)
        assert after.version == before[0].version + 1  # force: a new version though nothing changed
        topical = await sdk.understanding.synthesize(topics=["no such topic"])
        assert (await sdk.understanding.wait_synthesis(topical.job_id)).summary["subjects"] == 0
        with pytest.raises(InvalidBody) as bad:
            await sdk.understanding.synthesize(view="sideways")
        assert bad.value.details["field"] == "view"


async def test_vocabularies_and_a_timed_out_wait_with_the_blocking_client(tmp_path):
    sleeps = Sleeps()
    async with live(tmp_path, enable_experimental=True) as (url, _):

        def scenario() -> tuple:
            with CortexClient(url, actor="user:root", scope="org:acme/user:root", sleep=sleeps) as root:
                created = root.vocabularies.create("sales", predicates=[{"id": "seat_count", "aliases": ["seats"]}],
                                                   description="sales terms")  # fmt: skip
                with pytest.raises(VocabularyExists):
                    root.vocabularies.create("sales", predicates=[{"id": "seat_count"}])
                relations = root.vocabularies.create("org", kind="relation", relations=[{"id": "supplies"}])
                updated = root.vocabularies.update("sales", predicates=[{"id": "seat_count"}, {"id": "arr"}],
                                                   scopes=["org:acme"])  # fmt: skip
                with pytest.raises(InvalidBody) as bad:
                    root.vocabularies.update("sales", predicates=[])
                with pytest.raises(NotFound):
                    root.vocabularies.get("nope")
                with pytest.raises(TimeoutError):  # a job id nobody started never ends
                    root.understanding.wait_synthesis("job_nope", timeout=0, poll_interval=0.01)
            with CortexClient(url, actor="user:alice", scope=ALICE) as alice:
                read = alice.vocabularies.get("sales")  # every member of the tenant reads it
                with pytest.raises(PolicyDenied):
                    alice.vocabularies.update("sales", predicates=[{"id": "x"}])
            return created, relations, updated, bad.value, read

        created, relations, updated, bad, read = await trio.to_thread.run_sync(scenario)
    assert isinstance(created, Vocabulary) and created.name == "sales" and created.kind == "predicate"
    assert created.version == 1 and created.description == "sales terms"
    assert created.predicates == [{"id": "seat_count", "aliases": ["seats"]}]
    assert relations.kind == "relation" and relations.relations == [{"id": "supplies"}]
    assert updated.version == 2 and [p["id"] for p in updated.predicates] == ["seat_count", "arr"]
    assert updated.scopes == ["org:acme"] and bad.details["field"] == "predicates"
    assert read == updated
