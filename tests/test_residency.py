"""Open scopes stay bounded: idle scopes are released (actor stopped, indexes dropped) after the
idle timeout and least recently used first over the memory budget; the next request reopens a
scope from storage with the same recall; busy scopes, held scopes and scopes with derivation
still to do stay open; a request arriving during a release waits for it and is served.

Idle time is advanced through Trio's mock clock (``mock_clock.jump``), never slept: the
supervisor's sweep is a Trio timer (``release_check_interval``).
"""

import attrs
import numpy as np
import pytest
import trio
import trio.testing

from cortexdb import EngineConfig
from cortexdb.engine.actors import lane as lane_module
from cortexdb.engine.actors.residency import OpenScope, to_release
from cortexdb.engine.actors.scope_actor import ScopeActor
from cortexdb.engine.retrieve.embedders import HashEmbedder

from .conftest import envelope

IDLE = 300.0
CHECK = 5.0


def config(**overrides) -> EngineConfig:
    # derivation_defer 0: derivation never waits on a timer, so a frozen mock clock is enough
    values = {"default_caller": "user:alice", "episode_idle_check": 1e9, "derivation_defer": 0.0,
              "idle_timeout": IDLE, "release_check_interval": CHECK}  # fmt: skip
    values.update(overrides)
    return EngineConfig(**values)


def scope_of(number: int) -> str:
    return f"org:acme/user:u{number:02d}"


async def write_scopes(engine, count: int, events: int) -> list[str]:
    scopes = [scope_of(n) for n in range(count)]
    for number, scope in enumerate(scopes):
        for i in range(events):
            text = f"User {number} owns {i + 2} bicycles and likes {['tea', 'jazz', 'chess'][i % 3]} number {i}."
            await engine.experience(envelope(text, scope=scope), wait="consolidated")
    await engine.flush()
    return scopes


async def ranked(engine, scope: str, query: str, **request) -> dict:
    """What a recall found: per layer, each item's id and score, and the context block."""
    pack = await engine.recall({"scope": scope, "query": query, **request})
    layers = {layer: [(item["id"], item["score"]) for item in items]
              for layer, items in pack["layers"].items()}  # fmt: skip
    return {"layers": layers, "context": pack["context_block"]}


async def let_time_pass(mock_clock, seconds: float) -> None:
    mock_clock.jump(seconds)
    await trio.testing.wait_all_tasks_blocked()


# -- the choice (pure) -----------------------------------------------------------------------------
def test_the_choice_follows_its_table():
    scopes = [OpenScope("c", 20.0, 3, 100, True), OpenScope("a", 0.0, 1, 100, True),
              OpenScope("d", 30.0, 4, 100, True), OpenScope("b", 10.0, 2, 100, False)]  # fmt: skip
    # nothing over budget, nothing timed out
    assert to_release(scopes, now=31.0, idle_timeout=300.0, budget_bytes=1000) == []
    # over budget (400 > 250): least recently used idle first, until within; busy "b" skipped
    assert to_release(scopes, now=31.0, idle_timeout=300.0, budget_bytes=250) == ["a", "c"]
    # never the most recently used one, even far over budget
    assert to_release(scopes, now=31.0, idle_timeout=300.0, budget_bytes=1) == ["a", "c"]
    # the idle timeout releases every idle scope unused for that long, the newest too
    assert to_release(scopes, now=330.0, idle_timeout=300.0, budget_bytes=0) == ["a", "c", "d"]
    assert to_release(scopes, now=315.0, idle_timeout=300.0, budget_bytes=0) == ["a"]
    assert to_release([], now=0.0, idle_timeout=1.0, budget_bytes=1) == []


