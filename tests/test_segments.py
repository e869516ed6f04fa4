"""Episode segment strategies (docs/episodes.md): each strategy's windows, chosen per scope, and a
change of strategy re-segmenting the scope's episodes from its WAL as a job with progress, the old
episodes still readable as of before.  Both backends (the ``engine`` fixture)."""

import datetime as dt

import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.errors import InvalidScopeRequest

from .conftest import envelope

SCOPE = "org:acme/user:alice"
OTHER = "org:acme/user:bob"
# (text, role, observed_at, session, thread)
TURNS = [
    ("Can you book the flight?", "user", "2026-05-10T09:00:00Z", "s1", "A"),
    ("Booked for Friday.", "assistant", "2026-05-10T09:01:00Z", "s1", "A"),
    ("What about the hotel?", "user", "2026-05-10T09:02:00Z", "s1", "B"),
    ("Two hotels are free.", "assistant", "2026-05-10T09:03:00Z", "s2", "B"),
    ("Take the cheaper one.", "user", "2026-05-10T13:00:00Z", "s2", "B"),
    ("And a taxi, please.", "user", "2026-05-11T09:00:00Z", "s2", "B"),
]
EXPECTED = {  # the turns each episode holds, by position in TURNS
    "time_gap": [[0, 1, 2, 3], [4], [5]],
    "session": [[0, 1, 2], [3], [4], [5]],
    "thread": [[0, 1], [2, 3, 4, 5]],
    "turn_pair": [[0, 1], [2, 3], [4, 5]],
    "daily": [[0, 1, 2, 3, 4], [5]],
}


async def write_turns(engine, scope=SCOPE):
    ids = []
    for text, role, when, session, thread in TURNS:
        body = envelope(text, scope=scope, observed_at=when, role=role,
                        observed_actor={"id": "user:alice", "session": session})  # fmt: skip
        body["context"]["thread"] = thread
        ids.append((await engine.experience(body, caller="user:alice", wait="indexed")).event_id)
    await engine.flush(scope, seal=True)
    return ids


async def groups(engine, ids, scope=SCOPE, **read):
    episodes = (await engine.episodes(scope, limit=100, **read))["items"]
    position = {event_id: n for n, event_id in enumerate(ids)}
    return sorted(sorted(position[e] for e in episode["events"]) for episode in episodes), episodes


@pytest.mark.parametrize("strategy", list(EXPECTED))
async def test_each_strategy_cuts_the_turns_its_way(engine, strategy):
    job = await engine.segmentation.set(SCOPE, {"strategy": strategy}, caller="user:alice")
    assert (await engine.segmentation.wait(job["job_id"]))["status"] == "completed"
    ids = await write_turns(engine)
    found, episodes = await groups(engine, ids)
    assert found == EXPECTED[strategy]
    assert {e["strategy"] for e in episodes} == {strategy}
    setting = await engine.segmentation.get(SCOPE, caller="user:alice")
    assert (setting["strategy"], setting["source"]) == (strategy, "scope")


async def test_the_strategy_is_per_scope(engine):
    await engine.segmentation.wait((await engine.segmentation.set(SCOPE, {"strategy": "daily"}, caller="user:alice"))["job_id"])
    mine, bobs = await write_turns(engine), await write_turns(engine, OTHER)
    assert (await groups(engine, mine))[0] == EXPECTED["daily"]
    assert (await groups(engine, bobs, OTHER))[0] == EXPECTED["time_gap"]  # the engine's default
    other = await engine.segmentation.get(OTHER, caller="user:alice")
    assert (other["strategy"], other["source"], other["job"]) == ("time_gap", "engine", None)


async def test_a_custom_gap_is_honoured(engine):
    job = await engine.segmentation.set(SCOPE, {"strategy": "time_gap", "gap_seconds": 86400}, caller="user:alice")
    await engine.segmentation.wait(job["job_id"])
    ids = await write_turns(engine)
    assert (await groups(engine, ids))[0] == [[0, 1, 2, 3, 4, 5]]


