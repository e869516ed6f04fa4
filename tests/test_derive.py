"""Pure derivation functions: the rule extractor, fact resolution, belief math, episodes, BM25."""

import datetime as dt
import math
import random

import pytest
from rank_bm25 import BM25Okapi

from cortexdb.engine.derive import beliefs as bm
from cortexdb.engine.derive import episodes as ep
from cortexdb.engine.derive.entities import normalise_alias
from cortexdb.engine.derive.facts import noisy_or, object_key, resolve
from cortexdb.engine.derive.rules import RuleExtractor
from cortexdb.engine.model import Fact, TypedRef, TypedValue
from cortexdb.engine.retrieve.text_index import TextIndex, tokenize
from cortexdb.engine.spi.extractor import ExtractionContext, TermRef

T0 = dt.datetime(2026, 5, 13, tzinfo=dt.UTC)


def extract(text, role="user", kind="message"):
    content = {"kind": kind, "text": text}
    if kind == "message":
        content["role"] = role
    ctx = ExtractionContext(
        content=content,
        modality="conversation",
        subject_id="user:alice",
        observed_actor_id="user:alice",
    )
    return RuleExtractor().extract(ctx)


def triples(result):
    out = []
    for f in result.facts:
        obj = f.object_value.name if isinstance(f.object_value, TermRef) else f.object_value
        out.append((f.subject.name, f.predicate, obj, f.polarity))
    return out


@pytest.mark.parametrize(
    "text,expected",
    [
        ("My favorite color is blue.", ("user:alice", "favorite_color", "blue", 1)),
        ("I live in Berlin.", ("user:alice", "lives_in", "Berlin", 1)),
        ("I just moved to Lisbon!", ("user:alice", "lives_in", "Lisbon", 1)),
        ("I work at Acme Corp, it's great.", ("user:alice", "works_at", "Acme Corp", 1)),
        ("I work as a nurse.", ("user:alice", "occupation", "nurse", 1)),
        ("I really love hiking.", ("user:alice", "likes", "hiking", 1)),
        ("I prefer tea over coffee.", ("user:alice", "prefers", "tea over coffee", 1)),
        ("I hate traffic jams.", ("user:alice", "dislikes", "traffic jams", 1)),
        ("I don't like coffee anymore.", ("user:alice", "likes", "coffee", -1)),
        ("I'm 32 years old.", ("user:alice", "age", 32, 1)),
        ("I am a teacher.", ("user:alice", "is_a", "teacher", 1)),
        ("Acme moved to 200 seats on Monday.", ("Acme", "seat_count", 200, 1)),
        ("I have 3 kids.", ("user:alice", "kid_count", 3, 1)),
        ("Paris is the capital of France.", ("Paris", "is", "the capital of France", 1)),
        ("Bob works at Initech.", ("Bob", "works_at", "Initech", 1)),
    ],
)
def test_rule_patterns(text, expected):
    assert expected in triples(extract(text))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Alice works with Priya.", [("Alice", "works_with", "Priya", 1)]),
        ("Grace Hopper worked with Howard Aiken at Harvard.", [("Grace Hopper", "works_with", "Howard Aiken", 1)]),
        ("Tom reports to Dana Scully since March.", [("Tom", "reports_to", "Dana Scully", 1)]),
        ("Yesterday Marco married Giulia.", [("Marco", "married_to", "Giulia", 1)]),
        ("Bob is a friend of Carol.", [("Bob", "friend_of", "Carol", 1)]),
        ("Carol lives with Dave, Erin and Frank.", [("Carol", "lives_with", n, 1) for n in ("Dave", "Erin", "Frank")]),
        ("Priya is Tom's sister.", [("Tom", "sister", "Priya", 1)]),
        ("Kenji was Aiko's best friend.", [("Aiko", "best_friend", "Kenji", 1)]),
        ("Alice and Bob are colleagues.", [("Alice", "works_with", "Bob", 1)]),
        ("Lena and Omar were married.", [("Lena", "married_to", "Omar", 1)]),
        # first person: the speaker is one end
        ("I work with Priya on the ledger.", [("user:alice", "works_with", "Priya", 1)]),
        ("I'm married to Sam.", [("user:alice", "married_to", "Sam", 1)]),
        ("Dana is my manager.", [("user:alice", "manager", "Dana", 1)]),
        ("Sam is friends with me.", [("Sam", "friend_of", "user:alice", 1)]),
        ("Priya and I are old friends.", [("Priya", "friend_of", "user:alice", 1)]),
    ],
)
def test_relations_between_named_people(text, expected):
    found = triples(extract(text))
    assert [t for t in found if t[1] not in ("is", "works_at", "lives_in")] == expected


