"""Nothing left behind after a GDPR erasure (issue 12): the events carrying a unique marker
(tests/test_nothing_left.py writes them) are erased through ``POST /v1/erasures``, and then no read
path, index, cache, replay, stream resume, idempotency lookup or (LevelDB) file on disk yields the
marker — while the audit rows are kept and the writes' rows still verify without their sizes."""

from __future__ import annotations

import json
import os

import pytest
import trio

from cortexdb.errors import NotFound

from .server_support import body
from .test_nothing_left import (
    EVERYTHING,
    MARKED,
    MARKER,
    NAME,
    SCOPE,
    TENANT,
    files_with_marker,
    first_chunk,
    held_vectors,
    lane,
    layer_reads,
    leaks,
    marked_terms,
    plant_in_leveldb_logs,
    recalls,
    served,
    text_of,
    write,
)


async def erase(h) -> dict:
    response, accepted = await h.call("POST", "/v1/erasures", json={"scope": SCOPE, "audit_note": "DSR"})
    assert response.status_code == 202, accepted
    with trio.fail_after(60):  # a hang guard only: the wait is on the job's lifecycle record
        async with h.engine.subscribe(job_id=accepted["erasure_id"], events="erasure_complete",
                                      since_lifecycle_id="") as ended:  # fmt: skip
            await ended.__anext__()
    _, status = await h.call("GET", f"/v1/erasures/{accepted['erasure_id']}")
    assert status["status"] == "completed", status
    return status


@pytest.mark.parametrize("backend", ["memory", "leveldb"])
async def test_an_erasure_leaves_no_trace_of_the_marker(tmp_path, backend):
    async with served(tmp_path, backend) as h:
        ids = await write(h)
        records = []
        for layer in ("facts", "beliefs", "episodes"):
            _, page = await h.call("GET", f"/v1/{layer}?scope={SCOPE}&limit=1000{EVERYTHING[layer]}")
            records += [r for r in page["items"] if MARKER in json.dumps(r).casefold()]
        pack = await h.engine.recall({"scope": SCOPE, "query": MARKER, "idempotency_key": "r1"}, caller="user:alice")
        assert MARKER in json.dumps(pack) and marked_terms(h)
        gone = {r["id"] for r in records} | set(ids["marked"])
        assert gone & held_vectors(h)
        _, rows = await h.call("GET", f"/v1/lifecycle?scope={SCOPE}&limit=1000")
        assert MARKER in json.dumps(rows)

        if backend == "leveldb":
            await plant_in_leveldb_logs(h, tmp_path / "data")
        status = await erase(h)
        assert status["progress"]["deleted_events"] == len(ids["marked"]) + len(ids["plain"])

        texts = await layer_reads(h, ids, records) + await recalls(h)
        texts.append(await first_chunk(h, f"/v1/lifecycle/stream?scope={SCOPE}&since_lifecycle_id={rows['items'][0]['lifecycle_id']}"))
        _, rows_after = await h.call("GET", f"/v1/lifecycle?scope={SCOPE}&limit=1000")
        texts.append(json.dumps(rows_after))
        texts.append(await text_of(h, "GET", "/v1/experience/by-idempotency-key/k-long"))
        texts.append(await text_of(h, "POST", "/v1/recall", {"scope": SCOPE, "query": MARKER, "idempotency_key": "r1"}))
        texts.append(await text_of(h, "GET", f"/v1/erasures/{status['erasure_id']}/manifest"))
        texts.append(await text_of(h, "GET", f"/v1/audit/{status['audit_id']}"))
        assert leaks(texts) == []
        with pytest.raises(NotFound):
            h.engine.get_pack(pack["pack_id"])  # use_pack_id
        assert marked_terms(h) == [] and not gone & held_vectors(h)
        assert lane(h) is not None
        for name in (NAME, f"{NAME} Labs", "user:alice"):  # the entities only the erased events mentioned
            assert await h.engine._ctx.entities.find(TENANT, name) is None

        _, audit = await h.call("GET", "/v1/audit?limit=1000")
        writes = [r for r in audit["items"] if r["endpoint"] == "POST /v1/experience" and r["scope"] == SCOPE]
        assert writes and all("body_bytes" not in r["request"] for r in writes)
        first = next(r for r in writes if r["event_id"] == ids["marked"][0])
        _, verified = await h.call("POST", "/v1/audit/verify", json={"audit_id": first["id"],
                                                                     "body": json.dumps(MARKED[0])})  # fmt: skip
        assert verified["match"] is True, verified
        if backend == "leveldb":  # every file: tables, MANIFEST-*, *.log, LOG*, CURRENT — the engine still open
            assert files_with_marker(tmp_path / "data") == []
            assert {"CURRENT", "LOG"} <= set(os.listdir(tmp_path / "data"))  # the grep looked at real files
        response, written = await h.call("POST", "/v1/experience?wait=consolidated", json=body("I like chess."))
        assert response.status_code == 200 and written["event_id"], written  # the engine goes on
