"""Stored formats stay readable: a data dir written before the storage layer (commit c512ece)
opens, reads back the same answers, and its records re-encode to the same bytes.

``tests/data/formats_v0.json`` holds every key and value of a store the scenario below left, and
the answers the engine gave then.  It was made by running this module as a script with that
version of the code first on ``PYTHONPATH``::

    PYTHONPATH=<checkout of c512ece> python tests/test_formats.py tests/data/formats_v0.json

The scenario uses the public ``Engine`` API only, so the same module runs on both versions.

``pairs_added_since_v0`` holds the rows the same scenario writes now beyond those of v0, added
deliberately with the table that holds them: which events mention which entities (``NM``,
``NE``) and the meta row saying that this data dir tracks them (issue 12).  An old data dir
opens without them: its entities are kept for good (``EntityResolver.start``).  Issue 14 added
the bulk write's ``batch_complete`` lifecycle record: it draws the next lifecycle id, so the
``compressed`` record written after it moves to the id after that (a new row in
``pairs_added_since_v0``), and the key it had now holds ``batch_complete``
(``pairs_replaced_since_v0``).  Issue 15 (docs/time.md) versions derived records: what changes
what a fact, belief or episode says closes its version, kept in ``FV``/``BV``/``EV`` (new rows),
and the record's row becomes the next version (``version`` 2, ``recorded_from`` the change) —
here Paris superseded by Berlin, the Paris belief revised, the first episode grown; each belief
notes its scope (``BS``, new rows).  Those three records' rows are in ``pairs_replaced_since_v0``.
Issue 16 indexes facts whose object is an entity by that entity (``FO``, new rows: the
relationship walk's incoming edges; an old data dir finds them after a rebuild).
Issue 16 (docs/intake.md) reports noise: an event whose text yields nothing now says so in its
intake report (``rejected``, ``not_assertion_worthy``), so its state and its ``extracted`` and
``consolidated`` lifecycle rows (whose intake counts include it) are in ``pairs_replaced_since_v0`` too.
Issue 17 pools a turn's token vectors with the previous turn's instead of embedding the two texts
together (``turn_context="pooled"``): three turns' stored vectors (``V`` rows) hold other values,
in ``pairs_replaced_since_v0``; the format is unchanged.

The answers are v0's except where the meaning of time changed (``answers_replaced_since_v0``,
[path, value] pairs): a fact superseded in place by v0 (``recorded_to`` on its one row) reads
now as its two versions, and a listing of every record shows its current one (recorded from the
supersession, ``recorded_to`` null, ``version`` 2).  ``answers`` asks ``valid_during=".."`` where
v0's asked ``include_superseded=True``: the same records in v0 (a valid-time window listed the
superseded ones there too); ``include_superseded`` now lists closed versions.  Issue 15 also made reads compute a belief's ``calibration`` (null in v0's answers) from the
belief's stored fields; the records are unchanged and ``_calibrated`` adds it to v0's answers.
And a cancel of an event whose episode window is still open lists ``compressed`` among the
stages it cancelled (as ``GET /v1/lifecycle/memory-event`` does): the cancelled event's state is
replaced.  Issue 15's understanding layer adds the concepts of the scenario's subjects: their
rows (``C``), the subject table (``CS``) and their vectors (``V``) are in
``pairs_added_since_v0``; a concept's id is its entity's uuid, so synthesis draws no id and every
other id stays v0's.  A concept's vector is embedded from its summary without the record ids it
cites (issue 17, docs/decisions.md "Derived vectors in a backlog"): the two concepts' ``V`` rows in
``pairs_added_since_v0`` hold those vectors.  Issue 17 (session 29, docs/decisions.md "Fewer
bytes written per event") stores event states without their defaults (``X``), lifecycle rows
without a null batch or job id and the payload's repeated event id (``L``), and vectors in
float16 (``V``): those rows are compared by what they read back as (a state without its measured
durations; a vector as v0's cast to float16), and each is no longer than v0's; v0's rows read
back the same (``test_stored_records_re_encode_to_the_same_bytes``, and the answers).  Every
other row is v0's, byte for byte.
"""

from __future__ import annotations

import base64
import json
import os
import sys

import numpy as np
import pytest
import trio

import cortexdb
from cortexdb import EngineConfig, ManualClock

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "formats_v0.json")
START = "2026-05-13T15:42:09Z"
ALICE, TEAM = "org:acme/user:alice", "org:acme/team:x"
# turn_context_weight 1.0: the vectors the fixture was recorded with (session 29 made the default
# 0.5, a vector setting: the format is unchanged)
CONFIG = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", passage_max_chars=200,
                      turn_context_weight=1.0)
