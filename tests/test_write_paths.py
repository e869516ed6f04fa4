"""Every write path reaches the same recall (issue 17): a small conversation written with the
bulk API and ``flush(seal=True)`` (bench/locomo.py's path), turn by turn with
``wait="indexed"`` (embedded and over HTTP: the user's path), and turn by turn without waiting
then ``flush()`` gives the same ranked turns, with the same scores, for every question."""

from __future__ import annotations

import numpy as np
import pytest

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.engine.retrieve.embedders import HashEmbedder

from .server_support import START, server

SCOPE = "project:talk"
SESSIONS = {
    "1": ("2026-03-02T10:00:00Z", [
        ("alice", "I started pottery classes last week, I made a blue bowl."),
        ("bob", "That's lovely! What made you pick pottery?"),
        ("alice", "My sister Jane does it and she said it helps with stress."),
        ("bob", "I go running by the river when I'm stressed."),
        ("alice", "Running sounds nice. Do you run alone?"),
        ("bob", "With my dog Rex, a border collie, every morning."),
    ]),
    "2": ("2026-04-11T18:30:00Z", [
        ("bob", "We moved to Lisbon last month, close to the sea."),
        ("alice", "Wow, Lisbon! Is Rex happy there?"),
        ("bob", "He loves the beach. We camp near Sintra on weekends."),
        ("alice", "I finished a second bowl, a green one, for Jane's birthday."),
    ]),
    "3": ("2026-05-20T09:15:00Z", [
        ("alice", "Jane got a job as a nurse in Porto."),
        ("bob", "Congratulations to her! Porto is close to us now."),
        ("alice", "I am thinking of studying counseling next year."),
        ("bob", "You would be great at it, you always listen."),
        ("alice", "Thanks! The pottery teacher said the same thing."),
    ]),
}  # fmt: skip
QUESTIONS = [
    "What did Alice make in pottery class?", "Where did Bob move?", "What is the name of Bob's dog?",
    "What does Bob do when he is stressed?", "What job did Jane get?", "What does Alice want to study?",
    "When did Bob move to Lisbon?", "Where does Bob camp?",
]  # fmt: skip


def turns() -> list[dict]:
    out = []
    for session, (start, lines) in SESSIONS.items():
        for position, (speaker, text) in enumerate(lines):
            out.append({"session": session, "speaker": speaker, "text": text,
                        "observed_at": f"{start[:-3]}{position:02d}Z", "label": f"D{session}:{position + 1}"})  # fmt: skip
    return out


def envelope(turn: dict) -> dict:
    return {"scope": SCOPE, "observed_actor": {"id": f"user:{turn['speaker']}", "session": turn["session"]},
            "modality": "conversation", "content": {"kind": "message", "role": "user", "text": turn["text"]},
            "context": {"observed_at": turn["observed_at"], "labels": [f"dia_id:{turn['label']}"]},
            "idempotency_key": turn["label"]}  # fmt: skip


def request(question: str) -> dict:
    return {"scope": SCOPE, "query": question, "include": ["events"], "traversal": "local",
            "view": "granular", "budgets": {"per_layer_limits": {"events": 10}},
            "diagnostics": "none", "citation_mode": "none"}  # fmt: skip


def ranked(pack: dict) -> list[tuple[str, float]]:
    """The pack's turns as (dia_id, score), best first."""
    items = sorted((i for layer in pack["layers"].values() for i in layer), key=lambda i: -i["score"])
    return [(next(label[7:] for label in item["context"]["labels"] if label.startswith("dia_id:")), item["score"])
            for item in items]  # fmt: skip


def open_engine(turn_context: str = "pooled"):
    return cortexdb.open_engine("memory", clock=ManualClock(START), id_seed=7,
                                config=EngineConfig(episode_idle_check=3600.0, default_caller="user:alice",
                                                    turn_context=turn_context))  # fmt: skip


