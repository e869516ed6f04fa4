"""Diversity across sessions or episodes in ranking (recall/diversity.py): the n-th best event of a
group loses weight * n / (n + 1); the best of each group, other layers and ungrouped events keep
their scores.  Both backends for the engine-level test."""

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.model import Candidate
from cortexdb.engine.recall import diversity

from .conftest import envelope

SCOPE = "org:acme/team:friends"


def event(record_id: str, score: float, session: str | None = None, episode: str | None = None,
          layer: str = "events") -> Candidate:  # fmt: skip
    actor = {"id": "user:a", **({"session": session} if session else {})}
    record = {"id": record_id, "observed_actor": actor, "derives": ["fact_1", *([episode] if episode else [])]}
    c = Candidate(layer=layer, id=record_id, record=record, text="", time="2026-03-01T10:00:00Z", importance=0.0,
                  confidence=1.0, links=[], chain={}, raw_size=1)  # fmt: skip
    c.score = score
    return c


def test_later_events_of_a_session_are_charged():
    first, second, third = event("evt_1", 0.9, "1"), event("evt_2", 0.8, "1"), event("evt_3", 0.7, "1")
    other = event("evt_4", 0.6, "2")  # the best of its own session
    loose = event("evt_5", 0.65)  # no session, no episode: a group of its own
    fact = event("fact_9", 0.85, "1", layer="facts")  # other layers are left alone
    pool = [third, other, first, loose, fact, second]
    assert diversity.spread(pool, 0.2) == 2
    assert first.score == 0.9 and other.score == 0.6 and loose.score == 0.65 and fact.score == 0.85
    assert second.score == pytest.approx(0.8 - 0.2 / 2) and second.signals["diversity"] == -0.1
    assert third.score == pytest.approx(0.7 - 0.2 * 2 / 3)
    assert sorted(pool, key=lambda c: -c.score)[:4] == [first, fact, second, loose]
    assert other.score > third.score  # the second session's best now ranks above the first's third


def test_a_long_events_passages_count_once():
    passage_a, passage_b = event("evt_1", 0.9, "1"), event("evt_1", 0.85, "1")  # one record, two passages
    passage_a.id, passage_b.id = "evt_1", "evt_1#p2"
    mate = event("evt_2", 0.8, "1")
    assert diversity.spread([passage_a, passage_b, mate], 0.2) == 1
    assert passage_b.score == 0.85 and mate.score == pytest.approx(0.7)


def test_grouping_by_episode_and_the_fallback():
    a, b = event("evt_1", 0.9, "1", "ep_a"), event("evt_2", 0.8, "1", "ep_b")
    assert diversity.spread([a, b], 0.2, by="episode") == 0  # one session, two episodes
    assert diversity.spread([a, b], 0.2, by="session") == 1
    c, d = event("evt_3", 0.9, None, "ep_c"), event("evt_4", 0.8, None, "ep_c")
    assert diversity.spread([c, d], 0.2, by="session") == 1  # no session: its episode
    assert d.score == pytest.approx(0.7)
    assert diversity.spread([event("evt_5", 0.9, "1"), event("evt_6", 0.8, "1")], 0.0) == 0  # off


def test_the_settings_are_checked():
    with pytest.raises(ValueError):
        EngineConfig(recall_diversity_weight=-0.1)
    with pytest.raises(ValueError):
        EngineConfig(recall_diversity_weight=1.5)
    with pytest.raises(ValueError):
        EngineConfig(recall_diversity_by="speaker")


def turn(text: str, session: str, second: int) -> dict:
    return envelope(text, scope=SCOPE, observed_at=f"2026-03-0{session}T10:00:{second:02d}Z",
                    observed_actor={"id": "user:caroline", "session": session})  # fmt: skip


@pytest.mark.parametrize("weight", [0.0, 1.0])
async def test_a_second_session_reaches_the_top(engine_factory, weight):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_diversity_weight=weight,
                          recall_episode_weight=0.0, recall_length_weight=0.0)  # fmt: skip
    async with engine_factory(config=config) as engine:
        texts = [
            ("1", "Pottery class on Monday: pottery wheel, pottery glaze and more pottery."),
            ("1", "My pottery bowl from the pottery class came out of the kiln."),
            ("1", "The pottery teacher showed us pottery glazing."),
            ("2", "I painted a sunset after my pottery class."),
        ]
        for second, (session, text) in enumerate(texts):
            await engine.experience(turn(text, session, second), caller="user:alice", wait="indexed")
        pack = await engine.recall({"scope": SCOPE, "query": "pottery class", "include": ["events"],
                                    "diagnostics": "none"})  # fmt: skip
    sessions = [item["observed_actor"]["session"] for item in pack["layers"]["events"]]
    assert len(sessions) == 4
    if weight:
        assert "2" in sessions[:2]  # the other session's only match is charged nothing
    else:
        assert sessions[:2] == ["1", "1"]  # by the words alone, session 1 leads
