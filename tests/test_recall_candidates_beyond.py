"""Candidate generation beyond the question's words (actors/requery.py, retrieve/feedback.py;
docs/decisions.md "Candidates beyond the question's words"): the feedback arithmetic on its own,
then the second search on a tiny constructed corpus through the engine, on and off by its
setting."""

import numpy as np
import pytest

from cortexdb import EngineConfig
from cortexdb.engine.retrieve import feedback

from .conftest import envelope

SCOPE = "org:acme/team:friends"


def test_feedback_docs_fuse_both_rankings_by_rank():
    bm25 = {"evt_a": 9.0, "evt_b": 5.0, "evt_c": 1.0, "fact_x": 20.0}
    semantic = {"evt_b": 0.9, "evt_c": 0.8, "evt_d": 0.7}
    # evt_b is second and first; evt_a first of one list only; facts are another layer
    assert feedback.feedback_docs(bm25, semantic, "evt_", 2) == ["evt_b", "evt_c"]
    assert feedback.feedback_docs(bm25, semantic, "evt_", 0) == []
    assert feedback.feedback_docs({}, {}, "evt_", 3) == []


def test_rocchio_moves_the_query_toward_the_feedback_and_keeps_unit_length():
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    docs = [np.array([0.0, 1.0, 0.0], dtype=np.float32), np.array([0.0, 0.0, 1.0], dtype=np.float32)]
    moved = feedback.rocchio(query, docs, 1.0)
    assert np.linalg.norm(moved) == pytest.approx(1.0)
    assert moved[0] > moved[1] > 0 and moved[1] == pytest.approx(moved[2])  # the query weighs most
    assert feedback.rocchio(query, docs, 0.0) is query  # off
    assert feedback.rocchio(query, [], 1.0) is query  # nothing to move toward


def test_expansion_terms_are_the_feedbacks_distinctive_words():
    pool = ["Caroline said the weather was fine", "Caroline said hello", "Caroline paints watercolour landscapes",
            "Caroline likes the weather"]  # fmt: skip
    terms = feedback.expansion_terms("What hobbies does Caroline have?", [pool[2]], pool, 3)
    # caroline is the query's own; "paints" stems to what the index holds and is given as said
    assert terms == ["landscapes", "paints", "watercolour"]
    assert feedback.expansion_terms("What hobbies?", [pool[2]], pool, 0) == []
    assert feedback.expansion_terms("x", ["the of and"], pool, 3) == []  # stop words only


def turn(text: str, speaker: str, second: int) -> dict:
    return envelope(text, scope=SCOPE, observed_at=f"2026-03-01T10:{second // 60:02d}:{second % 60:02d}Z",
                    observed_actor={"id": f"user:{speaker}", "session": "1"})  # fmt: skip


async def event_texts(engine, query: str, limit: int) -> list[str]:
    pack = await engine.recall({"scope": SCOPE, "query": query, "include": ["events"], "diagnostics": "none",
                                "budgets": {"per_layer_limits": {"events": limit}}})  # fmt: skip
    return [item["content"]["text"] for item in pack["layers"]["events"]]


FILLERS = [f"Caroline mentioned the weather report number {i} again today" for i in range(30)]
HOBBY = "Caroline here: my hobby is painting landscapes with watercolours, my favourite hobby."
TARGET = "Watercolours and landscapes every sunday down by the lake."


@pytest.mark.parametrize("how", ["off", "terms", "vector"])
async def test_feedback_reaches_a_turn_sharing_no_word_with_the_question(engine_factory, how):
    settings = {"off": {"recall_feedback_docs": 0},
                "terms": {"recall_feedback_docs": 1, "recall_feedback_vector": 0.0, "recall_feedback_terms": 4},
                "vector": {"recall_feedback_docs": 1, "recall_feedback_vector": 2.0, "recall_feedback_terms": 0}}[how]  # fmt: skip
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", **settings)
    async with engine_factory(config=config) as engine:
        for second, text in enumerate([HOBBY, *FILLERS, TARGET]):
            await engine.experience(turn(text, "caroline", second), caller="user:alice", wait="indexed")
        # derivation done: an event's facts count in its importance (a slower store would
        # otherwise recall before some are derived, and rank by what happened to be ready)
        await engine.flush(SCOPE)
        found = await event_texts(engine, "What hobby does Caroline have?", 3)
    assert found[0] == HOBBY
    # the first stage takes 10 hits a source: the fillers share "caroline", the target nothing;
    # the best hit's words (terms) or its vector (vector) find it in the second search
    assert (TARGET in found) == (how != "off")


def test_the_feedback_settings_are_checked():
    assert EngineConfig().recall_feedback_docs == 0  # off by default: +0.5 R@10 for +13 % recall CPU (decisions.md)
    for bad in ({"recall_feedback_docs": -1}, {"recall_feedback_vector": -0.1}, {"recall_feedback_vector": 5},
                {"recall_feedback_terms": -1}, {"recall_feedback_new": -1}):  # fmt: skip
        with pytest.raises((ValueError, TypeError)):
            EngineConfig(**bad)