LONG = " ".join(
    f"Paragraph {i} talks about the harbour, the ferries and the weather in May." for i in range(12)
)


def _envelope(text: str, at: str, scope: str = ALICE, **extra) -> dict:
    return {"scope": scope, "modality": "conversation", "context": {"observed_at": at},
            "content": {"kind": "message", "role": "user", "text": text}, **extra}  # fmt: skip


async def scenario(engine, clock) -> list[str]:
    """Writes that leave every kind of stored record: events with facts, a supersession, beliefs,
    a consolidation into another scope, passages of a long text, a cancel, a bulk write with
    idempotency keys, a custom temporal phrase and sealed episodes.  Returns the event ids."""
    ids = []
    for text, minute, extra in (
        ("I live in Paris.", "00", {}),
        ("I like green tea.", "01", {"directives": {"consolidate_into": TEAM}}),
        ("I live in Berlin.", "02", {"idempotency_key": "move-1"}),
        (LONG, "03", {}),
        ("I work at Acme.", "04", {}),
    ):
        result = await engine.experience(_envelope(text, f"2026-05-13T15:{minute}:00Z", **extra),
                                         wait="consolidated")  # fmt: skip
        ids.append(result.event_id)
        await engine.flush()  # the other scope's consolidation too: ids are drawn in one order
        clock.advance(30)
    await engine.cancel(ids[-1])
    items = [{"modality": "conversation", "context": {"observed_at": "2026-05-13T16:00:00Z"},
              "content": {"kind": "message", "role": "user", "text": text}, "idempotency_key": key}
             for text, key in (("Bob likes coffee.", "b0"), ("Bob lives in Oslo.", "b1"),
                               ("Bob likes coffee.", "b0"))]  # fmt: skip
    bulk = {"scope": TEAM, "items": items}
    await engine.experience_bulk(bulk)
    await engine.register_temporal_phrase("launch week", "launch week",
                                          {"valid_during": ["2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z"]})  # fmt: skip
    await engine.flush(seal=True)
    clock.advance(3600)
    await engine.flush(seal=True)
    return ids


async def answers(engine) -> dict:
    """What the engine answers about the stored data (no wall-clock field in any of it)."""
    out: dict = {"lifecycle": await engine.lifecycle(limit=1000), "scopes": {}}
    for scope in (ALICE, TEAM):
        events = (await engine.events(scope, include_excluded=True, limit=100))["items"]
        # every record as known now, ended ones too: what ``include_superseded=True`` listed in v0
        # (since issue 15 it adds closed *versions*, and a valid-time window lists the rest)
        beliefs = (await engine.beliefs(scope, valid_during="..", limit=100))["items"]
        facts = (await engine.facts(scope, valid_during="..", limit=100))["items"]
        out["scopes"][scope] = {
            "scope": await engine.scope(scope),
            "events": events,
            "facts": facts,
            "facts_page": await engine.facts(scope, valid_during="..", limit=2),
            "beliefs": beliefs,
            "episodes": (await engine.episodes(scope, limit=100))["items"],
            "memory_events": [await engine.memory_event(e["id"]) for e in events],
            "why": [await engine.beliefs_why(scope, b["id"]) for b in beliefs],
            "supports": [await engine.fact_supports(scope, f["id"]) for f in facts],
            "layer_counts": await engine.layer_counts(scope),
        }
    out["phrases"] = await engine.temporal_phrases()
    out["replayed"] = await engine.experience_by_idempotency_key("move-1")
    return out


def _normal(data):
    return json.loads(json.dumps(data, default=str))


def _calibrated(answers: dict) -> dict:
    """v0's answers with each belief's ``calibration`` as reads now compute it from the belief's
    own stored fields (issue 15: it was null; the stored records are unchanged)."""
    from cortexdb.engine.derive.beliefs import calibrated

    for scope in answers["scopes"].values():
        for belief in scope["beliefs"] + [why["belief"] for why in scope["why"]]:
            calibrated(belief)
    return answers


async def _record(path: str) -> None:
    from cortexdb.backends.memory import MemoryStore

    store, clock = MemoryStore(), ManualClock(START)
    async with cortexdb.open_engine(store=store, clock=clock, id_seed=7, config=CONFIG) as engine:
        await scenario(engine, clock)
        recorded = await answers(engine)
        now = clock.now().isoformat()
    pairs = [
        [base64.b64encode(k).decode(), base64.b64encode(v).decode()] async for k, v in store.scan()
    ]
    with open(path, "w") as handle:
        json.dump({"now": now, "pairs": pairs, "answers": _normal(recorded)}, handle, indent=0,
                  sort_keys=True)  # fmt: skip


