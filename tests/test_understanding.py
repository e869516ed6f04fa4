"""Understanding (reference §7.5, §8.7.7-§8.7.11): concepts synthesized at consolidation, their
versions, coalescence, support loss, the synthesize job and vocabularies — on both backends."""

from __future__ import annotations

import pytest

from cortexdb import schemas
from cortexdb.errors import InvalidBody, InvalidQuery, NotFound, VocabularyExists

SCOPE = "org:acme/user:alice"


def triple(subject, predicate, obj, *, observed_at="2026-05-13T15:42:00Z", **extra):
    content = {"kind": "triple", "subject": subject, "predicate": predicate, "object": obj, **extra}
    return {"scope": SCOPE, "modality": "observation", "content": content, "context": {"observed_at": observed_at}}


async def say(engine, *triples):
    for t in triples:  # (subject, predicate, object[, observed_at])
        await engine.experience(triple(*t[:3], **({"observed_at": t[3]} if len(t) > 3 else {})),
                                wait="consolidated")  # fmt: skip


async def concept_named(engine, name, **filters):
    page = await engine.understanding(SCOPE, **filters)
    return next(c for c in page["items"] if c["name"] == name)


async def test_a_concept_per_subject_cites_what_it_was_made_from(engine):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"),
              ("Acme", "depends_on", "ent:Stripe"), ("Stripe", "industry", "payments"))
    page = await engine.understanding(SCOPE)
    assert page["_partial"] is False and page["_partial_reason"] is None
    acme = await concept_named(engine, "Acme")
    schemas.validator("concept").validate(acme)
    facts = (await engine.facts(SCOPE))["items"]
    about_acme = sorted(f["id"] for f in facts if f["subject"]["name"] == "Acme")
    assert sorted(acme["supported_by"]["facts"]) == about_acme
    for fact_id in about_acme:
        assert f"[{fact_id}]" in acme["summary"]  # every consulted record is cited
    assert acme["_partial"] is False and acme["stance"] == "supported" and acme["coverage_score"] == 1.0
    assert acme["version"] == 3  # one version per commit that changed it: three facts, three versions
    stripe = await concept_named(engine, "Stripe", include_deprecated=True)
    # one record is not enough to be complete: said honestly
    assert stripe["_partial"] is True and stripe["_partial_reason"] == "insufficient_supporting_facts"
    assert acme["edges"] == [{"to": stripe["id"], "relation": "depends_on", "weight": 0.95, "vocabulary": "default"}]
    related = await engine.related_concepts(SCOPE, acme["id"])
    assert [(i["concept"]["id"], i["relation"], i["depth"]) for i in related["items"]] == [
        (stripe["id"], "depends_on", 1)]
    assert (await engine.related_concepts(SCOPE, acme["id"], relation="is_a"))["items"] == []
    assert (await engine.get_concept(SCOPE, acme["id"]))["id"] == acme["id"]
    topical = await engine.understanding(SCOPE, topic="seat count")
    assert [c["name"] for c in topical["items"]] == ["Acme"]
    reach = await engine.understanding(SCOPE, topic="seat count", depth=2)
    assert sorted(c["name"] for c in reach["items"]) == ["Acme", "Stripe"]


async def test_versions_are_kept_and_read_as_of(engine, clock):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "poc"))
    first = await concept_named(engine, "Acme")
    clock.advance(3600)
    await say(engine, ("Acme", "deal_stage", "signed", "2026-05-13T16:42:00Z"))
    now = await engine.get_concept(SCOPE, first["id"])
    assert now["version"] == first["version"] + 1
    assert now["previous_version"] == f"{first['id']}@v{first['version']}"
    assert "deal stage signed [fact_" in now["summary"] and "deal stage poc [fact_" not in now["summary"]
    assert "deal stage poc (contradicted" in now["summary"]  # the belief it revised says so
    before = await engine.get_concept(SCOPE, first["id"], as_of=first["recorded_from"])
    assert before["summary"] == first["summary"] and before["recorded_to"] == now["recorded_from"]
    listed = await engine.understanding(SCOPE, as_of=first["recorded_from"])
    assert [c["version"] for c in listed["items"] if c["id"] == first["id"]] == [first["version"]]
    with pytest.raises(NotFound):
        await engine.get_concept(SCOPE, first["id"], as_of="2020-01-01T00:00:00Z")


