"""An episode candidate is ranked on its header (docs/decisions.md, "An episode candidate is its
header until it is chosen") and, chosen, listed from it without a whole decode ("A chosen episode
stays its header"): the header is the stored record less ``supports`` and ``causal_chain``
exactly, or nothing; a pack's episode items are the whole record less those two lists ("A pack's
episode items")."""

from __future__ import annotations

import random

from cortexdb.engine import jsoncodec
from cortexdb.engine.actors import candidates
from cortexdb.engine.actors.episode_cache import episode_header, header_bytes
from cortexdb.engine.model import Episode, from_wire, to_wire

from .conftest import envelope

SCOPE = "org:acme/user:alice"
TRICKY = ['plain', 'a "quoted" word', 'brackets ] and [', ',"supports":[', '],"started_at":', 'back\\slash',
          'ünïcode ✓', '],"strategy":"x"', '{"causal_chain":[]}', '\n\t']  # fmt: skip


def _episode(rng: random.Random) -> dict:
    events = [f"evt_{rng.randrange(10**9):09d}" for _ in range(rng.choice([0, 1, 3, 40]))]
    roles = ["trigger", "context", "decision", "outcome"]
    wire = to_wire(from_wire(dict(
        id=f"ep_{rng.randrange(10**6)}", scope=SCOPE, name=rng.choice(TRICKY), summary=" ".join(rng.sample(TRICKY, 3)),
        events=events, supports=list(events), started_at="2026-05-13T10:00:00Z", ended_at="2026-05-13T10:20:00Z",
        valid_from="2026-05-13T10:00:00Z", recorded_from="2026-05-13T10:20:01Z", version=rng.choice([1, 2, 7]),
        actors_involved=["user:alice", rng.choice(TRICKY)], centrality_score=rng.random(),
        causal_chain=[{"event": e, "role": rng.choice(roles)} for e in events], opening=rng.choice(TRICKY),
        closing=rng.choice([None, *TRICKY]), session=rng.choice([None, "s1"]),
    ), Episode))  # fmt: skip
    return wire


def test_the_header_is_the_record_less_its_two_lists_exactly():
    rng = random.Random(17)
    for _ in range(300):
        wire = _episode(rng)
        raw = jsoncodec.encode(wire)
        header = episode_header(raw)
        assert header == {k: v for k, v in jsoncodec.decode(raw).items() if k not in ("supports", "causal_chain")}
        assert list(header) == [k for k in jsoncodec.decode(raw) if k not in ("supports", "causal_chain")]


def test_a_form_the_cut_cannot_frame_exactly_gives_no_header():
    rng = random.Random(3)
    wire = _episode(rng)
    wire["causal_chain"] = [{"event": "evt_1", "role": "odd ] role"}]  # a "]" inside the chain
    assert header_bytes(jsoncodec.encode(wire)) is None
    reordered = {"causal_chain": wire.pop("causal_chain"), **wire}  # keys in another order
    assert episode_header(jsoncodec.encode(reordered)) is None
    nested = dict(wire, supports=[["evt_1"]])  # a list inside the list
    assert episode_header(jsoncodec.encode(nested)) is None
    assert episode_header(b'{"id":"ep_1"}') is None
    assert episode_header(b'{"id":"ep_1","supports":[],"started_at":"x","causal_chain":[],"strategy":"t"}') is None


def test_a_fallback_encoded_episode_gives_the_same_header():
    wire = _episode(random.Random(5))
    wire["informative_events"] = 2**70  # beyond orjson: written by the standard library's encoder
    raw = jsoncodec.encode(wire)
    assert raw[:1] == b" "
    header = episode_header(raw)
    assert header["informative_events"] == 2**70 and "causal_chain" not in header
    assert header == {k: v for k, v in wire.items() if k not in ("supports", "causal_chain")}


async def test_a_recalled_episode_is_listed_from_its_header(engine, monkeypatch):
    for minute in (0, 5, 10):
        await engine.experience(envelope(f"We planned the Oslo trip, step {minute}.",
                                         observed_at=f"2026-05-13T10:{minute:02d}:00Z"))  # fmt: skip
    await engine.experience(envelope("Much later, a word on Oslo.", observed_at="2026-05-13T14:00:00Z"))
    await engine.flush(SCOPE)
    stored = {e["id"]: e for e in (await engine.episodes(SCOPE, with_causal_chain=True))["items"]}
    assert stored and all(e["causal_chain"] for e in stored.values())
    decoded = []  # the episodes decoded whole: none (both ranked, the chosen one listed, on their headers)
    whole_of = candidates.decode_episode
    monkeypatch.setattr(candidates, "decode_episode", lambda actor, i, raw: decoded.append(i) or whole_of(actor, i, raw))
    pack = await engine.recall({"scope": SCOPE, "query": "Oslo trip", "diagnostics": "full",
                                "budgets": {"per_layer_limits": {"episodes": 1}}})  # fmt: skip
    items = pack["layers"]["episodes"]
    assert len(items) == 1
    item = items[0]
    assert len(stored) == 2 and pack["diagnostics"]["per_layer_evictions"]["episodes"] == 1 and decoded == []
    listed = {k: v for k, v in item.items() if k not in ("ranked_position", "score")}
    assert "causal_chain" not in listed and "supports" not in listed  # GET /v1/episodes/{id} has them
    expected = {k: v for k, v in stored[item["id"]].items() if k not in ("causal_chain", "supports")}
    assert listed == expected and listed["events"]
    assert pack["provenance"]["citations"][item["id"]] == listed["events"]


def test_an_open_episodes_header_is_its_wire_form_with_empty_lists():
    """``header_wire`` (what ``open_ops`` stores) unstructures an episode without its three lists:
    the same keys, order and bytes as the whole wire form with the lists emptied afterwards."""
    from cortexdb.engine.model import converter
    from cortexdb.engine.storage.episodes import LISTS, header_wire

    rng = random.Random(11)
    for number in range(300):
        wire = _episode(rng)
        if number % 5 == 0:  # a full open episode, and flags the converter renames or omits
            wire["events"] = wire["supports"] = [f"evt_{k:09d}" for k in range(500)]
            wire["causal_chain"] = [{"event": e, "role": "context"} for e in wire["events"]]
            wire["_partial"] = True
        episode = from_wire(wire, Episode)
        whole = converter.unstructure(episode)
        for name in LISTS:
            whole[name] = []
        header = header_wire(episode)
        assert list(header) == list(whole) and jsoncodec.encode(header) == jsoncodec.encode(whole)
        assert episode.events == wire["events"] and len(episode.causal_chain) == len(wire["events"])  # untouched
