"""Several nodes on one PostgreSQL store: what one node's server changes in the node-wide tables it
keeps in memory — a revoked token, a scope's members, a policy document — holds on the other
node's server once the commit is heard (server/shared.py), not at its next restart."""

from __future__ import annotations

import attrs
import pytest
import trio

import cortexdb
from cortexdb.backends.postgres import PostgresStore
from cortexdb.engine.storage import keys
from cortexdb.engine.storage.placement import shared_changes
from cortexdb.engine.storage.table import JSON, Table
from cortexdb.server import shared
from cortexdb.server.app import build_state, load_stores
from cortexdb.server.settings import ServerSettings

from .pg_support import fresh_dsn
from .test_engine import envelope
from .test_postgres_nodes import config

ALICE = "org:acme/user:alice"


@pytest.fixture
def dsn(live_pg_server):
    return fresh_dsn(live_pg_server)


def test_writes_to_shared_tables_are_announced():
    table = Table(None, keys.prefix(keys.POLICY_DOCS), JSON)
    lines = shared_changes([table.put_op(("tenant", "acme"), {"allow": []}),
                            Table(None, keys.prefix(keys.REVOKED), JSON).delete_op("jti-1"),
                            Table(None, keys.prefix(keys.SIGNALS), JSON).put_op("x", {})])  # fmt: skip
    assert lines == [b"!PO tenant\x01acme", b"!RV jti-1"]  # a per-scope table (SG) is not shared


async def test_a_change_through_one_node_holds_on_the_other(dsn, clock, monkeypatch):
    store_a = await PostgresStore.open(dsn, table="kv")
    store_b = await PostgresStore.open(dsn, table="kv")
    applied = trio.Event()
    real = shared.apply

    async def spy(state, lines):
        await real(state, lines)
        applied.set()

    monkeypatch.setattr(shared, "apply", spy)
    try:
        async with (cortexdb.open_engine(store=store_a, config=config("node-a"), clock=clock, id_seed=1) as a,
                    cortexdb.open_engine(store=store_b, config=config("node-b"), clock=clock, id_seed=2) as b):  # fmt: skip
            on_a = build_state(a, ServerSettings(backend="postgres", node_id="node-a"))
            on_b = build_state(b, ServerSettings(backend="postgres", node_id="node-b"))
            for state in (on_a, on_b):
                await load_stores(state)
            assert shared.follows(b, "node-b") and not shared.follows(b, "")

            async def through_a(change) -> None:
                nonlocal applied
                applied = trio.Event()
                await change()
                with trio.fail_after(30):  # a hang guard only: the commit is heard in milliseconds
                    await applied.wait()

            async with trio.open_nursery() as nursery:
                await nursery.start(shared.follow, on_b)
                # a token revoked through node a is refused by node b
                await through_a(lambda: on_a.revocations.revoke("jti-1", 4_102_444_800, "lost laptop"))
                assert on_b.revocations.is_revoked("jti-1")
                # a scope record node a writes (auto-provisioned, then a member added) is node b's ACL
                version = on_b.policy.version
                await through_a(lambda: a.experience(envelope("I live in Paris.", scope=ALICE), wait="captured"))
                assert on_b.registry.acl(ALICE) is not None
                assert on_b.policy.version == version  # a new scope is no change to anyone's rights

                def add_bob(record):
                    return attrs.evolve(record, members=[*record.members, {"actor": "user:bob", "role": "reader"}])

                await through_a(lambda: a.edit_scope(ALICE, add_bob))
                assert on_b.registry.acl(ALICE).members.get("user:bob") == "reader"
                assert on_b.policy.version > version  # open streams re-check their reader's rights
                # a policy document node a stores is node b's
                before = on_b.policy.version
                await through_a(lambda: a.tables.policy_docs.put(("tenant", "acme"), {"deny": ["memory.write"]}, sync=True))
                assert on_b.policy.tenants["acme"].deny == ("memory.write",) and on_b.policy.version > before
                nursery.cancel_scope.cancel()
    finally:
        await store_a.close()
        await store_b.close()
