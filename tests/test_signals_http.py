"""Signals over HTTP (docs/signals.md): record, snapshot with trajectories, type settings (tenant
admins only), audit, bad input as a 4xx envelope, recall's ``signals`` part, forget; and the SDK's
``client.signals`` against a live server."""

from __future__ import annotations

import json

import pytest

from cortexdb.client import AsyncCortexClient
from cortexdb.engine.policy import capabilities as cap
from cortexdb.errors import InvalidRequest, PolicyDenied
from cortexdb.schemas import validator

from .sdk_support import live
from .server_support import server
from .test_contract_http import sse

SCOPE = "org:acme/user:alice"
SIGNAL = {"scope": SCOPE, "subject": "user:alice", "type": "frustration", "intensity": 0.8}


async def test_record_snapshot_and_audit(tmp_path):
    async with server(tmp_path) as h:
        response, stored = await h.call("POST", "/v1/signals", json=SIGNAL)
        assert response.status_code == 201, stored
        validator("signal").validate(stored)
        assert "capability=signal.write" in response.headers["X-Cortex-Policy"]
        h.clock.advance(3 * 86_400)
        response, snap = await h.call("GET", f"/v1/signals?scope={SCOPE}&subject=user:alice&window=P2D")
        assert response.status_code == 200, snap
        validator("signal_snapshot").validate(snap)
        assert snap["window_seconds"] == 2 * 86_400
        assert snap["items"][0]["effective_intensity"] == pytest.approx(0.4)
        assert snap["subjects"][0]["types"][0]["trajectory"] == "cooling"
        response, rows = await h.call("GET", f"/v1/audit?capability={cap.SIGNAL_WRITE}")
        assert [r["summary"] for r in rows["items"]] == [{"signal_id": stored["id"], "type": "frustration"}]


@pytest.mark.parametrize("path, payload, status, field", [
    ("/v1/signals", {**SIGNAL, "intensity": 2}, 422, "intensity"),
    ("/v1/signals", {**SIGNAL, "extra": 1}, 422, "extra"),
    ("/v1/signals", {k: v for k, v in SIGNAL.items() if k != "scope"}, 400, "scope"),
    ("/v1/signals", {**SIGNAL, "scope": "not a scope"}, 422, None),
])  # fmt: skip
async def test_bad_writes_are_4xx_envelopes(tmp_path, path, payload, status, field):
    async with server(tmp_path) as h:
        response, data = await h.call("POST", path, json=payload)
        assert response.status_code == status, data
        validator("error_envelope").validate(data)
        if field:
            assert data["details"]["field"] == field


@pytest.mark.parametrize("query, field", [("window=soon", "window"), ("limit=0", "limit"), ("as_of=later", "as_of"),
                                          ("bogus=1", "bogus"), ("type=Not-A-Type", "type")])  # fmt: skip
async def test_bad_reads_are_4xx_envelopes(tmp_path, query, field):
    async with server(tmp_path) as h:
        response, data = await h.call("GET", f"/v1/signals?scope={SCOPE}&{query}")
        assert 400 <= response.status_code < 500, data
        assert data["details"]["field"] == field


async def test_type_settings_are_for_tenant_admins(tmp_path):
    async with server(tmp_path) as h:
        response, data = await h.call("PUT", "/v1/signals/types/curiosity", json={"half_life_seconds": 60})
        assert response.status_code == 403, data
        response, data = await h.call("PUT", "/v1/signals/types/curiosity", "user:root",
                                      json={"half_life_seconds": 60, "polarity": "positive"})  # fmt: skip
        assert response.status_code == 200 and data["half_life_seconds"] == 60, data
        response, data = await h.call("PUT", "/v1/signals/types/curiosity", "user:root", json={"half_life_seconds": -1})
        assert response.status_code == 422 and data["details"]["field"] == "half_life_seconds"
        response, data = await h.call("GET", "/v1/signals/types")
        assert {"type": "curiosity", "half_life_seconds": 60, "polarity": "positive", "builtin": False} in data["items"]
        response, stored = await h.call("POST", "/v1/signals", json={**SIGNAL, "type": "curiosity"})
        assert stored["half_life_seconds"] == 60 and stored["polarity"] == "positive"
        response, data = await h.call("DELETE", "/v1/signals/types/curiosity", "user:root")
        assert data == {"type": "curiosity", "deleted": True}


