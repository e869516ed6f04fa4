"""Two ``cortexdb serve`` nodes on one PostgreSQL store: a request for a scope the other node owns
is forwarded to it (server/forward.py), and the owner checks it as it checks its own."""

from __future__ import annotations

import contextlib

import httpx
import pytest
import trio

from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings

from .pg_support import fresh_dsn

ALICE = "org:acme/user:alice"
BOB = "org:beta/user:bob"


@pytest.fixture
def dsn(live_pg_server):
    return fresh_dsn(live_pg_server)


def body(text: str, scope: str = ALICE) -> dict:
    return {"scope": scope, "modality": "conversation", "context": {"observed_at": "2026-05-13T15:42:00Z"},
            "content": {"kind": "message", "role": "user", "text": text}}  # fmt: skip


@contextlib.asynccontextmanager
async def nodes(dsn: str, *names: str):
    """Servers (one per name) on the dsn, each with its node id; yields their base URLs."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = []
        for name in names:
            settings = ServerSettings(backend="postgres", dsn=dsn, embedder="hash", bind="127.0.0.1:0",
                                      derivation_workers="thread", node_id=name)  # fmt: skip
            binds = await nursery.start(lambda task_status, s=settings: run_server(s, shutdown_trigger=stop.wait,
                                                                                   task_status=task_status))  # fmt: skip
            urls.append(f"http://127.0.0.1:{binds[0].rsplit(':', 1)[1]}")
        try:
            yield urls
        finally:
            stop.set()


async def test_a_request_for_a_scope_owned_elsewhere_is_answered_by_its_owner(dsn):
    alice = {"X-Cortex-Actor": "user:alice"}
    with trio.fail_after(120):  # a hang guard only
        async with (nodes(dsn, "node-a", "node-b") as (a, b),
                    httpx.AsyncClient(base_url=a, headers=alice) as on_a,
                    httpx.AsyncClient(base_url=b, headers=alice) as on_b):  # fmt: skip
            first = await on_a.post("/v1/experience?wait=consolidated", json=body("I live in Paris."))
            assert first.status_code == 200 and "X-Cortex-Forwarded-To" not in first.headers

            # node-b owns nothing of org:acme: it forwards, writes and reads alike
            second = await on_b.post("/v1/experience?wait=consolidated", json=body("I work at Initech."))
            assert second.status_code == 200, second.text
            assert second.headers["X-Cortex-Forwarded-To"] == "node-a"
            events = await on_b.get("/v1/events", params={"scope": ALICE})
            assert events.status_code == 200 and events.headers["X-Cortex-Forwarded-To"] == "node-a"
            assert {e["id"] for e in events.json()["items"]} == {first.json()["event_id"], second.json()["event_id"]}
            recall = await on_b.post("/v1/recall", json={"scope": ALICE, "query": "where does alice live"})
            assert recall.status_code == 200 and recall.headers["X-Cortex-Forwarded-To"] == "node-a"
            assert "Paris" in recall.text

            # reads are checked as on one node: node-b refuses what node-a refuses (before any
            # forwarding: the server's gate asks the policy; the owner asks again when forwarded)
            bob = {"X-Cortex-Actor": "user:bob"}
            direct = await on_a.get("/v1/events", params={"scope": ALICE}, headers=bob)
            forwarded = await on_b.get("/v1/events", params={"scope": ALICE}, headers=bob)
            assert direct.status_code == 403 and forwarded.status_code == 403, forwarded.text
            assert forwarded.json()["error_code"] == direct.json()["error_code"] == "NOT_A_MEMBER"
            # a request the node refuses before the engine sees a scope is not forwarded
            bad = await on_b.post("/v1/experience", json={"scope": ALICE, "modality": "conversation"})
            assert bad.status_code == 422 and "X-Cortex-Forwarded-To" not in bad.headers

            # a partition of its own node-b serves itself
            own = await on_b.post("/v1/experience?wait=captured", json=body("I like tea.", BOB),
                                  headers={"X-Cortex-Actor": "user:bob"})  # fmt: skip
            assert own.status_code == 202 and "X-Cortex-Forwarded-To" not in own.headers