async def test_same_as_coalesces_into_the_older_concept(engine):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"),
              ("Acme Corp", "industry", "software"), ("Acme Corp", "hq", "Berlin"))
    acme, corp = await concept_named(engine, "Acme"), await concept_named(engine, "Acme Corp")
    await say(engine, ("Acme Corp", "same_as", "ent:Acme"))
    alias = await engine.get_concept(SCOPE, corp["id"]) if corp["id"] < acme["id"] else None
    older, newer = sorted([acme, corp], key=lambda c: c["id"])
    merged = await engine.get_concept(SCOPE, newer["id"])  # lookups follow the alias
    assert merged["id"] == older["id"] and alias in (None, merged)
    assert {*acme["supported_by"]["facts"], *corp["supported_by"]["facts"]} <= set(merged["supported_by"]["facts"])
    listed = await engine.understanding(SCOPE, include_deprecated=True)
    newer_now = next(c for c in listed["items"] if c["id"] == newer["id"])
    assert newer_now["canonical_id"] == older["id"] and newer_now["stance"] == "deprecated"
    assert newer["id"] not in [c["id"] for c in (await engine.understanding(SCOPE))["items"]]


async def test_a_same_as_that_ends_splits_the_concept(engine, clock):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"),
              ("Acme Corp", "industry", "software"), ("Acme Corp", "hq", "Berlin"),
              ("Acme Corp", "same_as", "ent:Acme"))
    merged = await concept_named(engine, "Acme Corp")  # the group is named after its owner
    assert len((await engine.understanding(SCOPE))["items"]) == 1
    # a later write about the canonical subject keeps the group: the link is the alias's fact
    await say(engine, ("Acme", "region", "EMEA"))
    kept = await engine.get_concept(SCOPE, merged["id"])
    assert kept["stance"] != "deprecated" and set(merged["supported_by"]["facts"]) < set(kept["supported_by"]["facts"])
    clock.advance(60)
    await engine.experience(triple("Acme Corp", "same_as", "ent:Acme", negated=True, observed_at="2026-05-13T15:43:00Z"),
                            wait="consolidated")  # fmt: skip
    old = await engine.get_concept(SCOPE, merged["id"])
    assert old["stance"] == "deprecated" and old["valid_to"] is not None and old["version"] == kept["version"] + 1
    halves = (await engine.understanding(SCOPE))["items"]
    assert sorted(c["name"] for c in halves) == ["Acme", "Acme Corp"]
    for half in halves:
        schemas.validator("concept").validate(half)
        assert half["derived_from"] == [merged["id"]] and half["id"] != merged["id"] and half["canonical_id"] is None
    acme = next(c for c in halves if c["name"] == "Acme")
    assert {f for f in acme["supported_by"]["facts"]} <= set(kept["supported_by"]["facts"])
    assert "industry" not in acme["summary"] and "region EMEA" in acme["summary"]
    recalled = await engine.recall({"scope": SCOPE, "query": "Acme Corp industry", "include": ["understanding"]})
    assert sorted(c["id"] for c in recalled["layers"]["understanding"]) == sorted(c["id"] for c in halves)
    # history is kept: as of before the split, the merged concept read as it was
    before = await engine.get_concept(SCOPE, merged["id"], as_of=kept["last_synthesized_at"])
    assert before["stance"] == kept["stance"] and before["valid_to"] is None
    # the halves go on as concepts of their own: a new fact is a new version, derived_from kept
    await say(engine, ("Acme", "employees", 900))
    later = await engine.get_concept(SCOPE, acme["id"])
    assert later["version"] == acme["version"] + 1 and later["derived_from"] == [merged["id"]]


