"""The time parameters over HTTP: ``as_of`` on single-record reads, ``include_superseded`` on
beliefs and episodes, ``overlapping=`` with bare dates, ``beliefs/why`` by id alone, and bad
input as a 4xx with the error envelope."""

from __future__ import annotations

from ..server_support import body, server

ALICE = "org:acme/user:alice"


async def seeded(h) -> dict:
    h.clock.set(h.clock.now().replace(day=1))
    await h.engine.experience(body("I live in Paris.", context={"observed_at": "2026-04-01T00:00:00Z"}),
                              caller="user:alice", wait="consolidated")  # fmt: skip
    before = h.clock.now()
    h.clock.advance(86400)
    await h.engine.experience(body("I moved to Berlin.", context={"observed_at": "2026-04-20T00:00:00Z"}),
                              caller="user:alice", wait="consolidated")  # fmt: skip
    await h.engine.flush(ALICE, seal=True)
    everything = (await h.engine.beliefs(ALICE, valid_during=".."))["items"]
    paris = next(b for b in everything if b["claim"]["object"]["name"] == "Paris")
    return {"before": before.strftime("%Y-%m-%dT%H:%M:%SZ"), "paris": paris["id"]}


async def test_single_records_as_of_and_why_by_id(tmp_path):
    async with server(tmp_path) as h:
        seen = await seeded(h)
        paris, before = seen["paris"], seen["before"]
        response, then = await h.call("GET", f"/v1/beliefs/{paris}?scope={ALICE}&as_of={before}")
        assert response.status_code == 200 and then["stance"] == "supported" and then["valid_to"] is None
        response, now = await h.call("GET", f"/v1/beliefs/{paris}?scope={ALICE}")
        assert now["stance"] == "contradicted" and now["version"] == 2
        response, why = await h.call("GET", f"/v1/beliefs/why?belief_id={paris}&as_of={before}")
        assert response.status_code == 200 and why["belief"]["stance"] == "supported"
        response, missing = await h.call("GET", "/v1/beliefs/why?belief_id=belief_nothing")
        assert response.status_code == 404 and missing["error_code"] == "NOT_FOUND"
        response, early = await h.call("GET", f"/v1/beliefs/{paris}?scope={ALICE}&as_of=2026-01-01T00:00:00Z")
        assert response.status_code == 404
        response, bad = await h.call("GET", f"/v1/beliefs/{paris}?scope={ALICE}&as_of=yesterday")
        assert response.status_code == 422 and bad["error_code"] == "INVALID_TIMESTAMP"
        response, _ = await h.call("GET", f"/v1/beliefs/{paris}?scope={ALICE}&limit=3")
        assert response.status_code == 400


async def test_lists_take_versions_and_bare_dates(tmp_path):
    async with server(tmp_path) as h:
        await seeded(h)
        response, page = await h.call("GET", f"/v1/beliefs?scope={ALICE}&include_superseded=true")
        assert response.status_code == 200
        assert {(b["claim"]["object"]["name"], b["recorded_to"] is None) for b in page["items"]} == {
            ("Paris", False), ("Berlin", True)}
        response, april = await h.call("GET", f"/v1/episodes?scope={ALICE}&overlapping=2026-04-01..2026-05-01")
        assert response.status_code == 200 and len(april["items"]) == 2  # the two turns are 19 days apart
        response, late = await h.call("GET", f"/v1/episodes?scope={ALICE}&overlapping=2026-04-15..2026-05-01")
        assert [e["started_at"] for e in late["items"]] == ["2026-04-20T00:00:00Z"]
        response, none = await h.call("GET", f"/v1/episodes?scope={ALICE}&overlapping=2026-06-01..2026-07-01")
        assert response.status_code == 200 and none["items"] == []
        response, _ = await h.call("GET", f"/v1/episodes?scope={ALICE}&include_superseded=true")
        assert response.status_code == 200
        response, bad = await h.call("GET", f"/v1/episodes?scope={ALICE}&overlapping=2026-02-30..")
        assert response.status_code == 422 and bad["error_code"] == "INVALID_TIMESTAMP"
