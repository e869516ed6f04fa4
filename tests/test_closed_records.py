"""The closed records' compact set (actors/closed.py): engine ids held as 17-byte keys in a sorted
array, with pending additions and removals merged in batches, answer exactly as a set of strings
would, whatever the order of notes, removals and merges; other ids are kept as they are."""

import datetime as dt
import random

import attrs

from cortexdb.engine.actors import closed as closed_module
from cortexdb.engine.actors.closed import ClosedRecords, id_of, key_of
from cortexdb.engine.clock import ManualClock
from cortexdb.engine.ids import IdGenerator

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


@attrs.define
class Head:
    id: str
    valid_to: dt.datetime | None
    recorded_from: dt.datetime = NOW - dt.timedelta(days=1)
    recorded_to: dt.datetime | None = None


def _ids(n: int) -> list[str]:
    ids = IdGenerator(ManualClock(NOW), seed=7)
    return [ids.new("fact" if i % 3 else "belief") for i in range(n)]


def test_a_key_is_one_engine_id_and_other_forms_have_none():
    fact = _ids(1)[0]
    key = key_of(fact)
    assert key is not None and len(key) == 17 and not key.endswith(b"\x00") and id_of(key) == fact
    for other in ("evt_" + fact[5:], fact.upper(), fact + "x", "fact_" + fact[5:].replace("-", ""), "fact_x",
                  "imported-fact-1", fact.replace("-", " ", 1)):  # fmt: skip
        assert key_of(other) is None, other


def test_the_compact_set_answers_as_a_set_of_strings(monkeypatch):
    monkeypatch.setattr(closed_module, "MERGE_AT", 7)  # many merges
    rng = random.Random(3)
    pool = _ids(300) + [f"imported-{i}" for i in range(20)]
    closed, reference = ClosedRecords(), set()
    for step in range(3000):
        record_id = rng.choice(pool)
        if rng.random() < 0.6:
            closed.note(Head(record_id, valid_to=NOW - dt.timedelta(hours=1)), NOW)
            reference.add(record_id)
        elif rng.random() < 0.5:
            closed.note(Head(record_id, valid_to=None), NOW)  # written again open
            reference.discard(record_id)
        else:
            closed.discard(record_id)  # deleted
            reference.discard(record_id)
        probe = rng.choice(pool)
        assert (probe in closed) == (probe in reference), step
        assert len(closed) == len(reference), step
    assert closed.ids == reference
    assert all(record_id in closed for record_id in reference)
    assert not any(record_id in closed for record_id in set(pool) - reference)


def test_a_closing_in_the_future_or_a_deleted_version_is_not_held():
    fact, belief = _ids(2)
    closed = ClosedRecords()
    closed.note(Head(fact, valid_to=NOW + dt.timedelta(hours=1)), NOW)
    closed.note(Head(belief, valid_to=NOW - dt.timedelta(hours=1), recorded_to=NOW), NOW)
    assert len(closed) == 0 and closed.since is None
    closed.note(Head(fact, valid_to=NOW - dt.timedelta(hours=2)), NOW)
    assert fact in closed and closed.since == NOW - dt.timedelta(hours=2)


def test_merged_ids_take_17_bytes_each(monkeypatch):
    monkeypatch.setattr(closed_module, "MERGE_AT", 100)
    closed = ClosedRecords()
    for record_id in _ids(1000):
        closed.note(Head(record_id, valid_to=NOW - dt.timedelta(hours=1)), NOW)
    assert len(closed) == 1000 and closed.nbytes == 17 * 1000


def test_beyond_its_bound_the_oldest_quarter_is_forgotten(monkeypatch):
    """``closed_records_max``: the set only spares reads, so beyond the bound the oldest ids (the
    lowest UUIDs) go; what stays is still exactly what was noted closed, and the newest stay."""
    monkeypatch.setattr(closed_module, "MERGE_AT", 10)
    ids = _ids(1000)
    closed = ClosedRecords(most=100)
    for record_id in ids:
        closed.note(Head(record_id, valid_to=NOW - dt.timedelta(hours=1)), NOW)
    assert 75 <= len(closed) <= 100 + 10
    held = closed.ids
    assert held <= set(ids) and set(ids[-75:]) <= held and ids[0] not in closed
    for record_id in (f"imported-{i}" for i in range(200)):  # ids of another form count too
        closed.note(Head(record_id, valid_to=NOW - dt.timedelta(hours=1)), NOW)
    assert len(closed) <= 100 + 10 and ids[-1] in closed


async def test_the_engine_bounds_its_closed_records_by_the_setting(clock):
    import cortexdb
    from cortexdb import EngineConfig

    from .conftest import envelope

    config = EngineConfig(closed_records_max=5000, default_caller="user:alice", episode_idle_check=3600.0)
    async with cortexdb.open_engine("memory", config=config, id_seed=3, clock=clock) as engine:
        await engine.experience(envelope("I live in Paris."), wait="consolidated")
        assert engine._supervisor.actor("org:acme/user:alice").lane.state.closed.most == 5000


def test_ids_of_another_form_merge_once_a_batch_not_at_every_one_past_the_batch(monkeypatch):
    """Ids with no key count towards a merge like the others: one merge for each ``MERGE_AT``
    of them added, not one at every id once ``MERGE_AT`` of them are held."""
    monkeypatch.setattr(closed_module, "MERGE_AT", 10)
    closed = ClosedRecords(most=10_000)
    merges = []
    merge = ClosedRecords._merge
    monkeypatch.setattr(ClosedRecords, "_merge", lambda self: (merges.append(1), merge(self))[1])
    for i in range(35):
        closed.note(Head(f"imported-{i}", valid_to=NOW - dt.timedelta(hours=1)), NOW)
    assert len(merges) == 3 and len(closed) == 35
