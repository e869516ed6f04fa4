"""Ranking adjustments after the blend (recall/quality.py): speaker-aware recall, episode context
the length prior and the content query, each on a tiny constructed corpus.  Both backends for the engine-level test."""

import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.model import Candidate
from cortexdb.engine.recall import episodes_context, length_prior, speakers

from .conftest import envelope

SCOPE = "org:acme/team:friends"


def turn(text: str, speaker: str, second: int) -> dict:
    return envelope(text, scope=SCOPE, observed_at=f"2026-03-01T10:00:{second:02d}Z",
                    observed_actor={"id": f"user:{speaker}", "session": "1"})  # fmt: skip


async def ranked_speakers(engine, query: str) -> list[str]:
    pack = await engine.recall({"scope": SCOPE, "query": query, "include": ["events"], "diagnostics": "none"})
    return [item["observed_actor"]["id"] for item in pack["layers"]["events"]]


@pytest.mark.parametrize("weight", [0.0, 0.5])
async def test_a_named_speaker_is_preferred(engine_factory, weight):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_speaker_weight=weight)
    async with engine_factory(config=config) as engine:
        # melanie's turn shares more words with the question; caroline is who it asks about
        for second, (speaker, text) in enumerate([
            ("melanie", "Hiking in the mountains, mountain trails and hiking boots: hiking is my thing."),
            ("caroline", "I went hiking last weekend."),
            ("melanie", "The kids loved the museum."),
        ]):  # fmt: skip
            await engine.experience(turn(text, speaker, second), caller="user:alice", wait="indexed")
        order = await ranked_speakers(engine, "Where does Caroline go hiking in the mountains?")
        unnamed = await ranked_speakers(engine, "Who goes hiking in the mountains?")
    assert order[0] == ("user:caroline" if weight else "user:melanie")
    assert unnamed[0] == "user:melanie"  # naming nobody changes nothing


def test_names_are_the_actors_words():
    assert speakers.name_words("user:caroline_smith") == {"caroline", "smith"}
    assert speakers.name_words("agent:al") == set()  # too short to be told from a word
    assert speakers.name_words("user:will_2") == set()  # a stop word, a number
    voices = {"user:caroline_smith", "user:melanie"}
    assert speakers.named("What is Caroline's identity?", voices) == {"user:caroline_smith"}
    assert speakers.named("Did SMITH call?", voices) == {"user:caroline_smith"}
    assert speakers.named("what about carolines?", voices) == set()  # whole words only


def candidate(record_id: str, speaker: str, score: float, layer: str = "events") -> Candidate:
    record = {"id": record_id, "observed_actor": {"id": speaker}}
    c = Candidate(layer=layer, id=record_id, record=record, text="", time="2026-03-01T10:00:00Z", importance=0.0,
                  confidence=1.0, links=[], chain={}, raw_size=1)  # fmt: skip
    c.score = score
    return c


def test_prefer_raises_only_a_named_voice_among_others():
    pool = [candidate("evt_1", "user:caroline", 0.5), candidate("evt_2", "user:melanie", 0.55)]
    assert speakers.prefer("What did Caroline research?", pool, 0.1) == 1
    assert pool[0].score == pytest.approx(0.6) and pool[1].score == pytest.approx(0.55)
    assert pool[0].signals["speaker"] == 1.0
    both = [candidate("evt_1", "user:caroline", 0.5), candidate("evt_2", "user:melanie", 0.55)]
    assert speakers.prefer("Did Caroline meet Melanie?", both, 0.1) == 0  # every voice named
    assert [c.score for c in both] == [0.5, 0.55]
    assert speakers.prefer("What did Caroline research?", both, 0.0) == 0  # off


def event(record_id: str, score: float, episode: str | None) -> Candidate:
    c = candidate(record_id, "user:a", score)
    c.record["derives"] = ["fact_1", episode] if episode else ["fact_1"]
    return c


def test_episode_context_lifts_a_turn_among_good_company():
    lone = event("evt_lone", 0.50, "ep_a")  # the only candidate of its episode: the best of itself
    company = [event("evt_best", 0.80, "ep_b"), event("evt_mate", 0.45, "ep_b")]
    bare = event("evt_bare", 0.40, None)  # of no episode: a document of its own
    fact = candidate("fact_1", "user:a", 0.9, layer="facts")
    pool = [lone, *company, bare, fact]
    assert episodes_context.lift(pool, 0.3) == 4
    assert lone.score == pytest.approx(0.50 * 1.3) and bare.score == pytest.approx(0.40 * 1.3)
    assert company[0].score == pytest.approx(0.80 * 1.3)
    assert company[1].score == pytest.approx(0.45 + 0.3 * 0.80)  # its episode's best score
    assert company[1].signals["episode"] == 0.8 and fact.score == 0.9  # events only
    assert company[1].score > lone.score  # in good company, above a better lone match
    assert episodes_context.lift([event("evt_x", 0.5, "ep_c"), event("evt_y", 0.4, "ep_c")], 0.0) == 0  # off


def test_the_length_prior_saturates_and_reads_events_only():
    short = candidate("evt_short", "user:a", 0.5)
    short.text = "Thanks, Caroline!"
    said = candidate("evt_said", "user:a", 0.5)
    said.text = "I signed up for a pottery class yesterday and it is like therapy for me"  # 15 words
    long = candidate("evt_long", "user:a", 0.5)
    long.text = " ".join(["word"] * 90)
    fact = candidate("fact_1", "user:a", 0.5, layer="facts")
    fact.text = " ".join(["claim"] * 40)
    assert length_prior.lift([short, said, long, fact], 0.1, 30) == 3
    assert short.score == pytest.approx(0.5 + 0.1 * 2 / 30)
    assert said.score == pytest.approx(0.5 + 0.1 * 15 / 30)
    assert long.score == pytest.approx(0.6) and long.signals["length"] == 1.0  # saturated
    assert fact.score == 0.5  # events only
    assert length_prior.lift([short], 0.0, 30) == 0  # off