async def test_forgetting_the_same_as_fact_splits_the_concept(engine):
    await say(engine, ("Acme", "seat_count", 200), ("Acme Corp", "industry", "software"),
              ("Acme Corp", "same_as", "ent:Acme"))
    merged = (await engine.understanding(SCOPE))["items"]
    assert len(merged) == 1
    await engine.forget({"scope": SCOPE, "layers": ["facts", "beliefs"], "selector": {"predicate": "same_as"}})
    halves = (await engine.understanding(SCOPE))["items"]
    assert sorted(c["name"] for c in halves) == ["Acme", "Acme Corp"]
    assert all(c["derived_from"] == [merged[0]["id"]] for c in halves)
    old = await engine.get_concept(SCOPE, merged[0]["id"])
    assert old["stance"] == "deprecated" and old["valid_to"] is not None


async def test_a_cancel_rewrites_the_concepts_that_cited_it(engine, clock):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"))
    first = await concept_named(engine, "Acme")
    clock.advance(60)
    secret = await engine.experience(triple("Acme", "hq", "Zanzibar", observed_at="2026-05-13T15:43:00Z"),
                                     wait="consolidated")  # fmt: skip
    assert "Zanzibar" in (await engine.get_concept(SCOPE, first["id"]))["summary"]
    await engine.cancel(secret.event_id)
    now = await engine.get_concept(SCOPE, first["id"])
    assert "Zanzibar" not in now["summary"] and now["summary"] == first["summary"]
    # history is rewritten, as for facts: no version read as of any moment shows it
    for moment in (first["recorded_from"], now["recorded_from"], now["last_synthesized_at"]):
        assert "Zanzibar" not in str(await engine.get_concept(SCOPE, first["id"], as_of=moment))
    assert now["version"] == 1 and now["previous_version"] is None
    pack = await engine.recall({"scope": SCOPE, "query": "Acme Zanzibar hq", "include": ["understanding"]})
    assert "Zanzibar" not in str(pack["layers"])


async def test_a_forget_rewrites_concepts_and_the_synthesize_job_scores_them(engine):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"))
    acme = await concept_named(engine, "Acme")
    await engine.forget({"scope": SCOPE, "layers": ["facts"], "selector": {"predicate": "seat_count"}})
    # the forget re-synthesized the concept without what it deleted, history included
    now = await engine.get_concept(SCOPE, acme["id"])
    assert now["supported_by"]["facts"] and "seat count" not in now["summary"]
    assert now["version"] == 1 and now["support_loss_fraction"] == 0.0
    assert "seat count" not in str(await engine.get_concept(SCOPE, acme["id"], as_of=acme["recorded_from"]))
    started = await engine.concepts.start({"scope": SCOPE, "force": True}, caller="user:alice", tenant_id="default")
    done = await engine.concepts.wait(started["job_id"])
    assert done["status"] == "completed" and done["progress"]["scopes_done"] == 1, done
    forced = await engine.get_concept(SCOPE, acme["id"])
    # force: a new version though nothing changed; nothing it cites is missing
    assert forced["version"] == 2 and forced["support_loss_fraction"] == 0.0
    assert forced["summary"] == now["summary"]
    coverage = await engine.understanding_coverage(SCOPE)
    assert coverage["concept_count"] == 1 and coverage["coverage_score"] == 1.0 and coverage["_partial"] is False
    assert coverage["by_topic"][0]["concepts"] == 1


async def test_synthesize_rejects_bad_requests(engine):
    for bad, field in (({}, "scope"), ({"scope": SCOPE, "topics": "x"}, "topics"),
                       ({"scope": SCOPE, "force": "yes"}, "force"), ({"scope": SCOPE, "nope": 1}, "nope")):
        with pytest.raises(InvalidBody) as failed:
            await engine.concepts.start(bad, caller="user:alice", tenant_id="default")
        assert failed.value.details["field"] == field
    with pytest.raises(InvalidQuery):
        await engine.understanding(SCOPE, depth=9)


