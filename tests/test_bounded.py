"""Bounded work per request: the event text limit, the derived-records limit, passages of long
texts, derivation off the event loop, and cancellation leaving no trace.  Engine tests run on
the memory and the LevelDB backend."""

import json
import signal
import threading

import pytest
import trio
import trio.testing

import cortexdb
from cortexdb import EngineConfig, PayloadTooLarge
from cortexdb.engine.actors import workers as worker_start
from cortexdb.engine.actors.workers import OFF_LOOP_CHARS
from cortexdb.engine.derive.intake import select
from cortexdb.engine.derive.rules import RuleExtractor
from cortexdb.engine.limits import check_event_size
from cortexdb.engine.retrieve import passages
from cortexdb.engine.retrieve.embedders import HashEmbedder
from cortexdb.engine.spi.extractor import CandidateFact, Extraction, TermRef
from cortexdb.server.settings import ServerSettings

from .conftest import envelope

SCOPE = "org:acme/user:alice"
NEEDLE = "The vault access code for the Zephyr project is 7421."


def config(**overrides):
    return EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", **overrides)


def long_text(sentences: int, needle_at: int | None = None) -> str:
    """Paragraphs of plain sentences (a few facts among them), the needle in one of them."""
    words = ["amber", "basil", "cedar", "delta", "ember", "flint", "grove", "hazel", "iris", "jade"]
    out = []
    for i in range(sentences):
        if i == needle_at:
            out.append(NEEDLE + " ")
        out.append(
            f"The {words[i % 10]} report number {i} talks about the {words[(i // 10) % 10]} garden. "
        )
        if i % 6 == 5:
            out.append("\n\n")
    return "".join(out)


def document(text: str, **extra):
    body = {"scope": SCOPE, "modality": "document", "content": {"kind": "text", "text": text},
            "context": {"observed_at": "2026-05-13T15:42:00Z"}}  # fmt: skip
    body.update(extra)
    return body


async def lifecycle_payload(engine, event_id: str, stage: str) -> dict:
    records = await engine.lifecycle(event_id=event_id)
    return next(r["payload"] for r in records if r["stage"] == stage)


# -- the event text limit ------------------------------------------------------------------------
def test_the_default_text_limit_holds_the_envelopes_largest_ascii_text():
    limit = EngineConfig().max_event_text_bytes
    assert limit == 1_048_576
    check_event_size({"content": {"kind": "text", "text": "a" * 1_000_000}}, limit)
    with pytest.raises(PayloadTooLarge) as info:
        check_event_size({"content": {"kind": "text", "text": "é" * 600_000}}, limit)
    assert info.value.details == {"field": "content.text", "limit": limit, "size": 1_200_000}
    assert info.value.http_status == 413 and info.value.error_code == "PAYLOAD_TOO_LARGE"


async def test_an_oversize_text_is_refused_before_anything_is_written(engine_factory):
    async with engine_factory(config=config(max_event_text_bytes=1000)) as engine:
        await engine.experience(envelope("a" * 1000), wait="captured")  # exactly the limit: fine
        offset = engine.wal_offset
        cases = [
            (envelope("a" * 1001), "content.text", 1001),
            (envelope("é" * 501), "content.text", 1002),  # 501 characters, 1002 bytes of UTF-8
            ({**envelope(), "content": {"kind": "json", "data": {"notes": "x" * 1000}}}, "content.data", 1012),
            ({**envelope(), "content": {"kind": "triple", "subject": "s", "predicate": "p", "object": "o" * 2000}},
             "content.object", 2000),
        ]  # fmt: skip
        for body, field, size in cases:
            with pytest.raises(PayloadTooLarge) as info:
                await engine.experience(body, wait="consolidated")
            assert info.value.details == {"field": field, "limit": 1000, "size": size}
        with pytest.raises(PayloadTooLarge) as info:
            await engine.experience_bulk(
                {
                    "scope": SCOPE,
                    "items": [envelope("fine"), envelope("b" * 1500), envelope("fine too")],
                }
            )
        assert info.value.details == {
            "field": "items[1].content.text",
            "limit": 1000,
            "size": 1500,
            "item": 1,
        }
        assert engine.wal_offset == offset  # nothing of any refused write was captured
        assert len((await engine.events(SCOPE))["items"]) == 1


