"""Concept summaries re-indexed by their difference (retrieve/text_delta.py) and tokenized a line
at a time (tokens.tokenize_lines): the index answers what a fresh index of the same documents
answers (docs/decisions.md, "Concept summaries re-indexed by their difference")."""

import random
import uuid

import numpy as np
import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.actors.vector_backlog import embed_text
from cortexdb.engine.model.text import concept_text
from cortexdb.engine.retrieve.embedders import HashEmbedder
from cortexdb.engine.retrieve.text_index import TextIndex
from cortexdb.engine.retrieve.tokens import tokenize, tokenize_lines

from .conftest import envelope
from .test_index_memory import _assert_bm25_exact

WORDS = ["works", "at", "umbrella", "stark", "on", "the", "data", "team", "likes", "pottery", "supported",
         "contradicted", "lives", "in", "lisbon", "berlin", "0", "71", "37"]  # fmt: skip
QUERIES = ["umbrella data team", "pottery", "lisbon berlin berlin", "fact", "supported 71", "zzz", "works stark"]


def _line(rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7)))
    return f"{words} [{rng.choice(['fact', 'belief'])}_{uuid.UUID(int=rng.getrandbits(128), version=4)}]"


def _summary(rng: random.Random, lines: list[str]) -> str:
    """A concept's text: its name, then the lines of its summary (most kept from the last)."""
    lines[:] = [line for line in lines if rng.random() < 0.85]
    lines += [_line(rng) for _ in range(rng.randint(0, 4))]
    rng.shuffle(lines) if rng.random() < 0.2 else None
    return "Farid. Farid: " + "; ".join(lines) + "."


def _fresh(live: dict[str, str]) -> TextIndex:
    index = TextIndex()
    for doc_id, text in sorted(live.items()):
        index.add(doc_id, text)
    return index