async def test_changing_the_strategy_resegments_from_the_wal_as_a_job(engine, clock):
    ids = await write_turns(engine)  # the engine's default: time_gap
    before, old = await groups(engine, ids)
    assert before == EXPECTED["time_gap"]
    held = clock.now()
    clock.advance(60)
    job = await engine.segmentation.set(SCOPE, {"strategy": "turn_pair"}, caller="user:alice")
    assert job["status"] == "running" and job["strategy"] == "turn_pair"
    done = await engine.segmentation.wait(job["job_id"])
    assert done["status"] == "completed" and done["fraction_complete"] == 1.0
    assert done["progress"]["events_done"] == done["progress"]["events_total"] == len(TURNS)
    assert done["summary"] == {"retired": 3, "episodes": 3, "events": len(TURNS)}
    after, new = await groups(engine, ids)
    assert after == EXPECTED["turn_pair"] and not {e["id"] for e in new} & {e["id"] for e in old}
    # bi-temporal: as known before the change, the old episodes; as known now, the new ones
    then, _ = await groups(engine, ids, as_of=held)
    assert then == EXPECTED["time_gap"]
    ticks = await engine.lifecycle(job_id=job["job_id"], events="segmentation_progress")
    assert ticks and ticks[-1]["payload"]["events_done"] == len(TURNS)
    (end,) = await engine.lifecycle(job_id=job["job_id"], events="segmentation_complete")
    assert end["payload"]["status"] == "completed" and end["payload"]["strategy"] == "turn_pair"
    # every event names its new episode; recall finds only the new ones
    view = await engine.memory_event(ids[2])
    (now_in,) = [e["id"] for e in new if ids[2] in e["events"]]
    (was_in,) = [e["id"] for e in old if ids[2] in e["events"]]
    assert {now_in, was_in} <= set(view["derives"])  # the retired one too: a forget finds it
    pack = await engine.recall({"scope": SCOPE, "query": "hotel", "include": ["episodes"]})
    assert {e["id"] for e in pack["layers"]["episodes"]} <= {e["id"] for e in new}
    assert pack["layers"]["episodes"]
    # later events are windowed with the new strategy too
    clock.advance(60)
    body = envelope("Thanks!", observed_at="2026-05-11T09:05:00Z", role="assistant")
    await engine.experience(body, caller="user:alice", wait="indexed")
    await engine.flush(SCOPE, seal=True)
    latest = (await engine.episodes(SCOPE, limit=100))["items"]
    assert sorted(len(e["events"]) for e in latest) == [2, 2, 3]


async def test_resegmenting_survives_a_reopen(tmp_path, clock):
    """A data dir (LevelDB) reopened: the setting, the new episodes and the job's record stay."""

    def engine_factory():
        return cortexdb.open_engine("leveldb", path=str(tmp_path / "data"), clock=clock, id_seed=7,
                                    config=EngineConfig(episode_idle_check=3600.0, default_caller="user:alice"))  # fmt: skip

    async with engine_factory() as engine:
        ids = await write_turns(engine)
        clock.advance(60)
        job = await engine.segmentation.set(SCOPE, {"strategy": "thread"}, caller="user:alice")
        await engine.segmentation.wait(job["job_id"])
    async with engine_factory() as engine:
        assert (await groups(engine, ids))[0] == EXPECTED["thread"]
        setting = await engine.segmentation.get(SCOPE, caller="user:alice")
        assert setting["strategy"] == "thread" and setting["job"]["status"] == "completed"


@pytest.mark.parametrize("bad", [{"strategy": "weekly"}, {"strategy": "daily", "gap_seconds": -1},
                                 {"strategy": "daily", "extra": 1}, "daily", {"gap_seconds": 60}])  # fmt: skip
async def test_bad_settings_are_clear_errors(engine, bad):
    with pytest.raises(InvalidScopeRequest) as caught:
        await engine.segmentation.set(SCOPE, bad, caller="user:alice")
    assert caught.value.details["field"].startswith("segmentation")


def test_idle_sealing_follows_the_strategy():
    from cortexdb.engine.derive.episodes import Segmentation, idle_seals

    start = dt.datetime(2026, 5, 10, 23, 0, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    for strategy, expected in (("time_gap", True), ("thread", False), ("daily", True), ("turn_pair", True)):
        assert idle_seals(Segmentation(strategy, dt.timedelta(minutes=30), 500), start, hour, start + hour) is expected
    # a daily window idle for an hour within its day stays open
    assert not idle_seals(Segmentation("daily", dt.timedelta(minutes=30), 500), start - 2 * hour, hour, start)


async def test_a_forget_after_resegmenting_reaches_the_retired_episodes_too(engine, clock):
    ids = await write_turns(engine)
    held = clock.now()
    clock.advance(60)
    await engine.segmentation.wait((await engine.segmentation.set(SCOPE, {"strategy": "daily"}, caller="user:alice"))["job_id"])
    clock.advance(60)
    result = await engine.forget({"scope": SCOPE, "layers": ["events", "episodes"], "cascade": "redact_events",
                                  "selector": {"memory_ids": [ids[2]]}})  # fmt: skip
    assert result["deleted"]["events"] == 1  # redacted: the episodes holding it are described again without it
    for read in ({}, {"as_of": held}):
        assert "What about the hotel" not in str((await engine.episodes(SCOPE, limit=100, **read))["items"])
    assert len((await engine.episodes(SCOPE, limit=100, as_of=held))["items"]) == 3  # the retired ones, as they were
    assert len((await engine.episodes(SCOPE, limit=100))["items"]) == 2  # the daily ones


def test_thread_falls_back_to_the_time_gap_without_threads():
    from cortexdb.engine.derive.episodes import closes_window

    at = dt.datetime(2026, 5, 10, 9, 0, tzinfo=dt.UTC)
    common = {"strategy": "thread", "gap": dt.timedelta(minutes=30), "max_events": 500, "episode_events": 3,
              "episode_ended_at": at, "episode_session": None, "session": None}  # fmt: skip
    later = at + dt.timedelta(hours=5)
    assert not closes_window(**common, observed_at=later, last_thread="A", thread="A")  # a thread pauses
    assert closes_window(**common, observed_at=at, last_thread="A", thread="B")
    assert closes_window(**common, observed_at=at, last_thread=None, thread="B")
    assert closes_window(**common, observed_at=later, last_thread=None, thread=None)  # no thread: the gap
    assert not closes_window(**common, observed_at=at, last_thread=None, thread=None)
