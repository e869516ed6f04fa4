"""Derivation costs what an event brings, not what its scope holds (issue 17, ingest until idle;
issue 10, the soak's CPU per write): the facts read for one more event do not grow with the
facts its pair already had, and a subject's predicates are found one seek each."""

import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.storage import Partition

from .conftest import envelope

SCOPE = "org:acme/user:alice"


def town(i: int) -> str:
    """A town name of its own for each move (a move back to a town reopens its fact instead)."""
    return f"{chr(65 + i // 26)}{chr(97 + i % 26)}ville"


def move(i: int) -> dict:
    """The i-th move, an hour after the one before (a later move supersedes the fact before)."""
    return envelope(f"I live in {town(i)}.", observed_at=f"2026-05-{1 + i // 24:02d}T{i % 24:02d}:00:00Z")


class Counting:
    """Counts the rows read (point reads found, rows scanned) under given key prefixes."""

    def __init__(self, store, prefixes: dict[str, bytes]) -> None:
        self.store, self.prefixes = store, prefixes
        self.rows = dict.fromkeys(prefixes, 0)
        self.get, self.scan = store.get, store.scan
        store.get, store.scan = self._get, self._scan

    def _count(self, key: bytes) -> None:
        for name, prefix in self.prefixes.items():
            if key.startswith(prefix):
                self.rows[name] += 1

    async def _get(self, key):
        value = await self.get(key)
        if value is not None:
            self._count(key)
        return value

    async def _scan(self, **kwargs):
        async for key, value in self.scan(**kwargs):
            self._count(key)
            yield key, value

    def reset(self) -> None:
        self.rows = dict.fromkeys(self.prefixes, 0)


def _lane(engine):
    return next(h.actor.lane for h in engine._ctx.supervisor._handles.values() if h.actor is not None)


async def _rows_for_one_more(clock, history: int, turn, cache: int, prefixes, count) -> dict[str, int]:
    """The rows read under ``prefixes(tables)`` (name -> key prefix) while ``turn(history)`` is
    derived after the turns ``turn(0)`` .. ``turn(history - 1)``, an hour apart, under a cache of
    ``cache`` records; each turn made one record of the pair, which ``count(engine)`` counts."""
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", derived_cache_records=cache)
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config) as engine:
        for i in range(history):
            clock.advance(60)
            await engine.experience(turn(i), wait="consolidated")
        counting = Counting(engine._ctx.store, prefixes(_lane(engine).work.tables))
        clock.advance(60)
        result = await engine.experience(turn(history), wait="consolidated")
        assert result.status == "consolidated"
        rows = dict(counting.rows)
        assert await count(engine) == history + 1
        return rows


async def _fact_rows_for_one_more(clock, history: int) -> dict[str, int]:
    """The rows of facts and of the fact index read while one more move is derived, after
    ``history`` moves (each supersedes the last: one pair, ``history`` facts, one current)."""

    async def facts(engine) -> int:  # every move: a fact of the pair
        found = await engine.facts(SCOPE, include_superseded=True, limit=1000)
        return len({f["id"] for f in found["items"]})

    return await _rows_for_one_more(clock, history, move, 2,
                                    lambda t: {"facts": t.facts.prefix, "index": t.fact_index.prefix}, facts)  # fmt: skip


async def test_one_more_fact_reads_the_same_rows_however_long_its_pair(clock):
    """Under a cache of two records (trimmed after every batch) a pair's current list outlives
    its decoded facts: one more supersession reads the current fact by id, not the pair's
    history (it read every superseded fact of the pair before)."""
    short = await _fact_rows_for_one_more(clock.__class__("2026-05-13T15:42:09Z"), 6)
    long = await _fact_rows_for_one_more(clock.__class__("2026-05-13T15:42:09Z"), 40)
    assert short == long
    assert long["facts"] < 6  # the current fact (and the new one's reads), not 40


@pytest.mark.parametrize("rows_per_predicate", [1, 50])
async def test_a_subjects_predicates_take_one_seek_each(rows_per_predicate):
    """``Table.parts``: the distinct predicates under a subject in ``FI``, one row read per
    predicate however many facts each holds."""
    async with cortexdb.open_engine("memory", id_seed=7) as engine:
        store = engine._ctx.store
        tables = Partition(store, SCOPE, None)
        ops = [tables.fact_index.put_op(("ent_a", predicate, f"fact_{predicate}_{i:03}"), True)
               for predicate in ("age", "lives_in", "works_at") for i in range(rows_per_predicate)]  # fmt: skip
        ops.append(tables.fact_index.put_op(("ent_b", "likes", "fact_x"), True))
        await tables.write(ops)
        counting = Counting(store, {"index": tables.fact_index.prefix})
        assert await tables.fact_index.parts(("ent_a",)) == ["age", "lives_in", "works_at"]
        assert counting.rows["index"] == 3
        assert await tables.fact_index.parts(("ent_c",)) == []


def like(i: int) -> dict:
    """The i-th thing liked, an hour after the one before (a multi-valued pair: they pile up)."""
    return envelope(f"I like {town(i).lower()}.", observed_at=f"2026-05-{1 + i // 24:02d}T{i % 24:02d}:00:00Z")


async def _belief_rows_for_one_more(clock, history: int) -> dict[str, int]:
    """The rows of beliefs and claims read while one more like is derived, after ``history``
    likes of different things (one pair, ``history`` current facts and beliefs), under a cache
    of eight records: the pair's other claims are neither revised nor read."""

    async def beliefs(engine) -> int:  # every thing liked: a belief of the pair
        return len((await engine.beliefs(SCOPE, limit=1000))["items"])

    return await _rows_for_one_more(clock, history, like, 8,
                                    lambda t: {"beliefs": t.beliefs.prefix, "claims": t.belief_claims.prefix}, beliefs)  # fmt: skip


async def test_one_more_like_reads_the_same_beliefs_however_many_its_pair_holds(clock):
    """A multi-valued pair whose claims are settled: one more object revises its own claim only,
    and knows from the subject's summary that the others are settled without reading them (it
    read and revised every claim of the pair once their beliefs had left the cache)."""
    short = await _belief_rows_for_one_more(clock.__class__("2026-05-13T15:42:09Z"), 6)
    long = await _belief_rows_for_one_more(clock.__class__("2026-05-13T15:42:09Z"), 40)
    assert short == long


async def test_the_object_keys_of_superseded_facts_do_not_pile_up(clock):
    """Every fact made is keyed (``pair_keys``), and a fact superseded is never keyed again: once
    such keys outnumber the current ones by more than the cache's bound, a trim drops them (they
    used to stay until 16 × that bound a scope: about 250 bytes a write in a long soak)."""
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", derived_cache_records=8)
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config) as engine:
        for i in range(40):
            clock.advance(60)
            await engine.experience(move(i), wait="consolidated")
        state = _lane(engine).state
        current = sum(map(len, state.current.values()))
        facts = await engine.facts(SCOPE, include_superseded=True, limit=1000)
        assert len(facts["items"]) >= 40 and current >= 1  # every move made a fact; one is current
        assert len(state.fact_keys.keys) <= 2 * current + 8
        clock.advance(60)  # and a move after the drop still resolves against the current fact
        await engine.experience(move(40), wait="consolidated")
        now = await engine.facts(SCOPE, limit=1000)
        assert [f["object"]["name"] for f in now["items"] if f["predicate"] == "lives_in"] == [town(40)]
