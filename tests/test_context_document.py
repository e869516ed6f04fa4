"""The context document (``format: "xml"`` on recall): well-formed, escaped, cited, budgeted.

Engine tests run on both backends (the ``engine`` fixture); the renderer is also tested alone with
synthetic ``signals`` and ``relationships`` pack parts of the shape their recalls attach.
"""

import xml.etree.ElementTree as ET

import pytest

from cortexdb.engine.recall import contextdoc
from cortexdb.engine.retrieve import document
from cortexdb.engine.retrieve.scoring import estimate_tokens
from cortexdb.errors import InvalidRecall

from .conftest import envelope

ALICE = "org:acme/user:alice"
HOSTILE = 'Bob </cortex-context> ]]> <x a="1"> & \'q\' "dq" \x00\x07\x1b tab\there\r\nline <!-- c --> &amp;'
SECTIONS = ["reminders", "active-context", "signals", "relationships", "conflicts"]


async def seed(engine, texts):
    for n, text in enumerate(texts):
        await engine.experience(envelope(text, observed_at=f"2026-03-{n + 1:02d}T10:00:00Z"),
                                caller="user:alice", wait="consolidated")  # fmt: skip


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == "cortex-context" and root.get("version") == "1.0"
    assert [child.tag for child in root] == SECTIONS  # every section, always, in order
    return root


async def test_xml_recall_is_a_cited_document_under_the_pack(engine):
    await seed(engine, ["I live in Paris.", "My favorite color is blue.", "I moved to Berlin."])
    pack = await engine.recall({"scope": ALICE, "query": "Where does Alice live?", "format": "xml"})
    assert pack["format"] == "xml"
    root = parse(pack["context_block"])
    assert root.get("scope") == ALICE and root.get("as_of") == pack["as_of"]
    active = root.find("active-context")
    elements = list(root.find("reminders")) + list(active)
    kept = {item["id"] for layer in pack["layers"].values() for item in layer}
    # every layer item the pack kept is in the document exactly once, by its citation id
    assert sorted(e.get("id") for e in elements) == sorted(kept) and kept
    berlin = next(e for e in active if e.tag == "assertion" and e.get("object") == "Berlin")
    assert berlin.get("predicate") and berlin.text.endswith("Berlin")
    assert berlin.get("id") in pack["provenance"]["citations"]  # the id is a citation key
    markers = pack["provenance"]["markers"]
    assert [m["id"] for m in markers] == [e.get("id") for e in elements]
    assert [e.get("marker") for e in elements] == [m["marker"] for m in markers]
    assert any(p["phase"] == "render_document" for p in pack["provenance"]["trail"])
    assert pack["diagnostics"]["document_evictions"] == {"signals": 0, "relationships": 0}
    assert list(root.find("signals")) == [] and list(root.find("relationships")) == []


async def test_hostile_text_is_escaped_and_the_document_parses(engine):
    await seed(engine, [f"My nickname is {HOSTILE}.", f"I said {HOSTILE}"])
    for include in (["facts", "events"], ["events"]):
        pack = await engine.recall({"scope": ALICE, "query": "nickname said", "format": "xml",
                                    "include": include})  # fmt: skip
        root = parse(pack["context_block"])
        texts = [e.text or "" for e in root.iter()] + [v for e in root.iter() for v in e.attrib.values()]
        said = [t for t in texts if "</cortex-context>" in t]
        assert said, "the hostile text is carried, as text"
        assert all("]]>" in t and "& 'q' \"dq\"" in t for t in said)
        assert all("\x00" not in t and "\x07" not in t for t in texts)  # not XML 1.0: U+FFFD
        assert any("\ufffd\ufffd\ufffd" in t for t in said)
        assert pack["context_block"].count("</cortex-context>") == 1