def test_the_question_prior_lowers_turns_that_ask():
    asks = candidate("evt_asks", "user:a", 0.5)
    asks.text = "Wow, Mel, that's awesome! What's your best camping memory?"  # 5 of 9 words asked
    says = candidate("evt_says", "user:a", 0.5)
    says.text = "We roast marshmallows around the campfire. It's the best!"
    mixed = candidate("evt_mixed", "user:a", 0.5)
    mixed.text = "Did you go? I went camping at the beach with my kids last summer"  # 3 of 14
    fact = candidate("fact_1", "user:a", 0.5, layer="facts")
    fact.text = "user:a asked what?"
    assert length_prior.asked_share(asks.text) == pytest.approx(5 / 9)
    assert length_prior.asked_share("") == 0.0
    assert length_prior.asks([asks, says, mixed, fact], 0.1) == 2
    assert asks.score == pytest.approx(0.5 - 0.1 * 5 / 9) and asks.signals["asks"] == round(5 / 9, 4)
    assert mixed.score == pytest.approx(0.5 - 0.1 * 3 / 14)
    assert says.score == 0.5 and "asks" not in says.signals and fact.score == 0.5  # events only
    assert length_prior.asks([asks], 0.0) == 0  # off


def test_the_settings_are_checked():
    with pytest.raises(ValueError):
        EngineConfig(recall_speaker_weight=-0.1)
    with pytest.raises(ValueError):
        EngineConfig(recall_episode_weight=1.5)
    with pytest.raises(ValueError):
        EngineConfig(recall_length_words=0)
    with pytest.raises(ValueError):
        EngineConfig(recall_question_weight=1.5)
    with pytest.raises(ValueError):
        EngineConfig(turn_context_weight=-0.5)


def test_the_content_query_leaves_out_the_voices_names():
    voices = ["user:caroline_smith", "user:melanie", "agent:al"]
    assert speakers.content_query("What kind of art does Caroline make?", voices) == "What kind of art does make?"
    assert speakers.content_query("What is Melanie's job, Smith?", voices) == "What is job,"  # possessive, punctuation
    assert speakers.content_query("Did Al and Carolines meet?", voices) == "Did Al and Carolines meet?"  # whole names only
    assert speakers.content_query("Caroline?", voices) == "Caroline?"  # nothing left: the question itself
    assert speakers.content_query("Who is Caroline?", voices) == "Who is Caroline?"  # stop words only: the same
    assert speakers.content_query("What does Caroline do?", []) == "What does Caroline do?"


def test_a_scopes_voices_keep_their_names_as_they_are_added():
    voices = speakers.Voices()
    assert speakers.content_query("What does Caroline paint?", voices) == "What does Caroline paint?"
    for actor in ("user:caroline_smith", "user:melanie", None, "user:caroline_smith", "agent:al"):
        voices.add(actor)
    assert voices.ids == {"user:caroline_smith", "user:melanie", "agent:al"}
    assert voices.names == {"caroline", "smith", "melanie"}  # "al": under three letters
    questions = ["What kind of art does Caroline make?", "What is Melanie's job, Smith?", "Who is Caroline?"]
    for question in questions:  # the same as from the list of ids
        assert speakers.content_query(question, voices) == speakers.content_query(question, sorted(voices.ids))


@pytest.mark.parametrize("content", [False, True])
async def test_recall_searches_the_content_of_the_question(engine_factory, content):
    """The indexes are searched with the question less the names of the scope's voices (the
    trail says with what); a name that is no voice stays."""
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_content_query=content)
    async with engine_factory(config=config) as engine:
        for second, (speaker, text) in enumerate([
            ("melanie", "Caroline! Caroline, you are so kind, Caroline."),
            ("caroline", "I paint abstract art with bright colours."),
            ("melanie", "Jean paints landscapes."),
        ]):  # fmt: skip
            await engine.experience(turn(text, speaker, second), caller="user:alice", wait="indexed")
        pack = await engine.recall({"scope": SCOPE, "query": "What art do Caroline and Jean paint?",
                                    "include": ["events"], "diagnostics": "full"})  # fmt: skip
    phases = {p["phase"]: p for p in pack["provenance"]["trail"]}
    if content:
        assert phases["hybrid_retrieve"]["content_query"] == "What art do and Jean paint?"
    else:
        assert "content_query" not in phases["hybrid_retrieve"]
    assert len(pack["layers"]["events"]) == 3


async def test_the_voices_come_back_after_a_restart(tmp_path, clock):
    """The scope's voices are rebuilt with its indexes when a data dir is opened again."""
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
    path = str(tmp_path / "data")
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=7, config=config) as engine:
        await engine.experience(turn("I paint abstract art.", "caroline", 0), caller="user:alice", wait="indexed")
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=8, config=config) as engine:
        pack = await engine.recall({"scope": SCOPE, "query": "What does Caroline paint?", "include": ["events"],
                                    "diagnostics": "full"})  # fmt: skip
    phases = {p["phase"]: p for p in pack["provenance"]["trail"]}
    assert phases["hybrid_retrieve"]["content_query"] == "What does paint?"
    assert len(pack["layers"]["events"]) == 1