@pytest.mark.parametrize(
    "text",
    ["They work with Priya.", "Alice works with Bob's team on billing.", "The team works with vendors.",
     "Priya works with passion.", "He is my brother."],
)  # fmt: skip
def test_relations_need_two_named_people(text):
    assert [t for t in triples(extract(text)) if t[1] in ("works_with", "brother")] == []


def test_relations_read_third_person_in_any_turn_and_first_person_only_in_the_speakers():
    assert triples(extract("Alice works with Priya.", role="assistant")) == [("Alice", "works_with", "Priya", 1)]
    assert triples(extract("I work with Priya.", role="assistant")) == []
    hedged = extract("Maybe Tom manages Priya.").facts
    assert [(f.subject.name, f.predicate, f.object_value.name) for f in hedged] == [("Tom", "manages", "Priya")]
    assert hedged[0].confidence < 0.75 and hedged[0].datatype == "entity"
    # "X is Y's sister" is not also read as (X, is, "Y's sister")
    assert [t[1] for t in triples(extract("Priya is Tom's sister."))] == ["sister"]


def test_rules_leave_unreadable_text_alone():
    assert extract("It was so powerful and we all cried.").facts == ()
    assert extract("What a day!").facts == ()


def test_first_person_rules_do_not_read_assistant_turns():
    assert triples(extract("I live in the cloud.", role="assistant")) == []


def test_hedged_statements_have_lower_confidence():
    sure = extract("My sister is a nurse.").facts[0].confidence
    hedged = extract("I think my sister is a nurse.").facts[0].confidence
    assert hedged < sure


def test_object_phrases_stop_at_clause_boundaries_and_are_never_cut():
    assert ("user:alice", "lives_in", "Berlin", 1) in triples(
        extract("I live in Berlin, which is lovely.")
    )
    assert (
        extract("My plan is " + "very " * 30 + "long.").facts == ()
    )  # too long: not stored cut short


def test_triple_and_json_content_map_directly():
    rules = RuleExtractor()
    ctx = ExtractionContext(
        content={
            "kind": "triple",
            "subject": "Acme",
            "predicate": "Deal Stage",
            "object": "signed",
        },
        modality="observation",
        subject_id="user:alice",
        observed_actor_id="user:alice",
    )
    (fact,) = rules.extract(ctx).facts
    assert (fact.subject.name, fact.predicate, fact.object_value, fact.pattern) == (
        "Acme",
        "deal_stage",
        "signed",
        "triple",
    )
    ctx = ExtractionContext(
        content={
            "kind": "json",
            "data": {"plan": "pro", "seats": 12, "tags": ["a", "b"], "billing": {"annual": True}},
        },
        modality="tool_result",
        subject_id="user:alice",
        observed_actor_id="user:alice",
    )
    got = {(f.predicate, f.object_value, f.single_valued) for f in rules.extract(ctx).facts}
    assert got == {
        ("plan", "pro", True),
        ("seats", 12, True),
        ("tags", "a", False),
        ("tags", "b", False),
        ("billing_annual", True, True),
    }
    ctx = ExtractionContext(
        content={"kind": "blob_ref", "blob_id": "blob_1"},
        modality="document",
        subject_id="user:alice",
        observed_actor_id="user:alice",
    )
    assert rules.extract(ctx).unread


def test_alias_normalisation():
    assert normalise_alias("The Acme Corp.") == normalise_alias("acme   corp") == "acme corp"
    assert normalise_alias("ÉCOLE") == "école"


def fact(fid, value, valid_from, polarity=1, single=True):
    return Fact(id=fid, scope="s:x", subject=TypedRef(id="ent_a"), predicate="p",
                object=TypedValue(type="literal", datatype="string", value=value), supports=["evt_1"],
                valid_from=valid_from, recorded_from=T0, confidence=0.8, extractor="t", source="human",
                single_valued=single, polarity=polarity)  # fmt: skip


def key(value):
    return object_key(TypedValue(type="literal", datatype="string", value=value))


def test_resolution_reinforces_the_same_assertion():
    current = [fact("f1", "Paris", T0)]
    assert (
        resolve(
            object_key_=key(" paris "),
            polarity=1,
            single_valued=True,
            valid_from=T0,
            current=current,
        ).reinforce
        == "f1"
    )