def _same_ranking(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [d for d, _ in got] == [d for d, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12)


def _same_answers(index: TextIndex, fresh: TextIndex, live: dict[str, str]) -> None:
    assert (len(index), index.total_length) == (len(fresh), fresh.total_length)
    for query in QUERIES:  # the same ranks; scores to the last bits (the mean idf of the
        # negative-idf floor sums the terms in vocabulary order, which history decides)
        _same_ranking(index.search(query), fresh.search(query))
        _same_ranking(index.search_pruned(query, 5), fresh.search_pruned(query, 5))
        for doc_id in live:
            assert index.score(query, doc_id) == pytest.approx(fresh.score(query, doc_id), rel=1e-12)
    for term in {t for text in live.values() for t in tokenize(text)}:
        assert index._doc_freq(term) == fresh._doc_freq(term)


def test_tokenize_lines_is_tokenize():
    rng = random.Random(3)
    alphabet = ["a", "Z", "0", "9", " ", ";", "; ", "ß", "ﬀ", "K", "İ", "-", "[", " [", "]", "_", "é", "Σ", "the", "ſ"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert tokenize_lines(text) == tokenize(text)
    text = "Farid. Farid: works at Umbrella [fact_01a2238e-d91f-778c-90b0-662326bc60d1]; likes pottery (supported, 0.71)."
    assert tokenize_lines(text) == tokenize(text) == tokenize_lines(text)  # from the cache too


def test_the_hash_embedder_line_by_line_is_the_same_vector():
    rng = random.Random(8)
    embedder = HashEmbedder(dimension=64)
    alphabet = ["ab", "Z", "0", " ", "; ", ";", "ß", "K", "-", "(supported, 0.71)", "works at", "é", "ſ", "x"]
    texts = ["", "; ", "a; ; b", "Farid. Farid: works at Umbrella; likes pottery (supported, 0.71)."]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(1500)]
    for text in texts + texts:  # the second time from the cache
        assert np.array_equal(embedder.sum_lines(text), embedder.sum_one(text))
    flags = [rng.random() < 0.5 for _ in texts]
    assert np.array_equal(embedder.embed_lines(texts, flags), embedder.embed(texts))
    assert embedder.embed_lines([], []).shape == (0, 64)


def test_long_summary_lines_are_not_cached():
    """The line caches hold lines of at most CACHED_LINE_CHARS characters: a longer line gives the
    same tokens and vector, computed without the cache (so the caches' bytes are bounded)."""
    from cortexdb.engine.retrieve import embedders, tokens

    long_line = " ".join(f"word{i} pottery Umbrella" for i in range(200))
    assert len(long_line) > tokens.CACHED_LINE_CHARS
    text = f"Farid: works at Umbrella; {long_line}; likes pottery"
    embedder = HashEmbedder(dimension=64)
    tokens._line_tokens.cache_clear()
    embedders._line_buckets.cache_clear()
    for _ in range(2):
        assert tokenize_lines(text) == tokenize(text)
        assert np.array_equal(embedder.sum_lines(text), embedder.sum_one(text))
    cached_tokens = tokens._line_tokens.cache_info().currsize
    cached_lines = embedders._line_buckets.cache_info().currsize
    assert cached_tokens == 2 and cached_lines == 2  # the two short lines, never the long one
    assert tokens._line_tokens.cache_info().hits == 2 and embedders._line_buckets.cache_info().hits == 2


def test_documents_re_indexed_in_place_answer_as_a_fresh_index():
    rng = random.Random(11)
    index = TextIndex(compact_min=40, seal_docs=6)  # seals often: sealed documents are re-added
    concepts = [f"concept_{uuid.UUID(int=rng.getrandbits(128), version=4)}" for _ in range(9)]
    lines: dict[str, list[str]] = {doc_id: [] for doc_id in concepts}
    live: dict[str, str] = {}
    in_place = 0
    for step in range(400):
        doc_id = rng.choice(concepts)
        if step % 17 == 16 and doc_id in live:
            index.remove(doc_id)
            del live[doc_id]
            lines[doc_id] = []
            continue
        live[doc_id] = _summary(rng, lines[doc_id])
        in_place += doc_id in index._delta_slot
        index.add(doc_id, live[doc_id], tokenize_lines(live[doc_id]))
        if step % 25 == 0:
            _same_answers(index, _fresh(live), live)
    assert in_place > 100  # most re-adds were in place, the others re-added sealed documents
    _same_answers(index, _fresh(live), live)
    _assert_bm25_exact(index, live, QUERIES)
    index.seal()
    index.compact()
    _same_answers(index, _fresh(live), live)


def test_a_document_re_indexed_in_place_keeps_its_slot_and_its_terms_are_gone():
    index = TextIndex()
    index.add("concept_a", "Ana. Ana: likes pottery [fact_1]; lives in Lisbon [fact_2]")
    index.add("concept_b", "Bo. Bo: likes pottery [fact_3]")
    slot = index.slot_of("concept_a")
    index.add("concept_a", "Ana. Ana: likes pottery [fact_1]; lives in Berlin [fact_4]")
    assert index.slot_of("concept_a") == slot and index.slots == 2 and len(index) == 2
    assert index.search("lisbon") == index.search("2") == []
    assert [doc_id for doc_id, _ in index.search("berlin")] == ["concept_a"]
    index.remove("concept_a")
    assert index.search("berlin") == [] and index.dead_pairs == index._dead_pairs > 0
    _assert_bm25_exact(index, {"concept_b": "Bo. Bo: likes pottery [fact_3]"}, ["pottery", "bo fact"])


def _concept_documents(engine, scope: str) -> TextIndex:
    lane = engine._supervisor._handles[scope].actor.lane
    return lane.state.text_index._indexes["concept_"]


async def _indexed_summaries(engine, scope: str) -> dict[str, str]:
    """The text of each concept the index holds, as the stored concepts say it; the index holds
    exactly the concepts not deprecated."""
    lane = engine._supervisor._handles[scope].actor.lane
    stored = {key: concept async for key, concept in lane.state.tables.concepts.scan()}
    texts = {key: concept_text(c) for key, c in stored.items() if c.stance != "deprecated"}
    index = _concept_documents(engine, scope)
    assert {d for d in texts if d in index} == set(texts) and len(index) == len(texts)
    return texts


def _same_as_fresh(index: TextIndex, live: dict[str, str]) -> None:
    _same_answers(index, _fresh(live), live)
    fresh = _fresh(live)
    for query in ["ana lisbon", "cy tea", "bo chess"]:
        _same_ranking(index.search(query), fresh.search(query))


async def test_concepts_re_synthesized_are_indexed_as_a_fresh_index_of_their_summaries(tmp_path, clock):
    scope = "org:acme/user:alice"
    path = str(tmp_path / "data")
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
    rng = random.Random(5)
    companies, cities = ["Umbrella", "Stark", "Soylent", "Acme"], ["Lisbon", "Berlin", "Oslo", "Rome"]

    written = [0]

    async def write(engine, count: int) -> None:
        for _ in range(count):
            person = rng.choice(["Ana", "Bo", "Cy"])
            text = rng.choice([f"{person} works at {rng.choice(companies)}.", f"{person} lives in {rng.choice(cities)}.",
                               f"{person} likes {rng.choice(['pottery', 'chess', 'tea'])}."])  # fmt: skip
            engine_envelope = envelope(text, scope=scope, observed_at=f"2026-05-13T15:{written[0] // 60:02d}:{written[0] % 60:02d}Z")
            written[0] += 1
            await engine.experience(engine_envelope, wait="consolidated")

    queries = [*QUERIES, "ana lisbon", "cy tea", "bo chess"]
    engine_embedder = HashEmbedder()
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=4, clock=clock,
                                    embedder=engine_embedder) as engine:  # fmt: skip
        await write(engine, 40)
        index = _concept_documents(engine, scope)
        assert index.slots < 20  # re-synthesized concepts were re-indexed in place, not re-added
        _same_as_fresh(index, await _indexed_summaries(engine, scope))
        await write(engine, 20)
        before = await _indexed_summaries(engine, scope)
        _same_as_fresh(index, before)
        vectors = engine._supervisor._handles[scope].actor.lane.state.vector_index
        for doc_id, text in before.items():  # embedded a line at a time: the same vectors
            want = engine_embedder.embed([embed_text(doc_id, text)])[0]
            assert np.array_equal(vectors.vector(doc_id), want.astype(np.float16).astype(np.float32))  # as kept
        ranked = {q: index.search(q) for q in queries}
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=5, clock=clock) as engine:
        await engine.recall({"scope": scope, "query": "Ana"})  # opens the scope: its indexes restored
        await engine.flush()
        after = await _indexed_summaries(engine, scope)
        assert after == before
        _same_as_fresh(_concept_documents(engine, scope), after)
        for query, want in ranked.items():
            _same_ranking(_concept_documents(engine, scope).search(query), want)
        await write(engine, 20)  # re-synthesized after the restart
        _same_as_fresh(_concept_documents(engine, scope), await _indexed_summaries(engine, scope))