def test_the_estimate_counts_what_a_scope_holds():
    from cortexdb.engine.actors import residency
    from cortexdb.engine.retrieve.layered import LayeredTextIndex, LayeredVectorIndex

    class State:
        def __init__(self) -> None:
            self.text_index = LayeredTextIndex()
            self.vector_index = LayeredVectorIndex(384, segment_size=1000, trees=5, dtype="float16", chunk_rows=64)
            self.events, self.facts, self.beliefs, self.belief_by_id = {}, {}, {}, {}

    state = State()
    assert residency.scope_bytes(state) == residency.ACTOR_BYTES
    state.text_index.add("evt_1", "alice owns two bicycles")
    state.vector_index.add("evt_1", np.ones(384, dtype=np.float32))
    # the per-slot arrays' minimum (13 B a slot); four terms: document frequencies, the
    # vocabulary's recent terms (and its first offset) and the delta's postings arrays; the
    # delta's document and its four pairs (TextIndex.estimated_bytes)
    text = 1024 * 13 + 4 * (4 + 100 + 100) + 8 + 158 + 4 * 16  # 158: the document with its text hash
    vectors = 200 + 64 * (384 * 2 + 3)  # the id, the delta's first chunk of 64 float16 rows
    assert residency.scope_bytes(state, decoded_extra=2) == residency.ACTOR_BYTES + text + vectors + 2 * 1536
    from cortexdb.engine.actors.subject_beliefs import SubjectBeliefs

    state.subject_beliefs = SubjectBeliefs()  # the digests of subjects' live beliefs count too
    state.subject_beliefs.held = 3
    assert residency.scope_bytes(state) == residency.ACTOR_BYTES + text + vectors + 3 * residency.DIGEST_BYTES

    class Measured:  # an index that reports its own size is taken at its word
        def estimated_bytes(self) -> int:
            return 12345

    assert residency.vector_bytes(Measured()) == residency.text_bytes(Measured()) == 12345


# -- releasing ---------------------------------------------------------------------------------------
@pytest.mark.inline_storage
async def test_many_idle_scopes_are_released_and_reopen_with_the_same_recall(engine_factory, mock_clock):
    async with engine_factory(config=config()) as engine:
        scopes = await write_scopes(engine, 12, 4)
        before = {scope: await ranked(engine, scope, "how many bicycles, tea or jazz?") for scope in scopes}
        facts = (await engine.facts(scopes[3]))["items"]
        assert all(len(found["layers"]["events"]) == 4 for found in before.values())
        stats = engine.statistics()
        assert stats.actors == 12 and stats.releases == 0
        assert stats.memory_bytes == sum(s.memory_bytes for s in stats.scopes.values()) > 12 * 24 * 1024
        await let_time_pass(mock_clock, IDLE - CHECK)  # not idle long enough yet
        assert engine.statistics().actors == 12
        await let_time_pass(mock_clock, 2 * CHECK)
        stats = engine.statistics()
        assert stats.actors == 0 and stats.releases == 12 and stats.memory_bytes == 0
        for scope in scopes:  # each request reopens its scope, rebuilt from storage
            assert await ranked(engine, scope, "how many bicycles, tea or jazz?") == before[scope]
        stats = engine.statistics()
        assert stats.actors == 12 and stats.reopens == 12
        assert (await engine.facts(scopes[3]))["items"] == facts  # the derived layers are back
        assert (await engine.layer_counts(scopes[3]))["events"] == 4


@pytest.mark.inline_storage
async def test_the_budget_releases_least_recently_used_scopes_first(engine_factory, mock_clock):
    async with engine_factory(config=config(idle_timeout=1e9, scope_memory_budget_mb=0)) as engine:
        scopes = await write_scopes(engine, 10, 5)
        await ranked(engine, scopes[0], "bicycles")  # the first scope is now the most recently used
        stats = engine.statistics()
        sizes = [stats.scopes[scope].memory_bytes for scope in scopes]
        budget = (max(sizes) * 3.5) / 2**20  # room for three scopes or so, in MB
        assert stats.memory_bytes > budget * 2**20
        # the budget is read at each sweep: set it on the open engine (as set_recall_mode does)
        engine._ctx.config = attrs.evolve(engine._ctx.config, scope_memory_budget_mb=budget)
        await let_time_pass(mock_clock, CHECK)
        stats = engine.statistics()
        assert stats.memory_bytes <= stats.memory_budget_bytes == int(budget * 2**20)
        assert 3 <= stats.actors < 10 and stats.releases == 10 - stats.actors
        # what stayed open is what was used last: the first scope, then the last ones written
        order = scopes[1:] + scopes[:1]
        assert set(engine.statistics().scopes) == set(order[-stats.actors :])


@pytest.mark.inline_storage
async def test_one_scope_over_the_budget_stays_open(engine_factory, mock_clock):
    async with engine_factory(config=config(idle_timeout=1e9, scope_memory_budget_mb=0.001)) as engine:
        [scope] = await write_scopes(engine, 1, 3)
        await let_time_pass(mock_clock, CHECK)
        assert engine.statistics().actors == 1 and engine.statistics().releases == 0
        assert await engine.release(scope) is True  # asked explicitly, it goes
        assert engine.statistics().actors == 0


