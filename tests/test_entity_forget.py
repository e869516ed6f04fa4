"""Forget and erasure empty the tenant's entity dictionary of the names they took away (issue 12).

Each event's extraction records which entities it mentions (``NM``/``NE``); an erasure, or a
forget with ``cascade: redact_events``, releases the mentions of the events it erased or blanked,
and an entity that no surviving event of the tenant mentions any more — in any scope — goes: its
record, its alias rows and the resolver's caches.  ``derived_only`` keeps the events, so it keeps
their entities; an entity stored before mentions were tracked is kept for good.
"""

from __future__ import annotations

import base64
import json

import cortexdb
from cortexdb import ManualClock
from cortexdb.engine.forget import ops, selector
from cortexdb.engine.spi.extractor import TermRef

from .conftest import envelope
from .test_formats import ALICE as OLD_ALICE
from .test_formats import CONFIG as OLD_CONFIG
from .test_formats import FIXTURE, _opened

ALICE = "org:acme/user:alice"
BOB = "org:acme/user:bob"
NAME = "Zorblat Quenn"  # a person's name: an entity, mentioned without a fact
ACME = "Zorblat Labs"  # an organisation: the object of a fact


def tenant(engine) -> str:
    return engine._ctx.config.tenant_id


async def entity(engine, name: str):
    return await engine._ctx.entities.find(tenant(engine), name)


async def stored_rows(engine, entity_id: str) -> dict:
    """What the tables hold of an entity: its record, alias rows, mention rows."""
    tables, who = engine.tables, tenant(engine)
    record = await tables.entities.get((who, entity_id))
    aliases = [a async for a, e in tables.entity_aliases.scan(who) if e == entity_id]
    mentions = [e async for e in tables.entity_mentions.ids((who, entity_id))]
    return {"record": record is not None, "aliases": aliases, "mentions": mentions}


async def erase(engine, scope: str) -> dict:
    accepted = await engine.erasures.execute({"scope": scope, "audit_note": "DSR"})
    async with engine.subscribe(job_id=accepted["erasure_id"], events="erasure_complete",
                                since_lifecycle_id="") as ended:  # fmt: skip
        await ended.__anext__()
    status = await engine.erasures.status(accepted["erasure_id"])
    assert status["status"] == "completed", status
    return status


async def write(engine, text: str, scope: str = ALICE, caller: str = "user:alice") -> str:
    done = await engine.experience(envelope(text, scope=scope), caller=caller, wait="consolidated")
    return done.event_id


async def test_an_erasure_removes_the_entities_only_its_events_mentioned(engine):
    met = await write(engine, f"I met {NAME} at the harbour.")
    works = await write(engine, f"I work at {ACME}.")
    await write(engine, "I like tea.", scope=BOB, caller="user:bob")
    name, acme, alice = [await entity(engine, n) for n in (NAME, ACME, "user:alice")]
    assert name and acme and alice
    assert (await stored_rows(engine, name.id))["mentions"] == [met]
    assert (await stored_rows(engine, alice.id))["mentions"] == [works]  # the subject of a fact

    await erase(engine, ALICE)
    for gone in (name, acme, alice):
        assert await stored_rows(engine, gone.id) == {"record": False, "aliases": [], "mentions": []}
        assert await entity(engine, gone.id) is None
    for text in (NAME, ACME, "user:alice"):
        assert await entity(engine, text) is None  # neither stored nor cached
    assert await entity(engine, "user:bob") is not None  # bob's event survives
    assert [r async for r in engine.tables.event_entities.items((met,))] == []

    # about_entity names nothing any more: an unknown name matches nothing
    spec = selector.parse({"scope": ALICE, "layers": ["facts"], "selector": {"about_entity": NAME}},
                          max_memory_ids=100)  # fmt: skip
    assert (await selector.selection(engine._ctx, spec, tenant(engine))).entity_id == f"unknown:{NAME}"
    answer = await engine.forget({"scope": ALICE, "layers": ["facts", "beliefs"], "selector": {"about_entity": NAME}})
    assert answer["deleted"] == {"events": 0, "facts": 0, "beliefs": 0, "episodes": 0, "understanding": 0}

    # the name mentioned again is a new entity
    await write(engine, f"I met {NAME} again.")
    again = await entity(engine, NAME)
    assert again is not None and again.id != name.id
    assert (await stored_rows(engine, again.id))["record"] is True


