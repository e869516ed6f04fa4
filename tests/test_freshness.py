"""Freshness: how recently memory learned or last revised a record (its recorded time), a recall
signal beside recency (when it happened), shown in diagnostics.  Both backends."""

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.retrieve import planner, scoring

from .conftest import envelope

SCOPE = "org:acme/user:alice"
SAID = "The launch review is on Friday."


async def stale_and_fresh(engine, clock):
    """The same statement about the same moment, learned 60 days apart: (stale id, fresh id)."""
    stale = await engine.experience(envelope(SAID, observed_at="2026-03-01T10:00:00Z"),
                                    caller="user:alice", wait="indexed")  # fmt: skip
    clock.advance(days=60)
    fresh = await engine.experience(envelope(SAID, observed_at="2026-03-01T10:00:00Z"),
                                    caller="user:alice", wait="indexed")  # fmt: skip
    return stale.event_id, fresh.event_id


def config(weight: float) -> EngineConfig:
    return EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", freshness_weight=weight)


@pytest.mark.parametrize("weight", [1.0, 0.0])
async def test_freshness_is_a_signal_of_its_own(engine_factory, clock, weight):
    async with engine_factory(config=config(weight)) as engine:
        stale, fresh = await stale_and_fresh(engine, clock)
        pack = await engine.recall({"scope": SCOPE, "query": "launch review Friday", "include": ["events"],
                                    "diagnostics": "full"})  # fmt: skip
    items = pack["diagnostics"]["items"]
    assert items[fresh]["signals"]["recency"] == items[stale]["signals"]["recency"]  # same moment
    assert items[fresh]["signals"]["freshness"] == 1.0
    assert items[stale]["signals"]["freshness"] == pytest.approx(0.25, abs=0.01)  # two half-lives
    order = [e["id"] for e in pack["layers"]["events"]]
    weights = pack["diagnostics"]["weights"]
    summary = pack["diagnostics"]["freshness"]
    assert summary["weight"] == weights["freshness"] and summary["min"] == pytest.approx(0.25, abs=0.01)
    assert summary["mean"] == pytest.approx(0.625, abs=0.01)
    if weight:
        assert order.index(fresh) < order.index(stale) and weights["freshness"] > 0
    else:
        assert weights["freshness"] == 0 and items[fresh]["score"] == items[stale]["score"]


async def test_summary_diagnostics_report_freshness(engine, clock):
    await stale_and_fresh(engine, clock)
    pack = await engine.recall({"scope": SCOPE, "query": "launch"})
    assert set(pack["diagnostics"]["freshness"]) == {"weight", "mean", "min"}
    weights = next(p for p in pack["provenance"]["trail"] if p["phase"] == "score")["weights"]
    assert weights["freshness"] > 0 and sum(weights.values()) == pytest.approx(1.0, abs=1e-3)


def test_learned_at_reads_the_recorded_axis():
    assert scoring.learned_at("events", {"context": {"recorded_at": "2026-01-02T00:00:00Z"}}) == "2026-01-02T00:00:00Z"
    assert scoring.learned_at("beliefs", {"last_revised_at": "2026-01-03T00:00:00Z"}) == "2026-01-03T00:00:00Z"
    assert scoring.learned_at("facts", {"recorded_from": "2026-01-04T00:00:00Z"}) == "2026-01-04T00:00:00Z"
    assert scoring.recency(30.0, 30.0) == pytest.approx(0.5) and scoring.recency(0.0, 10.0) == 1.0
    assert planner.weights_for("EXPLORATORY_HYBRID", 0.0)["freshness"] == 0.0
    assert planner.single_signal("bm25")["freshness"] == 0.0


def test_the_settings_are_checked():
    with pytest.raises(ValueError):
        EngineConfig(freshness_half_life_days=0)
    with pytest.raises(ValueError):
        EngineConfig(freshness_weight=1.5)


async def test_http_and_sdk_packs_carry_freshness(tmp_path):
    from cortexdb import schemas
    from cortexdb.client import AsyncCortexClient

    from .sdk_support import NOW, live
    from .server_support import body, server

    async with server(tmp_path / "http") as h:
        await h.call("POST", "/v1/experience?wait=indexed", json=body(SAID, scope=SCOPE))
        response, pack = await h.call("POST", "/v1/recall", json={"scope": SCOPE, "query": "launch",
                                                                    "diagnostics": "full"})  # fmt: skip
        assert response.status_code == 200
        schemas.validator("stratified_pack").validate(pack)
        assert pack["diagnostics"]["freshness"]["min"] == 1.0  # learned just now
        assert all("freshness" in item["signals"] for item in pack["diagnostics"]["items"].values())
    scope = "org:acme/dept:eng/user:alice"
    async with live(tmp_path / "sdk") as (url, _), \
            AsyncCortexClient(url, actor="user:alice", scope=scope, now=lambda: NOW) as sdk:  # fmt: skip
        await sdk.experience(SAID, wait="indexed")
        pack = await sdk.recall("launch review")
    assert pack.diagnostics["freshness"]["weight"] > 0