def test_resolution_supersedes_an_older_value_of_a_single_valued_predicate():
    current = [fact("f1", "Paris", T0)]
    decision = resolve(
        object_key_=key("Berlin"),
        polarity=1,
        single_valued=True,
        valid_from=T0 + dt.timedelta(days=1),
        current=current,
    )
    assert decision.status == "accepted" and decision.supersede == ("f1",)


def test_resolution_files_late_arriving_history_without_closing_the_present():
    current = [fact("f1", "Berlin", T0)]
    decision = resolve(
        object_key_=key("Paris"),
        polarity=1,
        single_valued=True,
        valid_from=T0 - dt.timedelta(days=30),
        current=current,
    )
    assert decision.status == "accepted" and decision.supersede == () and decision.valid_to == T0


def test_resolution_surfaces_a_conflict_at_the_same_valid_time():
    current = [fact("f1", "Paris", T0)]
    decision = resolve(
        object_key_=key("Rome"), polarity=1, single_valued=True, valid_from=T0, current=current
    )
    assert decision.status == "conflict_detected" and decision.conflicts_with == ("f1",)


def test_resolution_keeps_multi_valued_objects_side_by_side_and_negation_supersedes():
    current = [fact("f1", "hiking", T0, single=False)]
    assert (
        resolve(
            object_key_=key("chess"),
            polarity=1,
            single_valued=False,
            valid_from=T0 + dt.timedelta(1),
            current=current,
        ).supersede
        == ()
    )
    negated = resolve(
        object_key_=key("hiking"),
        polarity=-1,
        single_valued=False,
        valid_from=T0 + dt.timedelta(1),
        current=current,
    )
    assert negated.supersede == ("f1",)


def test_noisy_or_corroboration_stays_below_one():
    assert noisy_or(0.8, 0.5) == 0.9
    assert noisy_or(0.999, 0.999) <= 0.999


def _integrate_beta_cdf(x, a, b, steps=20000):
    norm = math.exp(math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    h = x / steps
    total = 0.0
    for i in range(steps):
        t = (i + 0.5) * h
        total += t ** (a - 1) * (1 - t) ** (b - 1)
    return total * h / norm


@pytest.mark.parametrize(
    "a,b,x", [(2.0, 3.0, 0.3), (1.9, 1.0, 0.8), (5.5, 2.2, 0.6), (3.0, 7.0, 0.1)]
)
def test_beta_cdf_matches_numerical_integration(a, b, x):
    assert bm.beta_cdf(x, a, b) == pytest.approx(_integrate_beta_cdf(x, a, b), abs=1e-5)


def test_beta_quantiles_invert_the_cdf_and_have_closed_forms():
    assert bm.beta_ppf(0.05, 1.9, 1.0) == pytest.approx(0.05 ** (1 / 1.9), abs=1e-9)
    for q in (0.05, 0.5, 0.95):
        assert bm.beta_cdf(bm.beta_ppf(q, 3.2, 4.7), 3.2, 4.7) == pytest.approx(q, abs=1e-9)


def test_posterior_reflects_evidence_and_narrows_with_more_of_it():
    mean1, lo1, hi1 = bm.posterior(0.9, 0.0)
    mean5, lo5, hi5 = bm.posterior(4.5, 0.0)
    assert mean5 > mean1 > 0.5 and (hi5 - lo5) < (hi1 - lo1)
    assert bm.posterior(0.0, 0.0)[0] == 0.5
    mixed = bm.posterior(0.9, 0.9)[0]
    assert mixed == pytest.approx(0.5)
    assert bm.stance(mixed, 0.9) == "uncertain"
    assert bm.stance(bm.posterior(0.0, 0.9)[0], 0.9) == "contradicted"
    assert bm.stance(mean5, 0.0) == "supported"


def test_floor_deletes_weak_beliefs_but_keeps_contradicted_ones():
    assert bm.should_delete(0.2, "uncertain", 0.3, 0.1, 0.0)
    assert not bm.should_delete(0.2, "contradicted", 0.3, 0.0, 2.0)
    assert bm.should_delete(0.5, "uncertain", 0.3, 0.0, 0.0)  # no evidence left at all
    assert not bm.should_delete(0.65, "supported", 0.3, 0.9, 0.0)


def test_episode_windows_and_roles():
    gap = dt.timedelta(minutes=30)
    kwargs = dict(
        gap=gap, max_events=500, episode_events=3, episode_ended_at=T0, episode_session="s1"
    )
    assert not ep.closes_window(
        strategy="time_gap", observed_at=T0 + dt.timedelta(minutes=10), session="s2", **kwargs
    )
    assert ep.closes_window(
        strategy="time_gap", observed_at=T0 + dt.timedelta(hours=2), session="s1", **kwargs
    )
    assert ep.closes_window(
        strategy="session", observed_at=T0 + dt.timedelta(minutes=1), session="s2", **kwargs
    )
    assert ep.closes_window(
        strategy="session", observed_at=T0, session="s1", **{**kwargs, "episode_events": 500}
    )
    assert ep.role_of("hello", 0, 3, False) == "trigger"
    assert ep.role_of("We decided to ship", 1, 3, False) == "decision"
    assert ep.role_of("ok", 1, 3, False) == "context"
    assert ep.role_of("done", 2, 3, True) == "outcome"
    assert ep.title("A b c d e f g h i j", None, "x").endswith("…")
    assert ep.title(None, "deal_close", "x") == "deal close"


def test_text_index_scores_equal_rank_bm25_and_updates_incrementally():
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(60)] + ["paris", "berlin"]
    docs = {
        f"d{i}": " ".join(rng.choice(vocab) for _ in range(rng.randint(3, 25))) for i in range(300)
    }
    index = TextIndex()
    for doc_id, text in docs.items():
        index.add(doc_id, text)
    index.add("extra", "paris berlin")  # incremental add ...
    index.remove("extra")  # ... and remove
    ids = list(docs)
    reference = BM25Okapi([tokenize(docs[d]) for d in ids])
    for query in ("paris", "w1 w2 w3", "berlin w7 paris"):
        expected = dict(zip(ids, reference.get_scores(tokenize(query)), strict=True))
        got = dict(index.search(query))
        for doc_id, score in expected.items():
            assert got.get(doc_id, 0.0) == pytest.approx(score, abs=1e-9)


