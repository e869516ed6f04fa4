"""The recall path's shortcuts give what the plain computations give (docs/decisions.md, "The
top-10 path: shortcuts that keep every answer"): the aspect of a record tried only up to the
asked cues, the graph signal counted from the distinct candidate links, the pack cache's
oldest-first expiry (and its full scan after a clock set back), the walk's known starts read
off its first hop."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from cortexdb.engine.model import aspects
from cortexdb.engine.model.records import Candidate
from cortexdb.engine.recall.cache import PackCache
from cortexdb.engine.retrieve import scoring
from cortexdb.errors import NotFound

PHRASES = [
    "we decided to go", "I really like tea", "my goal is to run", "I usually walk", "the build is broken",
    "always answer in French", "I think so", "my sister called", "need to file taxes", "hello there",
    "I hope to travel someday", "every morning I swim", "can't stand noise", "we agreed on it", "my favourite",
    "ALWAYS", "Favourite", "It happened yesterday", "todo: call Bob", "", "triple",
]


@pytest.mark.parametrize("seed", range(3))
def test_an_aspect_tried_up_to_the_asked_cues_is_the_aspect_of_the_record(seed):
    rng = random.Random(seed)
    for _ in range(400):
        text = " ".join(rng.sample(PHRASES, rng.randint(0, 3)))
        wanted = rng.sample(aspects.ASPECTS, rng.randint(1, 3))
        assert aspects.of_text_in(text, wanted) == (aspects.of_text(text) in wanted), (text, wanted)
        record = {"content": {"kind": "message", "text": text}}
        assert aspects.of_record_in("events", record, wanted) == (aspects.of_record("events", record) in wanted)
    triple = {"content": {"kind": "triple", "predicate": "likes", "datatype": "entity"}}
    fact = {"predicate": "works_at", "object": {"type": "entity"}}
    for wanted in (["preference"], ["knowledge"], ["event"]):
        assert aspects.of_record_in("events", triple, wanted) == (aspects.of_record("events", triple) in wanted)
        assert aspects.of_record_in("facts", fact, wanted) == (aspects.of_record("facts", fact) in wanted)


def _candidate(record_id: str, links: list[str]) -> Candidate:
    return Candidate(layer="events", id=record_id, record={"id": record_id}, text="", time="2026-01-01T00:00:00Z",
                     importance=0.0, confidence=1.0, links=links, chain={}, raw_size=0)  # fmt: skip


def test_the_graph_signal_counts_every_listing_of_a_candidate_link():
    rng = random.Random(5)
    ids = [f"evt_{n}" for n in range(12)]
    for _ in range(300):
        present = set(rng.sample(ids, rng.randint(0, 6)))
        links = [rng.choice(ids + ["ep_x", "fact_y"]) for _ in range(rng.randint(0, 8))]
        expected = min(1.0, sum(map(present.__contains__, links)) / 2.0)
        assert scoring._graph(present, links) == expected, (present, links)
    candidates = [_candidate("evt_a", ["evt_b", "evt_b"]), _candidate("evt_b", []), _candidate("evt_c", ["evt_b"])]
    scoring.score_candidates(candidates, {"graph": 1.0})
    assert [c.signals["graph"] for c in candidates] == [1.0, 0.0, 0.5]


def test_the_pack_cache_expires_oldest_first_and_scans_all_after_a_clock_set_back():
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cache = PackCache(60.0, 1000)
    for n in range(5):
        cache.put({"pack_id": f"pk_{n}"}, now + dt.timedelta(seconds=10 * n), key=("c", f"k{n}"), digest="d")
    cache.expire(now + dt.timedelta(seconds=85))  # pk_0, pk_1 and pk_2 expired (70, 80, 85)
    assert len(cache) == 2
    assert cache.by_key(("c", "k1"), "d") is None and cache.by_key(("c", "k3"), "d") == {"pack_id": "pk_3"}
    assert ("c", "k1") not in cache._keys  # the keys of expired packs go with them
    # a clock set back: a later put expires earlier than the packs before it
    cache.put({"pack_id": "pk_early"}, now - dt.timedelta(seconds=30))
    cache.expire(now + dt.timedelta(seconds=31))  # pk_early (30) expired, pk_3 and pk_4 not
    with pytest.raises(NotFound):
        cache.get("pk_early", now + dt.timedelta(seconds=31))
    assert cache.get("pk_3", now + dt.timedelta(seconds=31)) == {"pack_id": "pk_3"}
    cache.expire(now + dt.timedelta(seconds=200))
    assert len(cache) == 0 and cache.bytes == 0
    cache.put({"pack_id": "pk_new"}, now)  # an empty cache is in order again
    cache.expire(now + dt.timedelta(seconds=59))
    assert len(cache) == 1


async def test_a_walk_knows_the_starts_with_relationships_as_before(engine):
    """``known`` (the entity hints a recall's trail names) from the first hop's rows when it read
    them whole, else from the indexes: the starts with any relationship row, whatever the filters."""
    from cortexdb.engine.actors.messages import ReadRelationships

    scope = "org:acme/user:alice"
    for source, kind, target in (("Alice", "manages", "Priya"), ("Priya", "works_with", "Tom")):
        body = {"scope": scope, "from": source, "type": kind, "to": target}
        await engine.experience(engine.relationships.envelope(body, engine.clock.now()), wait="indexed")
    ctx = engine._ctx
    found = {name: (await ctx.entities.find(ctx.config.tenant_id, name)).id for name in ("Alice", "Priya", "Tom")}
    tables = ctx.tables.partition(scope)

    async def has_rows(entity_id: str) -> bool:
        return any([[i async for i in t.ids((entity_id,), limit=1)] for t in (tables.fact_index, tables.fact_objects)])

    alice, priya, tom = found["Alice"], found["Priya"], found["Tom"]
    cases = (((alice, priya), 2, (), "both"), ((tom,), 1, (), "both"), ((alice,), 1, ("works_with",), "both"),
             (("ent_nobody", tom, tom), 1, (), "both"), ((tom, alice), 1, (), "out"))  # fmt: skip
    for starts, depth, types, direction in cases:
        walk = await ctx.supervisor.request(scope, lambda reply, s=starts, d=depth, t=types, w=direction:
                                            ReadRelationships(reply=reply, starts=s, depth=d, types=t, direction=w))  # fmt: skip
        expected = list(dict.fromkeys([s for s in starts if await has_rows(s)]))
        assert walk["known"] == expected and "ent_nobody" not in walk["known"]