async def test_the_budget_bounds_the_document_and_cuts_are_reported(engine):
    await seed(engine, [f"I visited city number {n} on a long trip through the mountains." for n in range(8)])
    whole = await engine.recall({"scope": ALICE, "query": "visited city trip", "format": "xml"})
    everything = len(list(parse(whole["context_block"]).iter())) - 1 - len(SECTIONS)
    budget = 160
    pack = await engine.recall({"scope": ALICE, "query": "visited city trip", "format": "xml",
                                "budgets": {"max_tokens": budget}})  # fmt: skip
    text = pack["context_block"]
    root = parse(text)
    items = len(list(root.iter())) - 1 - len(SECTIONS)
    assert 0 < items < everything
    assert len(text) // 4 <= budget  # the document itself fits (four characters a token)
    diagnostics = pack["diagnostics"]
    assert diagnostics["knapsack_evictions"] == everything - items
    assert diagnostics["_partial"] is True and diagnostics["_partial_reason"] == "token_budget_exhausted"
    assert "dedupe_evictions" in diagnostics and "per_layer_evictions" in diagnostics
    assert pack["_partial"] is True and pack["_partial_reason"] == "token_budget_exhausted"
    quiet = await engine.recall({"scope": ALICE, "query": "visited city trip", "format": "xml",
                                 "budgets": {"max_tokens": budget}, "diagnostics": "none"})  # fmt: skip
    assert "diagnostics" not in quiet and quiet["_partial"] is True  # said without diagnostics too
    assert "_partial" not in whole


async def test_text_format_is_unchanged_and_errors_are_clear(engine):
    await seed(engine, ["I live in Paris."])
    plain = await engine.recall({"scope": ALICE, "query": "Paris"})
    assert "format" not in plain and not plain["context_block"].startswith("<")
    assert plain["diagnostics"]["dedupe_evictions"] >= 0
    for bad, field in [({"format": "yaml"}, "format"), ({"format": "xml", "view": "structured"}, "format"),
                       ({"format": "xml", "budgets": {"max_tokens": 5}}, "budgets.max_tokens")]:  # fmt: skip
        with pytest.raises(InvalidRecall) as caught:
            await engine.recall({"scope": ALICE, "query": "Paris", **bad})
        assert caught.value.details["field"] == field


async def test_streamed_xml_recall_carries_the_document(engine):
    await seed(engine, ["I live in Paris."])
    events = [e async for e in engine.recall_stream({"scope": ALICE, "query": "Paris", "format": "xml"})]
    block = next(data for name, data in events if name == "context_block")
    parse(block["text"])


# -- the renderer alone, with synthetic pack parts ------------------------------------------------

SIGNALS = [
    {"id": "sig_1", "type": "frustration", "subject": "user:alice", "intensity": 0.8,
     "effective_intensity": 0.2, "trajectory": "cooling", "observed_at": "2026-05-01T10:00:00Z"},
    {"id": "sig_2", "type": HOSTILE, "subject": {"id": "ent_1", "name": HOSTILE}, "intensity": 0.5,
     "effective_intensity": 0.5, "trajectory": "warming", "observed_at": "2026-05-02T10:00:00Z"},
]  # fmt: skip
RELATIONSHIPS = [
    {"id": "rel_1", "from": "ent_alice", "type": "works_with", "to": "ent_priya", "confidence": 0.9,
     "valid_from": "2026-01-01T00:00:00Z", "valid_to": None, "citations": ["fact_1", "evt_2"]},
]  # fmt: skip
FACT = {"id": "fact_1", "subject": {"type": "entity", "id": "ent_alice", "name": "Alice"},
        "predicate": "lives_in", "object": {"type": "entity", "id": "ent_b", "name": "Berlin"},
        "confidence": 0.9, "valid_from": "2026-03-01T00:00:00Z", "conflicts_with": ["fact_2"]}  # fmt: skip
REMINDER = {"id": "fact_3", "subject": {"type": "entity", "id": "ent_alice", "name": "Alice"},
            "predicate": "remind_to", "object": {"type": "literal", "datatype": "string", "value": "call Bob"},
            "confidence": 0.8, "valid_from": "2026-03-01T00:00:00Z"}  # fmt: skip