async def test_vocabularies_normalise_predicates_and_label_edges(engine):
    vocab = engine.vocabularies
    created = await vocab.create("default", {"name": "sales_v1", "predicates": [
        {"id": "seat_count", "datatype": "integer", "aliases": ["seats", "Seat Total"]}]})
    assert created["version"] == 1
    with pytest.raises(VocabularyExists):
        await vocab.create("default", {"name": "sales_v1", "predicates": [{"id": "x"}]})
    await vocab.create("default", {"name": "org", "kind": "relation",
                                   "relations": [{"id": "part_of", "aliases": ["division_of"]},
                                                 {"id": "supplies", "aliases": ["vendor_of"]}]})
    await say(engine, ("Acme", "seats", 200), ("Acme", "vendor_of", "ent:Globex"), ("Globex", "hq", "Oslo"),
              ("Globex", "industry", "retail"))
    facts = (await engine.facts(SCOPE))["items"]
    assert "seat_count" in {f["predicate"] for f in facts} and "seats" not in {f["predicate"] for f in facts}
    acme = await concept_named(engine, "Acme")
    assert [(e["relation"], e["vocabulary"]) for e in acme["edges"]] == [("supplies", "org")]
    replaced = await vocab.replace("default", "sales_v1", {"predicates": [{"id": "seat_count"}]})
    assert replaced["version"] == 2 and (await vocab.get("default", "sales_v1"))["version"] == 2
    for bad in ({"name": "x"}, {"name": "x", "predicates": [{"id": ""}]}, {"name": "x", "kind": "odd"},
                {"name": "x", "predicates": [{"id": "a", "aliases": ["b"]}, {"id": "b"}]}):
        with pytest.raises(InvalidBody):
            await vocab.create("default", bad)
    with pytest.raises(NotFound):
        await vocab.get("default", "nope")


async def test_recall_returns_concepts_under_their_own_budget(engine, clock):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"),
              ("Acme", "depends_on", "ent:Stripe"), ("Stripe", "industry", "payments"),
              ("Stripe", "hq", "Dublin"), ("Globex", "industry", "retail"), ("Globex", "hq", "Oslo"))
    acme = await concept_named(engine, "Acme")
    pack = await engine.recall({"scope": SCOPE, "query": "Acme seat count", "diagnostics": "full"})
    schemas.validator("stratified_pack").validate(pack)
    concepts = pack["layers"]["understanding"]
    assert concepts[0]["id"] == acme["id"] and concepts[0]["ranked_position"] == 1
    assert concepts[0]["summary"] == acme["summary"] and concepts[0]["scope"] == SCOPE
    cited = acme["supported_by"]["facts"] + acme["supported_by"]["beliefs"]
    assert pack["provenance"]["citations"][acme["id"]] == cited
    assert pack["diagnostics"]["items"][acme["id"]]["layer"] == "understanding"
    # the understanding budget: one concept; what it left out is counted, never dropped silently
    one = await engine.recall({"scope": SCOPE, "query": "industry hq seat count deal stage", "include": ["understanding"],
                               "budgets": {"per_layer_limits": {"understanding": 1}}})  # fmt: skip
    assert len(one["layers"]["understanding"]) == 1 and one["layers"]["facts"] == []
    assert one["diagnostics"]["per_layer_evictions"]["understanding"] >= 2, one["diagnostics"]
    mmr = next(p for p in one["provenance"]["trail"] if p["phase"] == "mmr")
    assert mmr["per_layer_evictions"]["understanding"] == one["diagnostics"]["per_layer_evictions"]["understanding"]
    none = await engine.recall({"scope": SCOPE, "query": "Acme", "budgets": {"per_layer_limits": {"understanding": 0}}})
    assert none["layers"]["understanding"] == [] and none["layers"]["facts"]
    # a filter reads a concept's subjects and topics; as_of reads the version then recorded
    filtered = await engine.recall({"scope": SCOPE, "query": "industry", "include": ["understanding"],
                                    "filters": {"predicate": {"eq": "hq"}}})  # fmt: skip
    assert sorted(c["name"] for c in filtered["layers"]["understanding"]) == ["Globex", "Stripe"]
    clock.advance(3600)
    await say(engine, ("Acme", "seat_count", 250, "2026-05-13T16:42:00Z"))
    now = await engine.get_concept(SCOPE, acme["id"])
    assert now["version"] > acme["version"]
    then = await engine.recall({"scope": SCOPE, "query": "Acme seat count", "include": ["understanding"],
                                "temporal": {"as_of": acme["recorded_from"]}})  # fmt: skip
    assert [(c["id"], c["version"]) for c in then["layers"]["understanding"] if c["id"] == acme["id"]] == [
        (acme["id"], acme["version"])]
    latest = await engine.recall({"scope": SCOPE, "query": "Acme seat count", "include": ["understanding"]})
    assert latest["layers"]["understanding"][0]["version"] == now["version"]