async def test_reopening_reuses_stored_vectors(engine_factory):
    """The next request rebuilds the indexes from storage: stored vectors are reloaded, nothing
    is embedded again (with small vector segments, sealed ones are rebuilt from them too)."""
    embedder = CountingEmbedder()
    engine_config = config(vector_segment_size=8)
    async with engine_factory(config=engine_config, embedder=embedder) as engine:
        [scope] = await write_scopes(engine, 1, 20)
        everything = {"budgets": {"max_tokens": 100_000, "per_layer_limits": {"events": 50}}}
        before = await ranked(engine, scope, "bicycles and chess", **everything)
        assert before["layers"]["events"] and engine.statistics().scopes[scope].memory_bytes > 0
        assert await engine.release(scope, drain=True) is True  # once its vector builds are done
        embedded = embedder.texts
        await engine.ping(scope)  # reopened: its indexes rebuilt before it answers
        assert embedder.texts == embedded
        after = await ranked(engine, scope, "bicycles and chess", **everything)
        # the same records (all of them: no cut among ties); a score may move by float16
        # rounding, as a vector in the exact delta (float16) may now be in a segment (float32)
        for layer, items in before["layers"].items():
            assert dict(after["layers"][layer]) == pytest.approx(dict(items), abs=2e-3)
        assert engine.statistics().reopens == 1


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


# -- what stays open -------------------------------------------------------------------------------
@pytest.mark.inline_storage
async def test_a_scope_with_derivation_to_do_is_not_released_until_it_is_done(engine_factory, mock_clock, monkeypatch):
    gate = trio.Event()
    extract, *rest = lane_module.RUNNERS

    async def gated_extract(*args):
        await gate.wait()
        await extract(*args)

    monkeypatch.setattr(lane_module, "RUNNERS", (gated_extract, *rest))
    scope = scope_of(1)
    async with engine_factory(config=config()) as engine:
        result = await engine.experience(envelope("I live in Oslo.", scope=scope), wait="captured")
        await let_time_pass(mock_clock, IDLE + CHECK)  # long past the idle timeout
        stats = engine.statistics()
        assert stats.actors == 1 and stats.releases == 0 and stats.scopes[scope].pipeline_queue == 0
        assert await engine.release(scope) is False  # mid-batch: nothing is let go
        gate.set()
        await engine.flush(scope)
        await let_time_pass(mock_clock, IDLE + CHECK)
        assert engine.statistics().actors == 0 and engine.statistics().releases == 1
        view = await engine.memory_event(result.event_id)
        assert view["stages_completed"][:4] == ["captured", "extracted", "indexed", "consolidated"]
        assert [f["object"]["name"] for f in (await engine.facts(scope))["items"]] == ["Oslo"]


@pytest.mark.inline_storage
async def test_a_held_scope_is_not_released(engine_factory, mock_clock):
    async with engine_factory(config=config()) as engine:
        [scope] = await write_scopes(engine, 1, 1)
        supervisor = engine._supervisor
        async with supervisor.hold(scope):
            await let_time_pass(mock_clock, IDLE + CHECK)
            assert engine.statistics().actors == 1
            assert await engine.release(scope) is False
        await let_time_pass(mock_clock, CHECK)
        assert engine.statistics().actors == 0 and engine.statistics().releases == 1


# -- races -------------------------------------------------------------------------------------------
@pytest.mark.inline_storage
async def test_requests_during_a_release_wait_for_it_and_are_served(engine_factory, monkeypatch):
    """A recall and a write sent while the scope's actor is stopping wait for it to be gone,
    reopen the scope (indexes rebuilt first) and are served: the recall finds what it found
    before, the write is derived and found."""
    stopping, finish = trio.Event(), trio.Event()
    original = ScopeActor.run

    async def slow_release(self):
        await original(self)
        if self.released and not finish.is_set():
            stopping.set()
            await finish.wait()  # the mailbox is closed, the actor not yet gone

    monkeypatch.setattr(ScopeActor, "run", slow_release)
    # the write's derivation starts once the recall is answered: which of the two the reopened
    # scope gets to first is the scheduler's choice, and a recall served after the write was
    # indexed finds the write too (every BM25 score moves with the document count)
    extract, *rest = lane_module.RUNNERS
    recalled: list[trio.Event] = []

    async def extract_after_the_recall(*args):
        for event in recalled:
            await event.wait()
        await extract(*args)

    monkeypatch.setattr(lane_module, "RUNNERS", (extract_after_the_recall, *rest))
    async with engine_factory(config=config()) as engine:
        [scope] = await write_scopes(engine, 1, 6)
        query = "how many bicycles, tea or jazz?"
        before = await ranked(engine, scope, query)
        outcome = {}
        recalled.append(trio.Event())

        async def recall():
            outcome["recall"] = await ranked(engine, scope, query)
            recalled[0].set()

        async def write():
            outcome["write"] = await engine.experience(
                envelope("I also own a red kayak.", scope=scope), wait="consolidated")

        async def release():
            outcome["released"] = await engine.release(scope)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(release)
            await stopping.wait()
            nursery.start_soon(recall)
            nursery.start_soon(write)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == {}  # both wait for the release
            finish.set()
        assert outcome["released"] is True and outcome["recall"] == before
        stats = engine.statistics()
        assert stats.releases == 1 and stats.reopens == 1 and stats.actors == 1
        kayak = await ranked(engine, scope, "red kayak")
        assert outcome["write"].event_id in [item for item, _ in kayak["layers"]["events"]]