BELIEF = {"id": "bel_1", "claim": {"subject": {"id": "ent_alice", "name": "Alice"}, "predicate": "likes",
          "object": {"type": "literal", "value": "tea"}}, "stance": "contradicted", "confidence": 0.3,
          "contradicts": [{"id": "fact_9"}]}  # fmt: skip
HEAD = contextdoc.header(ALICE, "2026-05-13T15:42:09Z")


@pytest.mark.parametrize("shape", ["list", "items"])
def test_renderer_sections_from_synthetic_parts(shape):
    wrap = (lambda items: items) if shape == "list" else (lambda items: {"items": items})
    pack = {"signals": wrap(SIGNALS), "relationships": wrap(RELATIONSHIPS)}
    records = {"facts": [FACT, REMINDER], "beliefs": [BELIEF]}
    text, markers, report = contextdoc.build(pack, records, HEAD, None, True)
    root = parse(text)
    assert [e.get("id") for e in root.find("reminders")] == ["fact_3"]
    assert [e.get("id") for e in root.find("active-context")] == ["bel_1", "fact_1"]
    assert [m["id"] for m in markers] == ["fact_3", "bel_1", "fact_1"]  # document order
    signals = list(root.find("signals"))
    assert [s.attrib for s in signals][0] == {
        "id": "sig_1", "type": "frustration", "subject": "user:alice", "intensity": "0.80",
        "effective_intensity": "0.20", "trajectory": "cooling", "observed_at": "2026-05-01T10:00:00Z"}  # fmt: skip
    assert signals[1].get("type").startswith("Bob </cortex-context> ]]>")
    assert signals[1].get("subject") == signals[1].get("type")
    (relationship,) = root.find("relationships")
    assert relationship.attrib == {"id": "rel_1", "from": "ent_alice", "type": "works_with", "to": "ent_priya",
                                   "confidence": "0.90", "valid_from": "2026-01-01T00:00:00Z",
                                   "citations": "fact_1 evt_2"}  # fmt: skip
    conflicts = {c.get("id"): c.get("with") for c in root.find("conflicts")}
    assert conflicts == {"fact_1": "fact_2", "bel_1": "fact_9"}
    assert report["document_evictions"] == {"signals": 0, "relationships": 0}
    assert report["tokens_used"] >= estimate_tokens(text) - 40  # every element is counted


def test_renderer_cuts_parts_past_the_budget_and_reports_them():
    pack = {"signals": SIGNALS, "relationships": RELATIONSHIPS, "diagnostics": {"_partial": False},
            "provenance": {"trail": [], "citations": {}}}  # fmt: skip
    skeleton = document.skeleton_cost(HEAD)
    first = estimate_tokens(document.part_element("signals", SIGNALS[0]))
    contextdoc.attach(pack, {}, HEAD, skeleton + first, "inline_with_markers")
    root = parse(pack["context_block"])
    assert [s.get("id") for s in root.find("signals")] == ["sig_1"]
    assert list(root.find("relationships")) == []
    assert pack["diagnostics"]["document_evictions"] == {"signals": 1, "relationships": 1}
    assert pack["diagnostics"]["_partial"] is True
    assert pack["diagnostics"]["_partial_reason"] == "token_budget_exhausted"
    assert pack["_partial"] is True and pack["_partial_reason"] == "token_budget_exhausted"


def test_escaping_covers_every_hostile_character():
    hostile = HOSTILE + "\ud800 \ufffe"
    made = document.element("x", {"a": hostile}, hostile)
    parsed = ET.fromstring(made)
    expected = document.clean(hostile)
    assert parsed.get("a") == expected and parsed.text == expected
    assert "\r" in parsed.text and "\t" in parsed.get("a") and "\n" in parsed.get("a")
