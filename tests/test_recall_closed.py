"""A recall that keeps only what holds now skips the facts and beliefs whose validity has closed
without reading them (actors/closed.py; decisions.md, "Recall skips what has closed without
reading it"); one with ``as_of`` or a window still finds them; the set is the same after a
release and reopen, and after a rebuild."""

from cortexdb.engine.actors import candidates
from cortexdb.engine.actors.closed import closing
from cortexdb.engine.forget import ops

from .conftest import envelope

ALICE = "org:acme/user:alice"


def _state(engine):
    return engine._supervisor.actor(ALICE).lane.state


async def _moves(engine, clock):
    """Paris, then Berlin, then (an hour later) Lisbon: two closed ``lives_in`` facts."""
    for text, when in (("I live in Paris.", "2026-03-01T10:00:00Z"), ("I moved to Berlin.", "2026-04-15T10:00:00Z")):
        await engine.experience(envelope(text, observed_at=when), wait="consolidated")
        clock.advance(60)
    before = clock.now()
    clock.advance(3600)
    await engine.experience(envelope("I moved to Lisbon.", observed_at="2026-05-10T10:00:00Z"), wait="consolidated")
    return before


async def _lives_in(engine) -> dict[str, dict]:
    page = await engine.facts(ALICE, predicate="lives_in", include_superseded=True)
    return {f["object"]["name"]: f for f in page["items"]}


async def _closed_in_tables(engine, clock) -> set[str]:
    """The facts and beliefs whose stored head has closed by now, read from the tables."""
    tables, now, found = _state(engine).tables, clock.now(), set()
    for table in (tables.facts, tables.beliefs):
        async for record_id, record in table.scan():
            if closing(record) is not None and closing(record) <= now:
                found.add(record_id)
    return found


def _spy(monkeypatch) -> list[str]:
    read: list[str] = []
    original = candidates._load

    async def load(tables, layer, record_id, *args, **kwargs):
        read.append(record_id)
        return await original(tables, layer, record_id, *args, **kwargs)

    monkeypatch.setattr(candidates, "_load", load)
    return read


def _names(pack) -> list[str]:
    return [f["object"]["name"] for f in pack["layers"]["facts"] if f["predicate"] == "lives_in"]


async def test_a_closed_fact_is_not_read_by_a_plain_recall_and_found_as_of(engine, clock, monkeypatch):
    before = await _moves(engine, clock)
    facts = await _lives_in(engine)
    assert set(facts) == {"Paris", "Berlin", "Lisbon"}
    closed = _state(engine).closed
    assert {facts["Paris"]["id"], facts["Berlin"]["id"]} <= closed.ids and facts["Lisbon"]["id"] not in closed.ids
    read = _spy(monkeypatch)
    request = {"scope": ALICE, "view": "local", "query": "where does Alice live Paris Berlin", "include": ["facts"]}
    now = await engine.recall(request)
    assert _names(now) == ["Lisbon"]
    assert read and not set(read) & {facts["Paris"]["id"], facts["Berlin"]["id"]}  # never read
    assert facts["Lisbon"]["id"] in read
    read.clear()
    then = await engine.recall({**request, "temporal": {"as_of": before.isoformat()}})
    assert _names(then) == ["Berlin"] and facts["Berlin"]["id"] in read
    read.clear()
    march = await engine.recall({**request, "temporal": {"natural": "in March 2026"}})
    assert "Paris" in _names(march) and facts["Paris"]["id"] in read


async def test_a_clock_before_the_closings_skips_nothing(engine, clock, monkeypatch):
    """The set only serves a moment past every closing it holds: a clock set back reads them all,
    as it did before the set existed."""
    await _moves(engine, clock)
    facts = await _lives_in(engine)
    closed = _state(engine).closed
    assert closed.since is not None
    read = _spy(monkeypatch)
    clock.advance(-7200)  # before Lisbon was learnt: Berlin was current then
    pack = await engine.recall({"scope": ALICE, "view": "local", "query": "where does Alice live Berlin",
                                "include": ["facts"]})  # fmt: skip
    assert facts["Berlin"]["id"] in read
    assert "Lisbon" not in _names(pack)


async def test_the_set_is_rebuilt_on_reopen_and_rebuild(engine, clock):
    await _moves(engine, clock)
    first = set(_state(engine).closed.ids)
    kinds = {record_id.split("_", 1)[0] for record_id in first}
    assert len(first) >= 2 and kinds <= {"fact", "belief"} and first == await _closed_in_tables(engine, clock)
    assert await engine.release(ALICE, drain=True)  # once its vector builds are done
    await engine.ping(ALICE)  # reopened: restored from the tables
    assert _state(engine).closed.ids == first
    await engine.rebuild(ALICE)
    await engine.flush(ALICE)
    rebuilt = set(_state(engine).closed.ids)
    assert rebuilt and rebuilt == await _closed_in_tables(engine, clock)  # what the replay closed
    assert await engine.release(ALICE, drain=True)  # once its vector builds are done
    await engine.ping(ALICE)
    assert _state(engine).closed.ids == rebuilt


async def test_a_deleted_fact_leaves_the_set(engine, clock):
    await _moves(engine, clock)
    paris = (await _lives_in(engine))["Paris"]["id"]
    assert paris in _state(engine).closed.ids
    counts = await ops.delete_records(engine, ALICE, [paris])
    assert counts["facts"] == 1
    assert paris not in _state(engine).closed.ids