async def test_the_limits_come_from_the_server_environment():
    settings = ServerSettings.from_env(
        {"CORTEX_MAX_EVENT_TEXT_BYTES": "4096", "CORTEX_MAX_DERIVED_PER_EVENT": "32"}
    )
    assert (settings.max_event_text_bytes, settings.max_derived_per_event) == (4096, 32)
    assert ServerSettings.from_env({}).max_event_text_bytes == EngineConfig().max_event_text_bytes
    with pytest.raises(ValueError):
        ServerSettings.from_env({"CORTEX_MAX_DERIVED_PER_EVENT": "lots"})
    assert (
        ServerSettings.from_env({}).derivation_workers == "process"
    )  # the server's main is guarded
    assert (
        ServerSettings.from_env({"CORTEX_DERIVATION_WORKERS": "thread"}).derivation_workers
        == "thread"
    )
    with pytest.raises(ValueError):
        ServerSettings.from_env({"CORTEX_DERIVATION_WORKERS": "fibers"})


async def test_an_oversize_text_over_http_is_413_with_the_envelope(tmp_path):
    from .server_support import body, server

    async with server(tmp_path) as h:
        response, data = await h.call("POST", "/v1/experience", json=body("é" * 600_000))
        assert response.status_code == 413
        assert data["error_code"] == "PAYLOAD_TOO_LARGE" and data["retriable"] is False
        assert data["details"] == {"field": "content.text", "limit": 1_048_576, "size": 1_200_000}
        assert (await h.engine.events("org:acme/user:alice"))["items"] == []


# -- the derived-records limit -------------------------------------------------------------------
def test_selection_counts_facts_and_the_entities_they_name():
    def fact(subject, obj, confidence=0.9):
        return CandidateFact(subject=TermRef(subject), predicate="knows", object_value=TermRef(obj),
                             datatype="entity", confidence=confidence, pattern="test")  # fmt: skip

    extraction = Extraction(
        facts=(
            fact("Ann", "Bob"),
            fact("Ann", "Cy", confidence=0.1),
            fact("Bob", "Ann"),
            fact("Dee", "Eve"),
        ),
        entities=(TermRef("Ann"), TermRef("Fay"), TermRef("Gus")),
    )
    alias = str.casefold
    selection = select([extraction], limit=5, floor=0.5, want_facts=True, want_entities=True,
                       alias=lambda term: alias(term.name))  # fmt: skip
    # Ann->Bob costs 3 (a fact, two new names), the below-floor one nothing, Bob->Ann 1: 4 used;
    # Dee->Eve would cost 3: it and everything after it is not derived, and counted
    kinds = [
        (kind, item.object_value.name if kind == "fact" else item["reason"])
        for kind, item in selection.steps
    ]
    assert kinds == [("fact", "Bob"), ("intake", "below_confidence_floor"), ("fact", "Ann")]
    assert [t.name for t in selection.entities] == []  # Ann is counted, but the limit came first
    assert (selection.facts_over, selection.entities_over) == (1, 2)
    assert selection.summary(5) == [{"status": "rejected", "reason": "derived_records_limit", "limit": 5,
                                     "count": 3, "facts": 1, "entities": 2}]  # fmt: skip