async def test_recall_leaves_out_deprecated_and_alias_concepts(engine):
    await say(engine, ("Acme", "seat_count", 200), ("Acme", "deal_stage", "signed"),
              ("Acme Corp", "industry", "software"), ("Acme Corp", "hq", "Berlin"),
              ("Acme Corp", "same_as", "ent:Acme"))
    listed = (await engine.understanding(SCOPE, include_deprecated=True))["items"]
    alias = next(c for c in listed if c["canonical_id"])
    pack = await engine.recall({"scope": SCOPE, "query": "Acme Corp industry software", "include": ["understanding"]})
    ids = [c["id"] for c in pack["layers"]["understanding"]]
    assert alias["canonical_id"] in ids and alias["id"] not in ids


async def test_http_understanding_and_vocabularies(tmp_path):
    from .server_support import body, server

    async with server(tmp_path, enable_experimental=True) as h:
        scope = "org:acme/user:alice"
        for text in ("Acme has 200 seats.", "Acme is in Berlin.", "Globex has 50 seats."):
            response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text, scope=scope))
            assert response.status_code == 200, data
        response, page = await h.call("GET", f"/v1/understanding?scope={scope}")
        assert response.status_code == 200 and page["_partial"] is False, page
        for item in page["items"]:
            schemas.validator("concept").validate(item)
        response, pack = await h.call("POST", "/v1/recall", json={
            "scope": scope, "query": "Acme seats", "include": ["understanding", "facts"],
            "budgets": {"per_layer_limits": {"understanding": 1}}})  # fmt: skip
        assert response.status_code == 200, pack
        assert len(page["items"]) > 1, page  # Acme's and Globex's
        assert [c["name"] for c in pack["layers"]["understanding"]] == ["Acme"], pack
        assert pack["diagnostics"]["per_layer_evictions"]["understanding"] == len(page["items"]) - 1, pack
        response, coverage = await h.call("GET", f"/v1/understanding/coverage?scope={scope}")
        assert response.status_code == 200 and coverage["concept_count"] == len(page["items"]), coverage
        response, data = await h.call("GET", f"/v1/understanding?scope={scope}&depth=0")
        assert response.status_code == 400 and data["details"]["field"] == "depth", data
        response, data = await h.call("GET", f"/v1/understanding/concept_nope?scope={scope}")
        assert response.status_code == 404, data
        response, started = await h.call("POST", "/v1/understanding/synthesize", json={"scope": scope})
        assert response.status_code == 202 and started["lifecycle_stream"].endswith(started["job_id"]), started
        done = await h.engine.concepts.wait(started["job_id"])
        assert done["status"] == "completed", done
        response, data = await h.call("POST", "/v1/vocabularies", "user:root",
                                      json={"name": "sales", "predicates": [{"id": "seat_count"}]})  # fmt: skip
        assert response.status_code == 201 and data["version"] == 1, data
        response, data = await h.call("POST", "/v1/vocabularies", "user:root",
                                      json={"name": "sales", "predicates": [{"id": "seat_count"}]})  # fmt: skip
        assert response.status_code == 409 and data["error_code"] == "VOCABULARY_EXISTS", data
        response, data = await h.call("PUT", "/v1/vocabularies/sales", "user:root", json={"predicates": "x"})
        assert response.status_code == 400 and data["details"]["field"] == "predicates", data
        response, data = await h.call("GET", "/v1/vocabularies/sales")
        assert response.status_code == 200 and data["predicates"] == [{"id": "seat_count"}], data