async def recall_all(recall) -> dict[str, list[tuple[str, float]]]:
    return {question: ranked(await recall(request(question))) for question in QUESTIONS}


async def bulk_path(turn_context: str = "pooled"):
    async with open_engine(turn_context) as engine:
        for session in SESSIONS:
            items = [{k: v for k, v in envelope(t).items() if k != "scope"} for t in turns() if t["session"] == session]
            await engine.experience_bulk({"scope": SCOPE, "ordering": "strict_temporal", "items": items})
        await engine.flush(SCOPE, seal=True)
        return await recall_all(engine.recall)


async def single_path(turn_context: str = "pooled"):
    async with open_engine(turn_context) as engine:
        for turn in turns():
            await engine.experience(envelope(turn), wait="indexed")
        return await recall_all(engine.recall)


async def unwaited_path():
    async with open_engine() as engine:
        for turn in turns():
            await engine.experience(envelope(turn))
        await engine.flush(SCOPE)
        return await recall_all(engine.recall)


async def http_path(tmp_path):
    async with server(tmp_path, engine_config={"turn_context": "pooled"}) as h:
        for turn in turns():
            response, data = await h.call("POST", "/v1/experience?wait=indexed", json=envelope(turn))
            assert response.status_code == 200, data

        async def recall(body: dict) -> dict:
            response, data = await h.call("POST", "/v1/recall", json=body)
            assert response.status_code == 200, data
            return data

        return await recall_all(recall)


async def test_every_write_path_reaches_the_same_recall(tmp_path):
    expected = await bulk_path()
    assert all(expected.values()) and len({tuple(v) for v in expected.values()}) == len(QUESTIONS)
    assert expected["What is the name of Bob's dog?"][0][0] == "D1:6"  # the ranking means something
    assert await single_path() == expected
    assert await unwaited_path() == expected
    assert await http_path(tmp_path) == expected


@pytest.mark.parametrize("turn_context", ["joint", "none"])
async def test_bulk_and_single_writes_agree_under_every_turn_context(turn_context):
    assert await single_path(turn_context) == await bulk_path(turn_context)


async def test_a_turn_is_pooled_with_the_previous_turn_of_its_session():
    """``turn_context="pooled"``: a turn's vector is its token sums added to its predecessor's
    (same session), normalised; the first turn of a session is embedded alone."""
    async with open_engine() as engine:
        for turn in turns()[:8]:  # session 1, then two turns of session 2
            await engine.experience(envelope(turn), wait="indexed")
        page = await engine.events(SCOPE)
        by_label = {e["context"]["labels"][0][7:]: e["id"] for e in page["items"]}
        index = engine._supervisor.actor(SCOPE).lane.state.vector_index  # noqa: SLF001
        texts = {t["label"]: f"{t['speaker']}: {t['text']}" for t in turns()[:8]}
        embedder = HashEmbedder()
        sums = embedder.embed_sums([texts["D1:1"], texts["D1:2"]])
        pooled = CONTEXT * sums[0] + sums[1]
        stored = index.vector(by_label["D1:2"])
        assert cosine(stored, pooled) > 0.99999  # (the index keeps float16)
        assert cosine(index.vector(by_label["D2:1"]), embedder.embed([texts["D2:1"]])[0]) > 0.99999
        # embedding the two texts together would differ (the word pair across the boundary)
        assert cosine(stored, embedder.embed([f"{texts['D1:1']}\n{texts['D1:2']}"])[0]) < 0.999