async def test_output_beyond_the_derived_limit_is_reported_not_derived(engine_factory):
    text = " ".join(f"Person{i} Smith lives in Town{i} Ville." for i in range(40))
    async with engine_factory(config=config(max_derived_per_event=10)) as engine:
        done = await engine.experience(envelope(text), wait="consolidated")
        payload = await lifecycle_payload(engine, done.event_id, "extracted")
        assert payload["derived"]["facts"] + payload["derived"]["entities"] <= 10
        limited = payload["intake"][-1]
        assert limited["status"] == "rejected" and limited["reason"] == "derived_records_limit"
        assert (
            limited["limit"] == 10
            and limited["count"] == limited["facts"] + limited["entities"] > 0
        )
        assert payload["derived_records_limit"]["facts_not_derived"] == limited["facts"]
        view = await engine.memory_event(done.event_id)
        assert view["derived_records_limit"]["limit"] == 10
        facts = (await engine.facts(SCOPE, limit=100))["items"]
        assert 0 < len(facts) <= 10
        small = await engine.experience(envelope("I live in Paris."), wait="consolidated")
        payload = await lifecycle_payload(engine, small.event_id, "extracted")
        assert "derived_records_limit" not in payload
        assert all(item.get("reason") != "derived_records_limit" for item in payload["intake"])


# -- passages ------------------------------------------------------------------------------------
def test_passages_cover_the_text_at_paragraph_and_sentence_ends():
    text = long_text(200)
    spans = passages.split(text, 1200)
    assert len(spans) > 5
    previous_end = 0
    for start, end in spans:
        assert 0 < end - start <= 1200 and start >= previous_end
        assert text[previous_end:start].strip() == ""  # only white space is left out
        assert text[end - 1] == "."  # every cut falls at a sentence end here
        previous_end = end
    assert text[previous_end:].strip() == ""
    assert passages.split("short text", 1200) == [(0, 10)]
    unbroken = "x" * 5000  # no white space anywhere: hard cuts
    assert passages.split(unbroken, 1200) == [
        (0, 1200),
        (1200, 2400),
        (2400, 3600),
        (3600, 4800),
        (4800, 5000),
    ]
    assert passages.parse_passage_id(passages.passage_id("evt_1", 3)) == ("evt_1", 3)
    assert passages.parse_passage_id("evt_1") == ("evt_1", None)


async def test_a_long_text_is_found_by_its_passage_within_a_small_budget(engine):
    text = long_text(400, needle_at=250)
    done = await engine.experience(document(text), wait="consolidated")
    await engine.experience(
        envelope("I like tea."), wait="consolidated"
    )  # a short event: unchanged
    view = await engine.memory_event(done.event_id)
    assert view["passages"] == len(passages.split(text, 1200))
    pack = await engine.recall(  # the events: the context block then states them
        {"scope": SCOPE, "query": "Zephyr vault access code", "include": ["events"], "budgets": {"max_tokens": 500}}
    )
    items = pack["layers"]["events"]
    assert [i["id"] for i in items].count(done.event_id) == 1  # its one best passage (and the
    item = next(i for i in items if i["id"] == done.event_id)  # short event fits the budget too)
    assert item["content_truncated"] is True
    assert NEEDLE in item["content"]["text"] and len(item["content"]["text"]) <= 1200
    start, end = item["passage"]["char_start"], item["passage"]["char_end"]
    assert (
        text[start:end] == item["content"]["text"] and item["passage"]["count"] == view["passages"]
    )
    knapsack = next(p for p in pack["provenance"]["trail"] if p["phase"] == "knapsack")
    assert 0 < knapsack["tokens_used"] <= 500
    assert NEEDLE in pack["context_block"]
    raw = await engine.recall({"scope": SCOPE, "view": "raw", "query": "Zephyr vault access code"})
    assert all(len(i["content"]["text"]) <= 1200 for i in raw["layers"]["events"])  # no whole book
    # many passages match "Zephyr": the pack still has one item per event (its best passage)
    wide = await engine.recall({"scope": SCOPE, "view": "granular", "query": "Zephyr vault"})
    ids = [i["id"] for i in wide["layers"]["events"]]
    assert len(ids) == len(set(ids)) and done.event_id in ids
    short = await engine.recall({"scope": SCOPE, "query": "like tea"})
    tea = next(i for i in short["layers"]["events"] if i["content"]["text"] == "I like tea.")
    assert "passage" not in tea and "content_truncated" not in tea
    assert (await engine.get_event(SCOPE, done.event_id))["content"]["text"] == text  # lossless