@pytest.mark.inline_storage
async def test_a_message_behind_the_release_keeps_the_scope_open(engine_factory, monkeypatch):
    """The release is answered in mailbox order: a message already behind it means the scope
    is in use, so it stays open and the message is served by the same actor."""
    stalled, go = trio.Event(), trio.Event()
    original = ScopeActor._ping

    async def stall_once(self, message):
        if not go.is_set():
            stalled.set()
            await go.wait()
        await original(self, message)

    monkeypatch.setattr(ScopeActor, "_ping", stall_once)
    async with engine_factory(config=config()) as engine:
        [scope] = await write_scopes(engine, 1, 1)
        outcome = {}

        async def ping(name):
            outcome[name] = (await engine.ping(scope))["handled"]

        async def release():
            outcome["released"] = await engine.release(scope)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ping, "first")
            await stalled.wait()  # the actor is busy with the first ping
            nursery.start_soon(release)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ping, "behind")
            await trio.testing.wait_all_tasks_blocked()
            go.set()
        assert outcome["released"] is False
        assert engine.statistics().releases == 0 and engine.statistics().actors == 1
        assert outcome["behind"] > outcome["first"]  # the same actor served it


async def test_health_reports_residency(engine_factory):
    async with engine_factory(config=config()) as engine:
        await write_scopes(engine, 2, 1)
        stats = engine.statistics()
        assert stats.memory_budget_bytes == 1024 * 2**20
        assert stats.memory_bytes == sum(s.memory_bytes for s in stats.scopes.values()) > 0
        assert (stats.releases, stats.reopens) == (0, 0)


async def test_health_and_metrics_show_releases_reopens_and_memory(tmp_path):
    from .server_support import body, server

    async with server(tmp_path, engine_config={"scope_memory_budget_mb": 64.0}) as h:
        response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body("Alice lives in Paris."))
        assert response.status_code == 200
        assert await h.engine.release("org:acme/user:alice") is True
        response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body("Alice works at Acme."))
        _, health = await h.call("GET", "/v1/admin/health")
        response = await h.client.get("/v1/admin/metrics", headers=h.as_("user:alice"))
        metrics = (await response.get_data()).decode()
    engine = health["engine"]
    assert (engine["releases"], engine["reopens"], engine["actors"]) == (1, 1, 1)
    assert engine["memory_budget_bytes"] == 64 * 2**20 and engine["memory_bytes"] > 0
    for name in ("releases 1", "reopens 1", "memory_budget_bytes 67108864", "memory_bytes "):
        assert f"cortexdb_engine_{name}" in metrics, name


def test_the_server_settings_name_the_budget_and_the_timeout():
    from cortexdb.server.serve import config_of
    from cortexdb.server.settings import ServerSettings

    default = config_of(ServerSettings.from_env({}))
    assert (default.scope_memory_budget_mb, default.idle_timeout) == (1024.0, 300.0)
    env = {"CORTEX_SCOPE_MEMORY_BUDGET_MB": "256", "CORTEX_SCOPE_IDLE_TIMEOUT": "60"}
    chosen = config_of(ServerSettings.from_env(env))
    assert (chosen.scope_memory_budget_mb, chosen.idle_timeout) == (256.0, 60.0)
    with pytest.raises(ValueError, match="CORTEX_SCOPE_MEMORY_BUDGET_MB must be a number"):
        ServerSettings.from_env({"CORTEX_SCOPE_MEMORY_BUDGET_MB": "lots"})
    with pytest.raises(ValueError, match="scope_idle_timeout"):
        ServerSettings.from_env({"CORTEX_SCOPE_IDLE_TIMEOUT": "0"})