def test_bm25_terms_drop_stop_words_and_share_stems():
    assert tokenize("When did Caroline go painting with the kids?") == ["carolin", "go", "paint", "kid"]
    assert tokenize("She's been adopting; adoption agencies") == ["adopt", "adopt", "agenc"]
    index = TextIndex()
    index.add("a", "Caroline paints with her kid")
    index.add("b", "When did you do that, and where?")
    assert [doc_id for doc_id, _ in index.search("When did Caroline go painting with the kids?")] == ["a"]


def test_pruned_bm25_scores_exactly_and_only_skips_common_terms_for_generation():
    index = TextIndex()
    for i in range(400):
        index.add(f"d{i}", "the meeting with the team" + (" about lisbon" if i % 50 == 0 else ""))
    index.add("x", "lisbon trip with grace")
    exact = dict(index.search("the trip to lisbon with grace"))
    pruned = index.search_pruned("the trip to lisbon with grace", 5)
    assert pruned[0][0] == "x"
    for doc_id, score in pruned:
        assert score == pytest.approx(exact[doc_id])  # generated documents get their exact score
    assert len(pruned) == 5


async def test_a_fact_keeps_its_first_and_latest_supports_and_pages_them_all(engine_factory):
    """A statement repeated many times: the record stays small, nothing is lost (FS table)."""
    from .conftest import envelope

    async with engine_factory() as engine:
        written = []
        for i in range(70):
            result = await engine.experience(envelope("I live in Paris.", observed_at=f"2026-05-13T15:{i // 60:02d}:{i % 60:02d}Z"))
            written.append(result.event_id)
        await engine.flush()
        facts = (await engine.facts("org:acme/user:alice"))["items"]
        assert len(facts) == 1
        fact = facts[0]
        assert fact["supports_total"] == 70 and len(fact["supports"]) == 64
        assert fact["supports"][0] == written[0] and fact["supports"][1:] == written[-63:]
        seen, cursor = [], None
        while True:
            page = await engine.fact_supports("org:acme/user:alice", fact["id"], limit=25, cursor=cursor)
            seen += page["items"]
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
        assert seen == written and page["supports_total"] == 70
        await engine.rebuild("org:acme/user:alice")
        await engine.flush()
        rebuilt = (await engine.facts("org:acme/user:alice"))["items"][0]
        assert rebuilt["supports_total"] == 70 and rebuilt["supports"] == fact["supports"]