async def test_passages_are_rebuilt_and_removed_with_their_event(engine):
    text = long_text(300, needle_at=120)
    done = await engine.experience(document(text), wait="consolidated")
    await engine.flush(SCOPE, seal=True)
    count = (await engine.memory_event(done.event_id))["passages"]
    await engine.rebuild(SCOPE)
    pipeline = engine._supervisor.actor(SCOPE).lane.state
    ids = [passages.passage_id(done.event_id, i) for i in range(count)]
    assert all(i in pipeline.text_index and i in pipeline.vector_index for i in ids)
    assert done.event_id not in pipeline.text_index  # the whole text is not a document
    pack = await engine.recall(
        {"scope": SCOPE, "query": "Zephyr vault access code", "budgets": {"max_tokens": 500}}
    )
    assert NEEDLE in pack["layers"]["events"][0]["content"]["text"]
    await engine.cancel(done.event_id)
    assert not any(i in pipeline.text_index or i in pipeline.vector_index for i in ids)
    pack = await engine.recall({"scope": SCOPE, "query": "Zephyr vault access code"})
    assert pack["layers"]["events"] == []


async def test_passages_are_restored_after_a_restart(tmp_path, clock):
    """LevelDB only: the memory backend does not outlive its engine by design."""

    def reopen():
        return cortexdb.open_engine(
            "leveldb", path=str(tmp_path / "data"), clock=clock, id_seed=5, config=config()
        )

    text = long_text(300, needle_at=200)
    async with reopen() as engine:
        done = await engine.experience(document(text), wait="consolidated")
    async with reopen() as engine:
        await engine.flush(SCOPE)
        pipeline = engine._supervisor.actor(SCOPE).lane.state
        assert passages.passage_id(done.event_id, 0) in pipeline.text_index
        assert passages.passage_id(done.event_id, 0) in pipeline.vector_index  # its stored vector
        pack = await engine.recall(
            {"scope": SCOPE, "query": "Zephyr vault access code", "budgets": {"max_tokens": 500}}
        )
        assert NEEDLE in pack["layers"]["events"][0]["content"]["text"]


# -- off the event loop --------------------------------------------------------------------------
class GatedExtractor:
    """The rule extractor, held at a gate in worker threads: there it reports being entered (through
    trio.from_thread, which only works from a Trio worker thread) and waits for release.  On the
    event loop's thread (a short text) it just extracts."""

    name = "gated"

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = threading.Event()
        self.rules = RuleExtractor()

    def extract(self, context):
        if threading.current_thread() is threading.main_thread():
            return self.rules.extract(context)
        trio.from_thread.run_sync(self.entered.set)
        self.release.wait(timeout=60)
        return self.rules.extract(context)


