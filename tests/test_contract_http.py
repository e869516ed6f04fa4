"""Issue 15, "true to the contract": the reference's promises checked over HTTP (the in-process
app, memory backend, manual clock).  One test (or a few) per item of the issue."""

from __future__ import annotations

from .server_support import body, server

ALICE = "org:acme/user:alice"
PLANNER = {"id": "agent:planner_v3", "type": "agent"}
EXAMPLE_FILTER = {"AND": [{"observed_actor": {"in": ["user:alice", "agent:planner_v3"]}},
                          {"confidence": {"gte": 0.6}}]}  # fmt: skip  (§8.3's own example)


def names(items: list[dict], key: str = "claim") -> set[str]:
    """The object names of facts (``key="object"``) or beliefs (``claim``)."""
    return {(i["object"] if key == "object" else i["claim"]["object"]).get("name") for i in items}


# -- 1. observed_actor filters facts and beliefs by their events' observers ---------------------
async def test_observed_actor_filter_keeps_facts_and_beliefs_of_the_actors_events(tmp_path):
    async with server(tmp_path) as h:
        for text, extra in (("I live in Paris.", {}), ("Bob lives in Rome.", {"observed_actor": PLANNER})):
            response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text, **extra))
            assert response.status_code == 200, data

        async def recall(filters):
            response, pack = await h.call("POST", "/v1/recall", json={
                "scope": ALICE, "query": "live Paris Rome", "filters": filters})  # fmt: skip
            assert response.status_code == 200, pack
            return pack["layers"]

        example = await recall(EXAMPLE_FILTER)  # the reference's example returns what it names
        assert names(example["facts"], "object") == {"Paris", "Rome"}
        assert names(example["beliefs"]) == {"Paris", "Rome"}
        planner = await recall({"observed_actor": {"eq": "agent:planner_v3"}})
        assert names(planner["facts"], "object") == {"Rome"} and names(planner["beliefs"]) == {"Rome"}
        assert [e["actor"] for e in planner["events"]] == ["agent:planner_v3"]
        alice = await recall({"observed_actor": {"in": ["user:alice"]}})
        assert names(alice["facts"], "object") == {"Paris"} and names(alice["beliefs"]) == {"Paris"}
        nobody = await recall({"observed_actor": {"in": ["user:carol"]}})
        assert nobody["facts"] == [] and nobody["beliefs"] == [] and nobody["events"] == []
