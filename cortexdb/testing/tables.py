"""The storage-layer conformance suite: ``Table``, ``Partition`` and ``NodeTables`` over a
KVStore, written as pytest-trio tests over a fixture (like ``kv_conformance``).

Import every name from this module into a test module and provide the same ``kv_factory``
fixture the KV suite uses.  It checks what the engine relies on: the documented key format (an
old data dir keeps opening), the tables' isolation from each other, scans, pages and their
cursors, bulk deletes, and the codecs' round trips.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from ..engine.model import EventState, Scope
from ..engine.stages import Stage
from ..engine.storage import CHUNK_OPS, NodeTables, Table
from ..engine.storage.table import JSON, MARK, TEXT
from ..errors import InvalidCursor

SCOPE = "org:acme/user:alice"
T0 = dt.datetime(2026, 5, 13, 15, 42, 9, tzinfo=dt.UTC)


@pytest.fixture
async def node_tables(kv_factory):
    handle = await kv_factory.open()
    try:
        yield NodeTables(handle)
    finally:
        await handle.close()


async def collect(iterator):
    return [item async for item in iterator]


def _table(tables: NodeTables, codec=JSON, name: bytes = b"F") -> Table:
    return Table(tables.store, name + b"\x00" + SCOPE.encode() + b"\x00", codec)


async def test_keys_follow_the_documented_format(node_tables):
    """``<table> NUL <parts joined by NUL>`` (storage/keys.py): the layout of existing data dirs."""
    tables = node_tables
    part = tables.partition(SCOPE)
    expected = {
        part.events.key("evt_1"): b"E\x00org:acme/user:alice\x00evt_1",
        part.event_states.key("evt_1"): b"X\x00evt_1",
        part.pending.key("evt_1"): b"P\x00org:acme/user:alice\x00evt_1",
        part.facts.key("fact_1"): b"F\x00org:acme/user:alice\x00fact_1",
        part.fact_index.key(("ent_1", "lives_in", "fact_1")): b"FI\x00org:acme/user:alice\x00ent_1\x00lives_in\x00fact_1",
        part.fact_supports.key(("fact_1", "evt_1")): b"FS\x00org:acme/user:alice\x00fact_1\x00evt_1",
        part.beliefs.key("belief_1"): b"B\x00org:acme/user:alice\x00belief_1",
        part.belief_claims.key("c"): b"BI\x00org:acme/user:alice\x00c",
        part.belief_deletions.key("belief_1"): b"BD\x00org:acme/user:alice\x00belief_1",
        part.episodes.key("ep_1"): b"EP\x00org:acme/user:alice\x00ep_1",
        part.open_episodes.key("main"): b"EO\x00org:acme/user:alice\x00main",
        part.foreign_work.key("evt_1"): b"FW\x00org:acme/user:alice\x00evt_1",
        part.vectors.key("fact_1"): b"V\x00org:acme/user:alice\x00fact_1",
        part.concepts.key("c_1"): b"C\x00org:acme/user:alice\x00c_1",
        tables.entities.key(("default", "ent_1")): b"N\x00default\x00ent_1",
        tables.entity_aliases.key(("default", "alice")): b"NA\x00default\x00alice",
        tables.idempotency.key(("t", "user:a", "/v1/experience", "k")): b"I\x00t\x00user:a\x00/v1/experience\x00k",
        tables.temporal_phrases.key(("t", "q3")): b"TP\x00t\x00q3",
        tables.lifecycle.key("lce_1"): b"L\x00lce_1",
        tables.scopes.key(SCOPE): b"S\x00org:acme/user:alice",
        tables.batches.key("batch_1"): b"BT\x00batch_1",
        tables.meta.key("embedder"): b"M\x00embedder",
        tables.policy_docs.key(("scope", SCOPE)): b"PO\x00scope\x00org:acme/user:alice",
        tables.revoked.key("jti"): b"RV\x00jti",
        tables.audit_rows.key("audit_1"): b"AU\x00audit_1",
        tables.peppers.rows.key(("t", "00000007")): b"PP\x00t\x0000000007",
    }  # fmt: skip
    for got, want in expected.items():
        assert got == want
    await tables.write([tables.wal.put_op(258, SCOPE, "evt_1"), tables.peppers.put_op("t", 7, {})])
    assert (
        await tables.store.get(b"W\x00" + (258).to_bytes(8, "big"))
        == b"org:acme/user:alice\x00evt_1"
    )
    assert await tables.store.get(b"PP\x00t\x0000000007") == b"{}"


async def test_get_put_delete_and_exists(node_tables):
    table = _table(node_tables)
    assert await table.get("a") is None and not await table.exists("a")
    await table.put("a", {"x": 1})
    assert await table.get("a") == {"x": 1} and await table.exists("a")
    await node_tables.write([table.delete_op("a"), table.put_op("b", [1, 2])])
    assert await table.get("a") is None
    assert await table.get("b") == [1, 2]
    await table.delete("b", sync=True)
    assert await collect(table.scan()) == []


async def test_get_many_reads_the_rows_named_and_only_them(node_tables):
    table = _table(node_tables, TEXT)
    names = [f"n{i:03d}" for i in range(200)]
    await node_tables.write([table.put_op(name, name.upper()) for name in names])
    assert await table.get_many([]) == {}
    assert await table.get_many(["n001", "n003", "n001", "missing"]) == {"n001": "N001", "n003": "N003"}
    # two names with 198 others between them: the span scan stops early, the rest is looked up
    assert await table.get_many(["n000", "n199", "zzz"]) == {"n000": "N000", "n199": "N199"}
    assert await table.get_many(names) == {name: name.upper() for name in names}


async def test_tables_never_see_each_others_rows(node_tables):
    """A table's prefix matches neither a table whose name extends its own (F / FI / FS), nor a
    scope whose path extends this scope's, nor a tenant whose id extends this tenant's."""
    tables = node_tables
    alice, below = tables.partition(SCOPE), tables.partition(SCOPE + "/agent:x")
    longer = tables.partition(SCOPE + "x")
    ops = []
    for part in (alice, below, longer):
        ops += [part.facts.put_op("fact_1", _fact(part.scope)), part.pending.put_op("evt_1", True),
                part.fact_index.put_op(("ent_1", "p", "fact_1"), True),
                part.fact_supports.put_op(("fact_1", "evt_1"), True),
                part.beliefs.put_op("belief_1", _belief(part.scope)),
                part.belief_claims.put_op("claim", "belief_1"),
                part.belief_deletions.put_op("belief_0", {"reason": "x"})]  # fmt: skip
    ops += [tables.entities.put_op(("t", "ent_1"), _entity("t")),
            tables.entities.put_op(("tt", "ent_2"), _entity("tt"))]  # fmt: skip
    await tables.write(ops)
    for part in (alice, below, longer):
        assert await collect(part.facts.ids()) == ["fact_1"]
        assert await collect(part.fact_index.ids()) == ["fact_1"]
        assert await collect(part.fact_supports.ids()) == ["evt_1"]
        assert await collect(part.beliefs.ids()) == ["belief_1"]
        assert await collect(part.belief_claims.ids()) == ["claim"]
        assert await collect(part.belief_deletions.ids()) == ["belief_0"]
        assert await part.pending.count() == 1
    assert await collect(tables.entities.ids("t")) == ["ent_1"]


async def test_scan_bounds(node_tables):
    table = _table(node_tables, TEXT)
    await node_tables.write(
        [table.put_op(name, name.upper()) for name in ("a", "b", "c", "d", "e")]
    )
    assert await collect(table.scan()) == [(n, n.upper()) for n in "abcde"]
    assert await collect(table.ids(after="b")) == ["c", "d", "e"]
    assert await collect(table.ids(upto="c")) == ["a", "b", "c"]
    assert await collect(table.ids(after="a", upto="d")) == ["b", "c", "d"]
    assert await collect(table.ids(reverse=True, limit=2)) == ["e", "d"]
    assert await collect(table.ids(after="e")) == []
    assert await table.count() == 5


async def test_scan_under_leading_parts_and_a_text_prefix(node_tables):
    tables = node_tables
    index = tables.partition(SCOPE).fact_index
    rows = [("ent_1", "lives_in", "fact_1"), ("ent_1", "lives_in", "fact_2"),
            ("ent_1", "likes", "fact_3"), ("ent_10", "lives_in", "fact_4")]  # fmt: skip
    await tables.write([index.put_op(row, True) for row in rows])
    assert await collect(index.ids(("ent_1", "lives_in"))) == ["fact_1", "fact_2"]
    assert await collect(index.ids("ent_1")) == ["fact_3", "fact_1", "fact_2"]
    assert [parts async for parts, _ in index.items()] == sorted(rows)
    scopes = tables.scopes
    for path in ("org:acme", "org:acme/team:x", "org:acme/user:alice", "org:beta"):
        await scopes.put(
            path, Scope(path=path, tenant_id="t", registered_at=T0, created_by="user:a")
        )
    assert await collect(scopes.ids(starting_with="org:acme/")) == [
        "org:acme/team:x",
        "org:acme/user:alice",
    ]
    assert await collect(scopes.ids(starting_with="org:acme/", after="org:acme/team:x")) == [
        "org:acme/user:alice"
    ]
    records = [record async for _, record in scopes.scan(starting_with="org:b")]
    assert [r.path for r in records] == ["org:beta"] and records[0].registered_at == T0


async def test_pages_walk_every_row_once_and_cursors_are_stable(node_tables):
    table = _table(node_tables)
    await node_tables.write([table.put_op(f"r{i:02d}", {"n": i}) for i in range(10)])
    seen, cursor, pages = [], None, 0
    while True:
        page = await table.page(cursor, limit=2, keep=lambda item: item["n"] % 2 == 0)
        pages += 1
        seen += [item["n"] for item in page["items"]]
        assert page["has_more"] is (page["next_cursor"] is not None)
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
        if pages == 1:  # rows added behind the cursor are not seen, rows ahead of it are
            await node_tables.write(
                [table.put_op("r00a", {"n": 100}), table.put_op("r99", {"n": 102})]
            )
    assert seen == [0, 2, 4, 6, 8, 102]
    converted = await table.page(None, limit=2, convert=_named)
    assert converted["items"] == ["r00=0", "r00a=100"]


async def _named(name, value):
    return f"{name}={value['n']}"


async def test_a_cursor_of_another_listing_or_none_of_ours_is_refused(node_tables):
    tables = node_tables
    facts, beliefs = tables.partition(SCOPE).facts, tables.partition(SCOPE).beliefs
    await tables.write([facts.put_op(f"fact_{i}", _fact(SCOPE)) for i in range(3)])
    cursor = (await facts.page(None, limit=1))["next_cursor"]
    assert (await facts.page(cursor, limit=5))["items"][0].id == "fact_1"
    with pytest.raises(InvalidCursor) as info:
        await beliefs.page(cursor, limit=5)
    assert info.value.error_code == "INVALID_CURSOR" and info.value.http_status == 400
    for garbage in ("not-a-cursor", "eyJ4IjoxfQ", "e30", "%%%", "W1tbW1tbXV1dXV1d"):
        with pytest.raises(InvalidCursor):
            await facts.page(garbage, limit=5)


async def test_delete_all_writes_in_chunks(node_tables):
    tables = node_tables
    table, other = _table(tables, MARK), _table(tables, MARK, b"FI")
    total = CHUNK_OPS * 2 + 7
    await tables.write(
        [table.put_op(f"k{i:06d}", True) for i in range(total)] + [other.put_op("x", True)]
    )
    writes = []
    original = tables.store.write

    async def counting(ops, *, sync=False):
        writes.append(len(ops))
        await original(ops, sync=sync)

    table.store = _Spy(tables.store, counting)
    assert await table.delete_all() == total
    assert writes == [CHUNK_OPS, CHUNK_OPS, 7]
    assert await table.count() == 0 and await collect(other.ids()) == ["x"]


class _Spy:
    def __init__(self, store, write):
        self._store, self.write = store, write

    def __getattr__(self, name):
        return getattr(self._store, name)


async def test_codecs_round_trip(node_tables):
    tables = node_tables
    part = tables.partition(SCOPE)
    state = EventState(
        scope=SCOPE, done=[Stage.CAPTURED.value], lce=["lce_1"], batch_id=None, passages=[[0, 5]]
    )
    vector = np.arange(4, dtype=np.float32) / 3
    await tables.write([part.event_states.put_op("evt_1", state), part.vectors.put_op("fact_1", vector),
                        part.belief_claims.put_op("claim", "belief_1"), part.pending.put_op("evt_1", True)])  # fmt: skip
    assert await part.event_states.get("evt_1") == state
    raw = await part.event_states.raw.get("evt_1")
    assert raw == b'{"scope":"org:acme/user:alice","done":["captured"],"lce":["lce_1"],"passages":[[0,5]]}'
    old_format = b'{"scope":"org:acme/user:alice","done":["captured"],"lce":["lce_1"],"derives":[],' \
                 b'"errors":[],"cancelled":false,"batch_id":null,"passages":[[0,5]]}'  # fmt: skip
    await tables.store.write([_put(part.event_states.key("evt_0"), old_format)])  # as earlier builds wrote it
    assert await part.event_states.get("evt_0") == state
    assert (await part.event_states.json.get("evt_1"))["passages"] == [[0, 5]]
    assert np.array_equal(await part.vectors.get("fact_1"), vector)
    assert await part.vectors.raw.get("fact_1") == vector.tobytes()
    assert await part.belief_claims.get("claim") == "belief_1"
    assert await part.pending.get("evt_1") is True and await part.pending.raw.get("evt_1") == b""
    half = (np.arange(5) / 7).astype(np.float16)  # a float16 row: a marker byte, then half the bytes
    await tables.write([part.vectors.put_op("fact_2", half)])
    assert await part.vectors.raw.get("fact_2") == b"\x02" + half.tobytes()
    read = await part.vectors.get("fact_2")
    assert read.dtype == np.float32 and np.array_equal(read, half.astype(np.float32))
    assert np.array_equal(await part.vectors.get("fact_1"), vector)  # a float32 row reads as before
    await tables.store.write([_put(part.vectors.key("odd"), b"\x00\x01\x02")])
    assert await part.vectors.get("odd") is None  # not a whole number of float32s, nor float16s


def _put(key, value):
    from ..engine.spi.kv import Put

    return Put(key, value)


async def test_node_finds_the_scopes_with_pending_work(node_tables):
    tables = node_tables
    ops = []
    for scope, event in (
        ("org:a", "evt_1"),
        ("org:a", "evt_2"),
        ("org:a/b", "evt_3"),
        ("org:c", "evt_4"),
    ):
        ops.append(tables.partition(scope).pending.put_op(event, True))
    ops.append(tables.partition("org:d").foreign_work.put_op("evt_5", {"source_scope": "org:a"}))
    ops.append(tables.partition("org:a").foreign_work.put_op("evt_6", {"source_scope": "org:c"}))
    await tables.write(ops)
    assert await tables.scopes_with_pending_work() == ["org:a", "org:a/b", "org:c", "org:d"]


async def test_wal_and_peppers_keep_numeric_order(node_tables):
    tables = node_tables
    assert await tables.wal.last_offset() is None
    await tables.write(
        [tables.wal.put_op(offset, SCOPE, f"evt_{offset}") for offset in (1, 2, 255, 256, 70000)]
    )
    assert await tables.wal.last_offset() == 70000
    assert [row async for row in tables.wal.scan()][2:4] == [
        (255, SCOPE, "evt_255"),
        (256, SCOPE, "evt_256"),
    ]
    await tables.write([tables.peppers.put_op("t", v, {"v": v}) for v in (10, 2, 1)])
    assert [version async for version, _ in tables.peppers.scan("t")] == [1, 2, 10]
    await tables.write([tables.peppers.delete_op("t", 2)])
    assert [record async for _, record in tables.peppers.scan("t")] == [{"v": 1}, {"v": 10}]


async def test_rebuild_empties_exactly_the_derived_tables(node_tables):
    tables = node_tables
    part = tables.partition(SCOPE)
    derived = part.derived()
    await tables.write([table.put_op("x", True) for table in derived]
                       + [part.events.raw.put_op("evt_1", b"{}"), part.pending.put_op("evt_1", True),
                          part.event_states.raw.put_op("evt_1", b"{}")])  # fmt: skip
    for table in derived:
        await table.delete_all()
    for table in derived:
        assert await table.count() == 0
    assert await part.events.count() == 1 and await part.pending.count() == 1
    assert await part.event_states.count() == 1


def _fact(scope):
    from ..engine.model import Fact, TypedRef, TypedValue

    return Fact(id="fact_1", scope=scope, subject=TypedRef(id="ent_1", name="Alice"), predicate="p",
                object=TypedValue(type="literal", datatype="string", value="v"), supports=["evt_1"],
                valid_from=T0, recorded_from=T0, confidence=0.9, extractor="test", source="human")  # fmt: skip


def _belief(scope):
    from ..engine.model import Belief, ConfidenceInterval

    return Belief(id="belief_1", scope=scope, claim={}, stance="supported", confidence=0.8,
                  confidence_interval=ConfidenceInterval(lower=0.5, upper=0.9, method="m", level=0.9),
                  valid_from=T0, recorded_from=T0, last_revised_at=T0, why_url="/w")  # fmt: skip


def _entity(tenant):
    from ..engine.model import Entity

    return Entity(id="ent_1", tenant_id=tenant, name="Alice", aliases=["alice"], created_at=T0)


__all__ = ["node_tables"] + [name for name in dir() if name.startswith("test_")]
