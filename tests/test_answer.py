"""Answers and narratives in the engine (reference §8.4, §9.1, §10.2), on the memory backend: the
extractive answerer on fixed packs, citation modes (whole and streamed), ``Engine.answer`` and
``Engine.answer_stream`` end to end, ``use_pack_id`` reuse and expiry, idempotency, validation,
the ``llm.invoke`` check, narrative packs, and the ``openai_compatible`` provider in the engine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cortexdb
from cortexdb import EngineConfig, ManualClock, NotFound, PolicyDenied
from cortexdb.engine.llm import OpenAICompatibleLLM
from cortexdb.engine.llm.extractive import NO_SUPPORT, ExtractiveLLM
from cortexdb.engine.policy.hook import ALLOWED, Verdict
from cortexdb.engine.recall import citing
from cortexdb.engine.spi.llm import ANSWER, NARRATIVE, Passage, Prompt
from cortexdb.errors import IdempotencyConflict, InvalidAnswer, InvalidRecall, LLMUnavailable

from .llm_support import KEY, chat_server
from .test_recall import ALICE, seed

START = "2026-05-13T15:42:09Z"
PASSAGES = (
    Passage("[1]", "belief", "belief_1", "alice lives in Berlin (belief: supported, confidence 0.64)"),
    Passage("[2]", "fact", "fact_2", "alice lives in Berlin (from 2026-04-15)"),
    Passage("[3]", "event", "evt_3", "I moved to Berlin. The flat is near the river!", source="alice on 2026-04-15"),
    Passage("[4]", "event", "evt_4", "My favorite color is blue.", source="alice on 2026-03-02"),
    Passage("[5]", "episode", "ep_5", "Moving: 2 events. Began: I moved to Berlin."),
)


def ask(question: str, passages=PASSAGES, max_tokens: int = 500, task: str = ANSWER) -> Prompt:
    return Prompt(task, question, passages, max_tokens)


# -- the extractive answerer on fixed packs -----------------------------------------------------------
async def test_extractive_quotes_the_best_sentences_with_their_markers():
    llm = ExtractiveLLM()
    completion = await llm.complete(ask("Where is Alice's flat?"))
    assert completion.text == "alice on 2026-04-15: The flat is near the river! [3]"
    assert completion.model == "extractive" and completion.finish_reason == "stop"
    # the same sentence from a belief, its fact and the turn: quoted once, every marker after it
    moved = await llm.complete(ask("Where does alice live?"))
    assert moved.text == "alice lives in Berlin (belief: supported, confidence 0.64). [1][2]"
    assert (await llm.complete(ask("Where does alice live?"))) == moved  # deterministic


async def test_extractive_says_so_when_nothing_supports_an_answer():
    llm = ExtractiveLLM()
    for question in ("What car does Bob drive?", "?", "and the"):
        completion = await llm.complete(ask(question))
        assert completion.text == NO_SUPPORT and citing.MARKER.search(completion.text) is None
    assert (await llm.complete(ask("Who moved?", passages=PASSAGES[4:]))).text.endswith("[5]")  # episodes: a last resort


async def test_extractive_counts_regex_tokens_and_honours_the_ceiling():
    llm = ExtractiveLLM()
    completion = await llm.complete(ask("favorite color"))
    assert completion.text == "alice on 2026-03-02: My favorite color is blue. [4]"
    # alice on 2026 - 03 - 02 : My favorite color is blue . [ 4 ]
    assert completion.usage.completion == 17 and completion.usage.counted_by == r"regex \w+|[^\w\s]"
    assert completion.usage.prompt == 2 + sum(len(citing_tokens(f"{p.source} {p.text}")) for p in PASSAGES)
    cut = await llm.complete(ask("favorite color", max_tokens=10))
    assert cut.text == NO_SUPPORT and cut.finish_reason == "length"
    pieces = [item async for item in llm.stream(ask("favorite color"))]
    assert "".join(pieces[:-1]) == completion.text and pieces[-1] == completion


def citing_tokens(text: str) -> list[str]:
    from cortexdb.engine.llm.prompts import TOKEN

    return TOKEN.findall(text)


async def test_extractive_narrative_tells_the_pack_in_order():
    llm = ExtractiveLLM()
    story = await llm.complete(ask("", task=NARRATIVE))
    assert story.text == ("alice lives in Berlin (belief: supported, confidence 0.64). [1][2] "
                          "alice on 2026-04-15: I moved to Berlin. [3] alice on 2026-03-02: My favorite color is blue. [4]")  # fmt: skip
    focused = await llm.complete(ask("river", task=NARRATIVE))
    assert focused.text == "alice on 2026-04-15: The flat is near the river! [3]"


# -- citation modes ------------------------------------------------------------------------------------
TEXT = "Alice moved to Berlin [3][2]. Her flat is near the river [3]. See [9] and [2023]."


def test_citation_modes_shape_the_text():
    assert citing.apply(citing.INLINE, TEXT, PASSAGES) == TEXT
    stripped = "Alice moved to Berlin. Her flat is near the river. See [9] and [2023]."
    for mode in (citing.BLOCK, citing.STRUCTURED, citing.NONE):
        assert citing.apply(mode, TEXT, PASSAGES) == stripped  # [9] names no passage: left as written
    found = citing.cited(TEXT, PASSAGES)
    assert [(p.marker, strength) for p, strength in found] == [("[3]", 1.0), ("[2]", 0.67)]
    assert citing.sources_line(citing.BLOCK, found) == "\n\nSources: [3] evt_3; [2] fact_2"
    assert citing.sources_line(citing.STRUCTURED, found) == ""
    assert citing.citations(citing.NONE, found) == []
    assert citing.citations(citing.INLINE, found)[1] == {"marker": "[2]", "layer": "fact", "id": "fact_2",
                                                         "support_strength": 0.67}  # fmt: skip


@given(st.lists(st.integers(min_value=1, max_value=len(TEXT) - 1), max_size=12, unique=True),
       st.sampled_from([citing.INLINE, citing.BLOCK, citing.STRUCTURED, citing.NONE]))  # fmt: skip
def test_a_streamed_text_filters_to_what_the_whole_text_does(cuts, mode):
    bounds = [0, *sorted(cuts), len(TEXT)]
    flt = citing.MarkerFilter(mode, PASSAGES)
    streamed = "".join(flt.feed(TEXT[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)) + flt.finish()
    assert streamed == citing.apply(mode, TEXT, PASSAGES)


# -- the engine ----------------------------------------------------------------------------------------
@pytest.fixture
def clock():
    return ManualClock(START)


@pytest.fixture
async def engine(clock):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config) as opened:
        await seed(opened)
        yield opened


async def test_an_answer_shares_the_recall_pack_and_cites_it(engine):
    answer = await engine.answer({"scope": ALICE, "question": "Where does Alice live now?"})
    assert "Berlin" in answer["answer"] and answer["supported"] is True
    pack = engine.get_pack(answer["pack_id"])  # the one recall's pack, cached for use_pack_id
    assert pack["scope"] == ALICE and answer["as_of"] == pack["as_of"] == START
    markers = {m["marker"]: m for m in answer["provenance"]["markers"]}
    in_pack = {item["id"] for items in pack["layers"].values() for item in items}
    for citation in answer["citations"]:
        assert citation["marker"] in answer["answer"] and citation["id"] in in_pack
        assert markers[citation["marker"]]["id"] == citation["id"] and 0 <= citation["support_strength"] <= 1
    # the pack's context-block markers name the same records in the answer
    assert pack["provenance"]["markers"] == answer["provenance"]["markers"][: len(pack["provenance"]["markers"])]
    assert answer["provenance"]["citations"] == pack["provenance"]["citations"]
    trail = answer["provenance"]["trail"]
    assert trail[:-1] == pack["provenance"]["trail"] and trail[-1]["phase"] == "llm"
    diagnostics = answer["diagnostics"]
    assert diagnostics["answer_model"] == "extractive" and diagnostics["answer_provider"] == "extractive"
    assert diagnostics["recall_ms"] >= 0 and diagnostics["llm_ms"] >= 0 and diagnostics["pack_reused"] is False
    assert diagnostics["answer_tokens"]["completion"] > 0 and diagnostics["answer_tokens"]["prompt"] > 0
    assert diagnostics["pack_used"] == {layer: len(items) for layer, items in pack["layers"].items() if items}


async def test_an_unsupported_answer_says_so_structurally(engine, clock):
    answer = await engine.answer({"scope": ALICE, "question": "Which car does Bob drive?", "diagnostics": "none"})
    assert answer["answer"] == NO_SUPPORT and answer["supported"] is False and answer["citations"] == []
    assert "diagnostics" not in answer
    empty = await engine.answer({"scope": "org:acme/user:nobody", "view": "local", "question": "Where does Alice live?"})
    assert empty["supported"] is False and empty["diagnostics"]["finish_reason"] == "empty_pack"
    assert empty["diagnostics"]["answer_tokens"] == {"prompt": 0, "completion": 0, "counted_by": r"regex \w+|[^\w\s]"}


async def test_use_pack_id_reuses_a_pack_within_its_60_seconds(engine, clock):
    pack = await engine.recall({"scope": ALICE, "query": "favorite color"})
    reused = await engine.answer({"use_pack_id": pack["pack_id"], "question": "What is my favorite color?",
                                  "scope": "org:elsewhere", "view": "raw"})  # recall fields are ignored
    assert reused["pack_id"] == pack["pack_id"] and reused["diagnostics"]["pack_reused"] is True
    assert "blue" in reused["answer"] and reused["provenance"]["trail"][:-1] == pack["provenance"]["trail"]
    with pytest.raises(NotFound):  # another caller's pack is no pack of theirs
        await engine.answer({"use_pack_id": pack["pack_id"], "question": "color?"}, caller="user:bob")
    clock.advance(59)
    assert (await engine.answer({"use_pack_id": pack["pack_id"], "question": "color?"}))["pack_id"] == pack["pack_id"]
    clock.advance(1)  # 60 s after the recall, with no extension on reuse
    with pytest.raises(NotFound) as expired:
        await engine.answer({"use_pack_id": pack["pack_id"], "question": "color?"})
    assert expired.value.http_status == 404 and expired.value.details == {"pack_id": pack["pack_id"]}


async def test_citation_modes_of_an_answer(engine):
    question = {"scope": ALICE, "question": "What is my favorite color?"}
    inline = await engine.answer(question)
    assert inline["answer"].endswith("]") and inline["citations"]
    body = citing.MARKER.sub("", inline["answer"]).replace(" .", ".")
    block = await engine.answer({**question, "citation_mode": "block_at_end"})
    text, _, sources = block["answer"].partition("\n\nSources: ")
    assert citing.MARKER.search(text) is None and sources == "; ".join(
        f"{c['marker']} {c['id']}" for c in block["citations"])  # fmt: skip
    structured = await engine.answer({**question, "citation_mode": "structured_only"})
    assert citing.MARKER.search(structured["answer"]) is None and structured["citations"] == inline["citations"]
    assert structured["answer"] == text
    none = await engine.answer({**question, "citation_mode": "none"})
    assert none["answer"] == text and none["citations"] == [] and none["supported"] is True
    assert "markers" not in none["provenance"]
    assert " ".join(body.split()) == " ".join(text.split())


async def test_a_streamed_answer_in_the_narrative_order(engine):
    question = {"scope": ALICE, "question": "How many seats does Acme have?"}
    events = [event async for event in engine.answer_stream(question)]
    names = [name for name, _ in events]
    tokens = names.count("token")
    assert tokens > 3 and names == ["token"] * tokens + ["citations", "provenance", "diagnostics", "done"]
    whole = await engine.answer(question)
    assert "".join(data["text"] for name, data in events if name == "token") == whole["answer"]
    assert events[tokens][1] == whole["citations"]
    done = events[-1][1]
    assert done["supported"] is True and done["as_of"] == START and done["pack_id"].startswith("pack_")
    blocked = [e async for e in engine.answer_stream({**question, "citation_mode": "block_at_end"})]
    assert "Sources: " in blocked[sum(1 for n, _ in blocked if n == "token") - 1][1]["text"]


async def test_bad_requests_fail_before_anything_is_streamed(engine):
    cases = [
        ({"scope": ALICE}, InvalidAnswer, "question"),
        ({"scope": ALICE, "question": "x", "query": "y"}, InvalidAnswer, "query"),
        ({"scope": ALICE, "question": "x", "answer_max_tokens": 0}, InvalidAnswer, "answer_max_tokens"),
        ({"scope": ALICE, "question": "x", "answer_max_tokens": 10**6}, InvalidAnswer, "answer_max_tokens"),
        ({"scope": ALICE, "question": "x", "view": "structured"}, InvalidAnswer, "view"),
        ({"scope": ALICE, "question": "x", "answer_model": "gpt-9"}, InvalidAnswer, "answer_model"),
        ({"scope": ALICE, "question": "x", "citation_mode": "loud"}, InvalidAnswer, "citation_mode"),
        ({"question": "x"}, InvalidAnswer, "scope"),
        ({"question": "x", "use_pack_id": "evt_1"}, InvalidAnswer, "use_pack_id"),
        ({"scope": ALICE, "question": "x", "stream": "yes"}, InvalidAnswer, "stream"),
        ({"scope": ALICE, "question": "x", "budgets": {"max_tokens": -1}}, InvalidRecall, "budgets.max_tokens"),
    ]
    for request, error, field in cases:
        stream = engine.answer_stream(request)
        with pytest.raises(error) as failure:
            await stream.__anext__()
        assert failure.value.http_status == 422 and failure.value.details["field"] == field, request
    with pytest.raises(InvalidAnswer) as unknown:
        await engine.answer({"scope": ALICE, "question": "x", "answer_model": "gpt-9"})
    assert unknown.value.details["available"] == ["extractive"]


async def test_an_idempotency_key_replays_the_first_answer(engine, clock):
    request = {"scope": ALICE, "question": "What is my favorite color?", "idempotency_key": "a-1"}
    first = await engine.answer(request)
    clock.advance(3600)  # long after the pack expired: the answer is kept 24 hours
    again = await engine.answer({**request, "stream": False})
    assert again == {**first, "replayed": True}
    streamed = [e async for e in engine.answer_stream({**request, "stream": True})]
    assert "".join(d["text"] for n, d in streamed if n == "token") == first["answer"]
    assert streamed[-1] == ("done", {"pack_id": first["pack_id"], "as_of": first["as_of"], "supported": True,
                                     "replayed": True})  # fmt: skip
    with pytest.raises(IdempotencyConflict):
        await engine.answer({**request, "question": "Where do I live?"})
    other = await engine.answer(request, caller="user:bob")  # keys are per caller
    assert "replayed" not in other


class DenyLLM:
    """A policy hook that refuses ``llm.invoke`` (and allows the rest)."""

    def check(self, caller: str, capability: str, scope: str) -> None:
        if capability == "llm" + ".invoke":
            raise PolicyDenied("no LLM for you", details={"capability": capability, "denied_by_tier": "tenant"})

    def verdict(self, caller: str, capability: str, scope: str) -> Verdict:
        return ALLOWED


async def test_answers_and_narratives_need_llm_invoke(clock):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config, policy=DenyLLM()) as engine:
        await seed(engine)
        pack = await engine.recall({"scope": ALICE, "query": "Berlin"})  # recall itself needs no LLM
        for call in (engine.answer({"scope": ALICE, "question": "Berlin?"}),
                     engine.answer({"use_pack_id": pack["pack_id"], "question": "Berlin?"}),
                     engine.recall({"scope": ALICE, "query": "Berlin", "view": "narrative"})):  # fmt: skip
            with pytest.raises(PolicyDenied) as denied:
                await call
            assert denied.value.details["capability"] == "llm.invoke"


async def test_a_narrative_pack_and_its_stream(engine):
    story = await engine.recall({"scope": ALICE, "query": "Berlin", "view": "narrative", "diagnostics": "summary"})
    assert story["view"] == "narrative" and story["layers"] == {layer: [] for layer in story["layers"]}
    assert "Berlin" in story["context_block"] and citing.MARKER.search(story["context_block"])
    holistic = engine.get_pack(story["pack_id"])  # the recalled pack behind the story
    assert holistic["view"] == "holistic" and holistic["layers"]["facts"]
    cited = {m["id"] for m in story["provenance"]["markers"]}
    assert cited <= {i["id"] for items in holistic["layers"].values() for i in items}
    assert story["provenance"]["trail"][-1]["phase"] == "llm" and story["diagnostics"]["answer_model"] == "extractive"
    events = [e async for e in engine.recall_stream({"scope": ALICE, "query": "Berlin", "view": "narrative"})]
    names = [name for name, _ in events]
    tokens = names.count("token")
    assert names == ["token"] * tokens + ["citations", "diagnostics", "done"]
    assert "".join(d["text"] for n, d in events if n == "token") == story["context_block"]
    plain = await engine.recall({"scope": ALICE, "query": "", "view": "narrative", "citation_mode": "none"})
    assert plain["context_block"] and citing.MARKER.search(plain["context_block"]) is None


async def test_granular_streaming_recall_follows_10_1(engine):
    events = [e async for e in engine.recall_stream({"scope": ALICE, "query": "Berlin", "include": ["facts", "events"]})]
    names = [name for name, _ in events]
    assert names == ["plan", "layer", "layer", "relationships", "signals", "context_block", "provenance",
                     "diagnostics", "done"]  # fmt: skip
    layers = [data for name, data in events if name == "layer"]
    assert [layer["layer"] for layer in layers] == ["events", "facts"]
    elapsed = [layer["elapsed_ms"] for layer in layers]  # since the recall began (§10.1's example)
    assert elapsed == sorted(elapsed) and events[-1][1]["total_ms"] >= elapsed[-1]
    pack = engine.get_pack(events[-1][1]["pack_id"])  # the same pack the non-streaming recall returns
    assert [layer["items"] for layer in layers] == [pack["layers"]["events"], pack["layers"]["facts"]]
    parts = dict(events)
    assert parts["relationships"]["items"] == pack["relationships"] and parts["signals"]["items"] == pack["signals"]


# -- the openai_compatible provider in the engine ------------------------------------------------------
async def test_an_answer_from_a_chat_completions_model(clock):
    async with chat_server() as server:
        llm = OpenAICompatibleLLM(base_url=server.url, model="chat-1", api_key=KEY, max_retries=1, backoff=0.01)
        config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
        async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config, llm=llm) as engine:
            await seed(engine)
            question = {"scope": ALICE, "question": "What is my favorite color?"}
            answer = await engine.answer(question)
            assert answer["answer"].startswith("According to memory,") and answer["supported"]
            assert answer["diagnostics"]["answer_model"] == "chat-1"
            assert answer["diagnostics"]["answer_tokens"]["counted_by"] == "provider"
            streamed = [e async for e in engine.answer_stream({**question, "citation_mode": "structured_only"})]
            text = "".join(d["text"] for n, d in streamed if n == "token")
            assert text == citing.MARKER.sub("", answer["answer"]).rstrip() and streamed[-1][1]["supported"]
            assert (await engine.answer({**question, "answer_model": "extractive"}))["diagnostics"]["answer_model"] == "extractive"
            server.script = [("status", 503)] * 2
            with pytest.raises(LLMUnavailable):
                await engine.answer(question)
            server.script = [("cut", 3)]
            stream = engine.answer_stream(question)
            assert (await stream.__anext__())[0] == "token"  # the answer began...
            with pytest.raises(LLMUnavailable):  # ...and the model went away
                async for _ in stream:
                    pass
        await llm.aclose()  # the application's own provider: the engine leaves it open
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in server.requests)