class RecordingEmbedder(HashEmbedder):
    """The hash embedder, recording whether each batch ran on the event loop's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, bool]] = []

    def embed(self, texts):
        self.calls.append(
            (
                len(texts),
                sum(map(len, texts)),
                threading.current_thread() is threading.main_thread(),
            )
        )
        return super().embed(texts)


async def test_a_long_text_is_derived_while_other_requests_are_served(engine_factory):
    gate = GatedExtractor()
    embedder = RecordingEmbedder()
    async with engine_factory(extractor=gate, embedder=embedder) as engine:
        text = long_text(400, needle_at=10)
        assert len(text) > OFF_LOOP_CHARS
        big = await engine.experience(document(text))
        await gate.entered.wait()  # extraction is running, held, in a worker thread
        other = "org:acme/user:bob"
        await engine.experience(envelope("hello", scope=other), wait="captured")
        await engine.recall({"scope": other, "query": "hello"})
        assert (await engine.events(other))["items"][0]["content"]["text"] == "hello"
        assert (await engine.memory_event(big.event_id))["stages_completed"] == ["captured"]
        gate.release.set()
        await engine.flush(SCOPE)
        view = await engine.memory_event(big.event_id)
        assert view["stages_completed"][:4] == ["captured", "extracted", "indexed", "consolidated"]
        assert view["errors"] == []
        # the passages were embedded off the loop; what ran on it was small
        assert sum(count for count, _, on_loop in embedder.calls if not on_loop) >= view["passages"]
        assert all(size <= OFF_LOOP_CHARS for _, size, on_loop in embedder.calls if on_loop)


# -- cancellation --------------------------------------------------------------------------------
SECRET = "I live in Zanzibar and I really love quokka stew."
OTHERS = ["I work at Acme.", "My favorite color is teal.", "The meeting ran long but it went well."]


EVERY_VERSION = {"valid_during": "..", "recorded_during": ".."}


async def assert_no_trace(engine, event_id: str) -> None:
    """The cancelled event's text and id appear in no layer read and in no recall view."""
    layers = {
        "events": await engine.events(SCOPE, limit=1000),
        "episodes": await engine.episodes(SCOPE, limit=1000),
        # every version of every record (docs/time.md)
        "facts": await engine.facts(SCOPE, include_superseded=True, limit=1000, **EVERY_VERSION),
        "beliefs": await engine.beliefs(
            SCOPE, include_superseded=True, include_deprecated=True, limit=1000, **EVERY_VERSION
        ),
    }
    for name, page in layers.items():
        dumped = json.dumps(page)
        assert "Zanzibar" not in dumped and "quokka" not in dumped, name
        assert event_id not in dumped, name
    for view in ("raw", "granular", "holistic", "structured"):
        for query in ("Zanzibar quokka stew", ""):
            pack = await engine.recall(
                {"scope": SCOPE, "view": view, "query": query, "diagnostics": "full"}
            )
            dumped = json.dumps(pack)
            assert "Zanzibar" not in dumped and "quokka" not in dumped and event_id not in dumped, (
                view
            )
    pipeline = engine._supervisor.actor(SCOPE).lane.state
    assert event_id not in pipeline.text_index and event_id not in pipeline.vector_index
    direct = await engine.get_event(SCOPE, event_id)  # still directly addressable (§8.9.5)
    assert direct["excluded_from_recall"] is True and direct["content"]["text"] == SECRET


@pytest.mark.parametrize("position", ["first", "middle", "last"])
async def test_a_cancel_after_consolidation_leaves_no_trace(engine, position):
    texts = list(OTHERS)
    texts.insert({"first": 0, "middle": 1, "last": 3}[position], SECRET)
    ids = {}
    for i, text in enumerate(texts):
        done = await engine.experience(
            envelope(text, observed_at=f"2026-05-13T15:4{i}:00Z"), wait="consolidated"
        )
        ids[text] = done.event_id
    await engine.flush(SCOPE, seal=position == "last")  # an open episode and a sealed one
    await engine.cancel(ids[SECRET])
    await engine.flush(SCOPE, seal=True)
    await assert_no_trace(engine, ids[SECRET])
    episodes = (await engine.episodes(SCOPE))["items"]
    assert [e["events"] for e in episodes] == [[ids[t] for t in texts if t != SECRET]]
    episode = episodes[0]
    assert (
        episode["causal_chain"][0]["role"] == "trigger"
        and episode["causal_chain"][-1]["role"] == "outcome"
    )
    assert episode["summary"].startswith("3 events") and episode["opening"] == next(
        t for t in texts if t != SECRET
    )


async def test_an_episode_of_only_cancelled_events_is_excluded(engine):
    done = await engine.experience(envelope(SECRET), wait="consolidated")
    await engine.flush(SCOPE)
    episode_id = (await engine.memory_event(done.event_id))["derives"][-1]
    await engine.cancel(done.event_id)
    assert (await engine.episodes(SCOPE))["items"] == []
    assert (await engine.get_episode(SCOPE, episode_id))["excluded_from_recall"] is True
    await assert_no_trace(engine, done.event_id)
    after = await engine.experience(envelope("I work at Acme."), wait="consolidated")
    await engine.flush(SCOPE, seal=True)
    episodes = (await engine.episodes(SCOPE))["items"]
    assert [e["events"] for e in episodes] == [
        [after.event_id]
    ]  # a new episode, not the emptied one


