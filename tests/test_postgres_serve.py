"""``cortexdb serve --backend postgres --dsn ...``: the server keeps its records in PostgreSQL
(a second server on the same DSN reads what the first wrote), and a missing DSN is one line."""

from __future__ import annotations

import httpx
import pytest
import trio

from cortexdb.cli import main
from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings

from .pg_support import fresh_dsn

ALICE = "org:acme/user:alice"


@pytest.fixture
def dsn(live_pg_server):
    return fresh_dsn(live_pg_server)


def test_serve_on_postgres_without_a_dsn_is_one_line(monkeypatch):
    monkeypatch.delenv("CORTEX_PG_DSN", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--backend", "postgres", "--bind", "127.0.0.1:0", "--embedder", "hash"])
    assert str(exit_.value).startswith("cortexdb: the postgres backend needs --dsn or CORTEX_PG_DSN")


async def served(dsn: str, work) -> object:
    """Run ``work(base_url)`` against a dev_local server on the postgres backend, then stop it."""
    settings = ServerSettings(backend="postgres", dsn=dsn, embedder="hash", bind="127.0.0.1:0",
                              derivation_workers="thread")  # fmt: skip
    stop = trio.Event()
    with trio.fail_after(60):  # a hang guard only
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: run_server(settings, shutdown_trigger=stop.wait,
                                                                       task_status=task_status))  # fmt: skip
            try:
                return await work(f"http://127.0.0.1:{binds[0].rsplit(':', 1)[1]}")
            finally:
                stop.set()


async def test_a_second_server_on_the_same_dsn_reads_what_the_first_wrote(dsn):
    headers = {"X-Cortex-Actor": "user:alice"}
    body = {"scope": ALICE, "modality": "conversation", "context": {"observed_at": "2026-05-13T15:42:00Z"},
            "content": {"kind": "message", "role": "user", "text": "I live in Paris."}}  # fmt: skip

    async def write(base):
        async with httpx.AsyncClient(base_url=base, headers=headers) as client:
            response = await client.post("/v1/experience?wait=consolidated", json=body)
            assert response.status_code == 200, response.text
            return response.json()["event_id"]

    async def read(base):
        async with httpx.AsyncClient(base_url=base, headers=headers) as client:
            events = (await client.get("/v1/events", params={"scope": ALICE})).json()
            facts = (await client.get("/v1/facts", params={"scope": ALICE})).json()
            return [e["id"] for e in events["items"]], [f["object"]["name"] for f in facts["items"]]

    event_id = await served(dsn, write)
    assert await served(dsn, read) == ([event_id], ["Paris"])