async def test_recall_carries_signals_and_forget_removes_them(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/signals", json=SIGNAL)
        response, pack = await h.call("POST", "/v1/recall", json={"scope": SCOPE, "query": "anything"})
        assert response.status_code == 200, pack
        assert [(s["type"], s["trajectory"]) for s in pack["signals"]] == [("frustration", "warming")]
        # another user's personal scope is not alice's to read: mallory's recall of his own sees none
        response, other = await h.call("POST", "/v1/recall", "user:mallory",
                                       json={"scope": "org:acme/user:mallory", "query": "anything"})  # fmt: skip
        assert other["signals"] == []
        response, data = await h.call("GET", f"/v1/signals?scope={SCOPE}", "user:mallory")
        assert response.status_code == 403, data
        response, data = await h.call("POST", "/v1/forget", json={"scope": SCOPE, "layers": ["signals"],
                                                                  "selector": {"about_subject": "user:alice"}})  # fmt: skip
        assert response.status_code == 200 and data["deleted"]["signals"] == 1, data
        response, snap = await h.call("GET", f"/v1/signals?scope={SCOPE}")
        assert snap["total"] == 0


async def test_streamed_recall_sends_the_signals_and_relationships_events(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/signals", json=SIGNAL)
        await h.call("POST", "/v1/relationships", json={"scope": SCOPE, "from": "Alice", "type": "manages", "to": "Priya"})
        status, _, raw = await sse(h, "/v1/recall", {"scope": SCOPE, "query": "What is the relationship between Alice and Priya?",
                                                   "stream": True})
        assert status == 200
        frames = [frame for frame in raw.decode().split("\n\n") if frame.strip()]
        events = {}
        for frame in frames:
            lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
            events.setdefault(lines.get("event"), json.loads(lines["data"]))
        order = [name for name in events]
        assert order.index("relationships") < order.index("context_block") and order.index("signals") < order.index("context_block")
        assert [s["type"] for s in events["signals"]["items"]] == ["frustration"]
        assert [(e["from"]["name"], e["type"], e["to"]["name"]) for e in events["relationships"]["items"]] == [
            ("Alice", "manages", "Priya")]


async def test_the_sdk(tmp_path):
    async with live(tmp_path) as (url, _), AsyncCortexClient(url, actor="user:alice", scope=SCOPE) as sdk:
        stored = await sdk.signals.record("user:alice", "satisfaction", 0.6, observed_at="2026-05-13T15:00:00Z")
        assert stored.id.startswith("sig_") and stored.polarity == "positive"
        snap = await sdk.signals.snapshot(subject="user:alice", window="P1D")
        assert snap.total == 1 and snap.subjects[0]["overall"] == "warming"
        assert [t.type for t in await sdk.signals.types()][:1] == ["anxiety"]
        with pytest.raises(InvalidRequest):
            await sdk.signals.record("user:alice", "satisfaction", 1.5)
    async with live(tmp_path, preset="on_prem_enterprise") as (url, keys):
        async with AsyncCortexClient(url, token=keys.paseto("user:alice"), scope=SCOPE) as sdk:
            with pytest.raises(PolicyDenied):
                await sdk.signals.set_type("curiosity", 60)
        async with AsyncCortexClient(url, token=keys.paseto("user:root"), scope=SCOPE) as root:
            assert (await root.signals.set_type("curiosity", 60, polarity="positive")).half_life_seconds == 60
            assert (await root.signals.delete_type("curiosity")).deleted is True