async def test_an_event_cancelled_before_its_stages_ran_never_reaches_an_episode(engine_factory):
    gate = GatedExtractor()
    async with engine_factory(extractor=gate) as engine:
        busy = await engine.experience(document(long_text(400)))
        await gate.entered.wait()  # the lane is held on the long text: the next write queues
        secret = await engine.experience(envelope(SECRET))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.cancel, secret.event_id)
            await trio.testing.wait_all_tasks_blocked()  # the cancel is queued behind the lane
            gate.release.set()
        await engine.flush(SCOPE, seal=True)
        view = await engine.memory_event(secret.event_id)
        assert view["stages_completed"] == ["captured"] and view["excluded_from_recall"] is True
        assert view["stages_cancelled"] == ["extracted", "indexed", "consolidated", "compressed"]
        episodes = (await engine.episodes(SCOPE))["items"]
        assert [e["events"] for e in episodes] == [[busy.event_id]]
        await assert_no_trace(engine, secret.event_id)


@pytest.mark.inline_storage  # wait_all_tasks_blocked must mean the cancel is waiting on the lane
async def test_a_cancel_during_its_own_derivation_stops_it_between_stages(engine_factory):
    gate = GatedExtractor()
    async with engine_factory(extractor=gate) as engine:
        text = long_text(300) + " " + SECRET
        big = await engine.experience(document(text))
        await gate.entered.wait()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.cancel, big.event_id)
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        await engine.flush(SCOPE, seal=True)
        view = await engine.memory_event(big.event_id)
        assert view["stages_completed"] == ["captured", "extracted"]
        assert view["stages_cancelled"] == ["indexed", "consolidated", "compressed"]
        assert (await engine.episodes(SCOPE))["items"] == []
        pipeline = engine._supervisor.actor(SCOPE).lane.state
        assert passages.passage_id(big.event_id, 0) not in pipeline.text_index
        assert (await engine.facts(SCOPE))["items"] == []


async def test_a_cancel_reaches_the_scope_the_event_was_consolidated_into(engine):
    team = "org:acme"
    done = await engine.experience(
        envelope(SECRET, directives={"consolidate_into": team}), wait="consolidated"
    )
    assert (await engine.facts(team))["items"] and (await engine.beliefs(team))["items"]
    await engine.cancel(done.event_id)
    await engine.flush(SCOPE)
    await engine.flush(team)
    assert (await engine.facts(team))["items"] == []
    assert (await engine.beliefs(team))["items"] == []
    pack = await engine.recall({"scope": team, "query": "Zanzibar quokka stew"})
    assert "Zanzibar" not in json.dumps(pack)


async def derive_in(engine_factory, workers: str):
    """A long text derived with the given workers: what the layers and a recall show, ids aside."""
    async with engine_factory(config=config(derivation_workers=workers)) as engine:
        text = long_text(400, needle_at=300) + " I live in Lisbon. Kim Vale works at Acme Corp."
        done = await engine.experience(document(text), wait="consolidated")
        await engine.flush(SCOPE, seal=True)
        facts = sorted((f["predicate"], json.dumps(f["object"], sort_keys=True))
                       for f in (await engine.facts(SCOPE, limit=1000))["items"])  # fmt: skip
        pack = await engine.recall(
            {"scope": SCOPE, "query": "Zephyr vault access code", "budgets": {"max_tokens": 500}}
        )
        view = await engine.memory_event(done.event_id)
        return (
            engine._ctx.cpu_workers,
            facts,
            view["passages"],
            [i["passage"] for i in pack["layers"]["events"]],
        )


async def test_worker_processes_derive_exactly_what_threads_do(engine_factory):
    used, *in_processes = await derive_in(engine_factory, "process")
    assert used == "process"  # the rule extractor and the hash embedder went to a process
    threads, *in_threads = await derive_in(engine_factory, "thread")
    assert threads == "thread"
    assert (
        in_processes == in_threads and in_processes[0]
    )  # facts, passages and the recalled passage