async def test_an_entity_another_scope_still_mentions_is_kept(engine):
    await write(engine, f"I met {NAME} at the harbour.")
    bobs = await write(engine, f"Yesterday {NAME} called me.", scope=BOB, caller="user:bob")
    name = await entity(engine, NAME)
    assert len((await stored_rows(engine, name.id))["mentions"]) == 2

    await erase(engine, ALICE)
    kept = await entity(engine, NAME)
    assert kept is not None and kept.id == name.id
    assert await stored_rows(engine, name.id) == {"record": True, "aliases": ["zorblat quenn"], "mentions": [bobs]}
    assert await entity(engine, "user:alice") is None

    await erase(engine, BOB)  # its last mention goes: so does it
    assert await entity(engine, NAME) is None
    assert await stored_rows(engine, name.id) == {"record": False, "aliases": [], "mentions": []}


async def test_forget_derived_only_keeps_the_entities_redact_events_removes_them(engine):
    await write(engine, f"I met {NAME} at the harbour.")
    await write(engine, f"I work at {ACME}.")
    acme = await entity(engine, ACME)
    request = {"scope": ALICE, "layers": ["facts", "beliefs", "episodes"], "selector": {"about_subject": "user:alice"}}

    answer = await engine.forget({**request, "cascade": "derived_only"})
    assert answer["deleted"]["facts"] > 0 and answer["deleted"]["events"] == 0
    assert (await entity(engine, ACME)).id == acme.id  # its events are still there
    assert await entity(engine, NAME) is not None

    answer = await engine.forget({**request, "layers": ["events", *request["layers"]], "cascade": "redact_events"})
    assert answer["deleted"]["events"] == 2
    assert await entity(engine, ACME) is None and await entity(engine, NAME) is None
    assert (await stored_rows(engine, acme.id))["record"] is False


async def test_an_entity_a_derivation_batch_holds_is_kept(engine):
    """An entity resolved by a batch not yet committed is never deleted under it: the batch is
    about to store a fact naming it and a mention of it."""
    await write(engine, f"I met {NAME} at the harbour.")
    resolver = engine._ctx.entities
    held: set[str] = set()
    name = await resolver.resolve(tenant(engine), TermRef(NAME), held)
    assert held == {name.id}
    await erase(engine, ALICE)
    assert (await entity(engine, NAME)).id == name.id
    resolver.let_go(held)
    assert held == set()
    await write(engine, f"I met {NAME} again.", scope=BOB, caller="user:bob")  # the batch's write
    assert (await entity(engine, NAME)).id == name.id


async def test_a_release_runs_again_without_changing_anything(engine):
    works = await write(engine, f"I work at {ACME}.")
    await write(engine, f"Yesterday {ACME} called me.", scope=BOB, caller="user:bob")
    acme, alice = await entity(engine, ACME), await entity(engine, "user:alice")

    assert await ops.release_entities_of(engine, [works]) == 1  # alice's actor entity; the name stays
    assert await ops.release_entities_of(engine, [works]) == 0
    assert (await entity(engine, ACME)).id == acme.id and await entity(engine, "user:alice") is None
    assert (await stored_rows(engine, alice.id))["record"] is False


async def test_entities_of_a_data_dir_from_before_mentions_are_kept(backend, tmp_path, pg_dsn):
    with open(FIXTURE) as handle:
        fixture = json.load(handle)
    store, _ = await _opened(backend, tmp_path, fixture["pairs"], pg_dsn)
    try:
        async with cortexdb.open_engine(store=store, clock=ManualClock(fixture["now"]), id_seed=8,
                                        config=OLD_CONFIG) as engine:  # fmt: skip
            paris = await entity(engine, "Paris")
            legacy = await stored_rows(engine, paris.id)
            assert legacy["mentions"] == ["legacy"]  # who mentions it is unknown
            assert (await engine.tables.meta.get("entity_mentions"))["legacy_entities"] == 7
            await write(engine, "I live in Rome.", scope=OLD_ALICE)
            rome = await entity(engine, "Rome")
            await erase(engine, OLD_ALICE)
            assert await entity(engine, "Rome") is None and (await stored_rows(engine, rome.id))["record"] is False
            assert (await entity(engine, "Paris")).id == paris.id  # kept for good
    finally:
        await store.close()
    assert base64  # (the fixture's pairs are base64; _opened decodes them)


def test_the_entity_tables_are_compacted_as_one_range():
    """``forget_ranges`` compacts N, NA, NE and NM as one key range: no other table sorts between."""
    from cortexdb.engine.storage import keys

    tables = [v for n, v in vars(keys).items() if n.isupper() and isinstance(v, bytes) and v.isalpha()]
    between = sorted(t for t in tables if keys.prefix(b"N") <= keys.prefix(t) <= keys.prefix(b"NM"))
    assert between == sorted(keys.FORGET_ENTITY_TABLES)