def _replaced(answers, replacements):
    """v0's answers with the values at the paths given replaced (or added)."""
    for path, value in replacements:
        node = answers
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return answers


@pytest.fixture
def fixture():
    with open(FIXTURE) as handle:
        return json.load(handle)


async def _opened(backend, tmp_path, pairs, pg_dsn=None):
    from cortexdb.backends import open_store

    path = {"leveldb": str(tmp_path / "old"), "postgres": pg_dsn}.get(backend)
    store = await open_store(backend, path)
    decoded = [(base64.b64decode(k), base64.b64decode(v)) for k, v in pairs]
    from cortexdb.engine.spi.kv import Put

    await store.write([Put(k, v) for k, v in decoded], sync=True)
    return store, decoded


async def test_an_old_data_dir_answers_as_it_did(backend, tmp_path, fixture, pg_dsn):
    store, _ = await _opened(backend, tmp_path, fixture["pairs"], pg_dsn)
    try:
        async with cortexdb.open_engine(store=store, clock=ManualClock(fixture["now"]), id_seed=8,
                                        config=CONFIG) as engine:  # fmt: skip
            assert _normal(await answers(engine)) == _calibrated(_replaced(fixture["answers"],
                                                                           fixture["answers_replaced_since_v0"]))
            # and it goes on: a new write derives, the old scope rebuilds from its WAL
            done = await engine.experience(_envelope("I live in Rome.", "2026-05-13T16:30:00Z"),
                                           wait="consolidated")  # fmt: skip
            assert any(d.startswith("fact_") for d in done.derives)
            await engine.rebuild(ALICE)
            facts = (await engine.facts(ALICE, predicate="lives_in"))["items"]
            assert [f["object"]["name"] for f in facts] == ["Rome"]
    finally:
        await store.close()


async def test_stored_records_re_encode_to_the_same_bytes(fixture):
    from cortexdb.engine import model

    # not beliefs: revision may store an integer weight (``"against":0``) that reads back as a float
    tables = {b"X": model.EventState, b"F": model.Fact, b"EP": model.Episode, b"E": model.Event,
              b"S": model.Scope, b"L": model.LifecycleEvent, b"N": model.Entity}  # fmt: skip
    seen = set()
    for key_b64, value_b64 in fixture["pairs"]:
        key, value = base64.b64decode(key_b64), base64.b64decode(value_b64)
        table = key.split(b"\x00", 1)[0]
        if table in tables:
            seen.add(table)
            record = model.loads(value, tables[table])
            if table == b"X":  # re-encodes to the shorter form of session 29, which reads the same
                again = model.dumps(record)
                assert len(again) < len(value) and model.loads(again, model.EventState) == record, key
                continue
            assert model.dumps(record) == value, key
    assert seen == set(tables)


async def test_the_same_writes_store_the_same_bytes(fixture):
    """The scenario run by this version leaves the store the old version left, byte for byte
    (ids and times come from the seed and the manual clock; only measured durations differ)."""
    from cortexdb.backends.memory import MemoryStore

    store, clock = MemoryStore(), ManualClock(START)
    async with cortexdb.open_engine(store=store, clock=clock, id_seed=7, config=CONFIG) as engine:
        await scenario(engine, clock)
    written = {key: value async for key, value in store.scan()}
    old = {base64.b64decode(k): base64.b64decode(v)
           for k, v in fixture["pairs"] + fixture["pairs_added_since_v0"] + fixture["pairs_replaced_since_v0"]}
    assert sorted(written) == sorted(old)
    from cortexdb.engine import model
    from cortexdb.engine.storage.lifecycle_rows import LifecycleRows
    from cortexdb.engine.storage.table import VECTOR

    rows = LifecycleRows()
    for key, value in old.items():
        table = key.split(b"\x00", 1)[0]
        if table in (b"X", b"L", b"V"):  # session 29's shorter forms: the same records
            assert len(written[key]) <= len(value), key
        if table == b"X":  # an event state: its stages' measured durations differ
            now, then = model.loads(written[key], model.EventState), model.loads(value, model.EventState)
            now.elapsed_ms = then.elapsed_ms = None
            assert now == then, key
        elif table == b"L":
            assert rows.decode(written[key]) == rows.decode(value), key
        elif table == b"V":
            assert np.array_equal(VECTOR.decode(written[key]), VECTOR.decode(value).astype(np.float16)), key
        else:
            assert written[key] == value, key


if __name__ == "__main__":
    trio.run(_record, sys.argv[1] if len(sys.argv) > 1 else FIXTURE)