async def test_an_extractor_a_process_cannot_take_falls_back_to_threads(engine_factory):
    gate = GatedExtractor()  # holds locks: it cannot be pickled
    gate.release.set()
    async with engine_factory(
        extractor=gate, config=config(derivation_workers="process")
    ) as engine:
        done = await engine.experience(document(long_text(400, needle_at=5)), wait="consolidated")
        assert engine._ctx.cpu_workers == "thread"
        view = await engine.memory_event(done.event_id)
        assert view["errors"] == [] and view["passages"] > 1


@pytest.mark.skipif(not hasattr(signal, "pause"), reason="signal.pause is POSIX's")
async def test_a_worker_process_that_never_answers_falls_back_to_threads(engine_factory, monkeypatch):
    """A program whose main module starts work at import spawns workers that never answer (here:
    a worker whose start-up waits for a signal): derivation must not wait on them for ever."""
    monkeypatch.setattr(worker_start, "lower_priority", signal.pause)  # the workers' start-up
    settings = config(derivation_workers="process", derivation_worker_start_seconds=1.0)
    async with engine_factory(config=settings) as engine:
        done = await engine.experience(document(long_text(400, needle_at=5)), wait="consolidated")
        assert (engine._ctx.cpu_workers, engine._ctx.cpu_started) == ("thread", False)
        view = await engine.memory_event(done.event_id)
        assert view["errors"] == [] and view["passages"] > 1


def probing_context(seconds: float):
    """What ``workers.off_loop`` reads of an engine's context, with worker processes on."""
    import types

    return types.SimpleNamespace(
        cpu_workers="process", cpu_processes=None, cpu_limiter=trio.CapacityLimiter(1),
        cpu_started=False, cpu_probe=None,
        config=types.SimpleNamespace(derivation_worker_start_seconds=seconds),
    )  # fmt: skip


@pytest.mark.skipif(not hasattr(signal, "pause"), reason="signal.pause is POSIX's")
async def test_calls_waiting_on_a_silent_worker_share_one_probe_and_no_shared_thread(monkeypatch):
    """Forty-five calls while the workers never answer: one probe, whose deadline holds none of
    trio's shared thread tokens (other work in threads, LevelDB's among it, goes on; before, each
    call's probe held one and 40 used them all), and then every call runs in a thread."""
    import os

    import trio_parallel

    probes = []
    real_probe = worker_start._probe

    async def counted(ctx, seconds):
        probes.append(seconds)
        await real_probe(ctx, seconds)

    monkeypatch.setattr(worker_start, "_probe", counted)
    ctx = probing_context(2.0)
    results = []

    async def one():
        results.append(await worker_start.off_loop(ctx, os.getpid))

    async with trio_parallel.open_worker_context(init=signal.pause) as processes:
        ctx.cpu_processes = processes
        async with trio.open_nursery() as nursery:
            for _ in range(45):
                nursery.start_soon(one)
            await trio.testing.wait_all_tasks_blocked()
            assert ctx.cpu_probe is not None and probes == [2.0]
            # trio-parallel's start of its one worker holds a shared token; the probe's watch none
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens <= 1
    assert probes == [2.0] and ctx.cpu_workers == "thread" and not ctx.cpu_started
    assert results == [os.getpid()] * 45  # run in this process's threads


async def test_a_start_deadline_past_what_a_thread_can_wait_still_probes():
    """``inf`` (or anything past ``threading.TIMEOUT_MAX``) is a deadline, not a fallback."""
    import os

    import trio_parallel

    ctx = probing_context(float("inf"))
    async with trio_parallel.open_worker_context() as processes:
        ctx.cpu_processes = processes
        pid = await worker_start.off_loop(ctx, os.getpid)
    assert (ctx.cpu_workers, ctx.cpu_started) == ("process", True) and pid != os.getpid()