@pytest.mark.parametrize("weight", [1.0, 0.25])
async def test_the_previous_turn_counts_by_the_context_weight(weight):
    """``turn_context_weight``: the predecessor's sums are scaled before they are added."""
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", turn_context_weight=weight)
    async with cortexdb.open_engine("memory", clock=ManualClock(START), id_seed=7, config=config) as engine:
        for turn in turns()[:2]:
            await engine.experience(envelope(turn), wait="indexed")
        page = await engine.events(SCOPE)
        by_label = {e["context"]["labels"][0][7:]: e["id"] for e in page["items"]}
        stored = engine._supervisor.actor(SCOPE).lane.state.vector_index.vector(by_label["D1:2"])  # noqa: SLF001
        texts = [f"{t['speaker']}: {t['text']}" for t in turns()[:2]]
        sums = HashEmbedder().embed_sums(texts)
        assert cosine(stored, weight * sums[0] + sums[1]) > 0.99999
        other = 0.5 if weight == 1.0 else 1.0
        assert cosine(stored, other * sums[0] + sums[1]) < 0.9999


CONTEXT = EngineConfig().turn_context_weight  # how much the previous turn's sums count


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("turn_context", ["pooled", "joint"])
async def test_a_reopened_scope_recalls_what_it_did_before_closing(tmp_path, turn_context):
    """An actor that stopped (idle, a restart) rebuilds its indexes from the stored records and
    vectors: the same recall as the bulk path's live indexes."""
    expected = await bulk_path(turn_context)
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", turn_context=turn_context)
    where = str(tmp_path / "data")
    async with cortexdb.open_engine("leveldb", path=where, clock=ManualClock(START), id_seed=7, config=config) as engine:
        for turn in turns():
            await engine.experience(envelope(turn), wait="indexed")
    async with cortexdb.open_engine("leveldb", path=where, clock=ManualClock(START), id_seed=8, config=config) as engine:
        assert await recall_all(engine.recall) == expected


async def test_turns_without_a_session_take_context_within_the_episode_gap():
    """No ``observed_actor.session``: a turn observed within ``episode_gap_seconds`` of the
    previous one continues its conversation (its vector carries it); after a longer gap it
    starts a new one (embedded alone)."""
    lines = [("2026-03-02T10:00:00Z", "alice", "I adopted a cat called Miso."),
             ("2026-03-02T10:01:00Z", "bob", "What colour is she?"),
             ("2026-03-02T13:00:00Z", "bob", "Did you watch the match?")]  # fmt: skip
    async with open_engine() as engine:
        ids = []
        for observed, speaker, text in lines:
            body = {"scope": SCOPE, "observed_actor": {"id": f"user:{speaker}"}, "modality": "conversation",
                    "content": {"kind": "message", "role": "user", "text": text}, "context": {"observed_at": observed}}  # fmt: skip
            ids.append((await engine.experience(body, wait="indexed")).event_id)
        index = engine._supervisor.actor(SCOPE).lane.state.vector_index  # noqa: SLF001
        embedder = HashEmbedder()
        texts = [f"{speaker}: {text}" for _, speaker, text in lines]
        sums = embedder.embed_sums(texts)
        assert cosine(index.vector(ids[1]), CONTEXT * sums[0] + sums[1]) > 0.99999
        assert cosine(index.vector(ids[2]), sums[2]) > 0.99999


async def test_after_a_restart_the_next_turn_is_pooled_with_the_last_one_before_it(tmp_path):
    """The previous turn's sums live in memory only: after a reopen its text is encoded once
    more, so the next turn's vector is the one it would have had without the restart."""
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
    where = str(tmp_path / "data")
    first, rest = turns()[:3], turns()[3]
    async with cortexdb.open_engine("leveldb", path=where, clock=ManualClock(START), id_seed=7, config=config) as engine:
        for turn in first:
            await engine.experience(envelope(turn), wait="indexed")
    async with cortexdb.open_engine("leveldb", path=where, clock=ManualClock(START), id_seed=8, config=config) as engine:
        done = await engine.experience(envelope(rest), wait="indexed")
        index = engine._supervisor.actor(SCOPE).lane.state.vector_index  # noqa: SLF001
        sums = HashEmbedder().embed_sums([f"{t['speaker']}: {t['text']}" for t in (first[-1], rest)])
        assert cosine(index.vector(done.event_id), CONTEXT * sums[0] + sums[1]) > 0.99999
