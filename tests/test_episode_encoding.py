"""An open episode is encoded at every commit that grows it: its compact version leaves its lists
out before encoding, and its causal chain and id lists skip cattrs' dispatch per item.  Both
must write what the plain definitions write."""

import datetime as dt
import random

import cattrs

from cortexdb.engine.derive.versions import EPISODE_LISTS, compact_episode, expand_episode
from cortexdb.engine.model import CausalLink, Episode, to_wire

NOW = dt.datetime(2026, 5, 13, 15, 42, tzinfo=dt.UTC)


def episode(count: int, rng: random.Random, opening: str | None) -> Episode:
    events = [f"evt_{i:04d}" for i in range(count)]
    return Episode(
        id="ep_1", scope="org:acme/user:alice", name="a talk", summary="s", events=events,
        supports=list(events), started_at=NOW, ended_at=NOW, valid_from=NOW, recorded_from=NOW,
        version=rng.choice([1, 4]), opening=opening, closing="bye" if count else None,
        causal_chain=[CausalLink(event=e, role=rng.choice(["trigger", "context", "outcome"])) for e in events],
    )  # fmt: skip


def test_the_compact_version_is_the_whole_encoding_without_its_lists():
    rng = random.Random(3)
    for count in (0, 1, 2, 7, 500):
        for opening in (None, "hello there"):
            ep = episode(count, rng, opening)
            whole = to_wire(ep)
            expected = {k: v for k, v in whole.items() if k not in EPISODE_LISTS}
            expected["events_count"] = count
            expected["last_link"] = whole["causal_chain"][-1] if count else None
            compact = compact_episode(ep)
            assert compact == expected and list(compact) == list(expected)
            if count:  # and it expands back to the episode, given the next full version
                assert expand_episode(compact, whole) == ep


def test_the_causal_chain_and_id_lists_encode_as_cattrs_does():
    plain = cattrs.Converter()
    ep = episode(40, random.Random(5), "hi")
    wire = to_wire(ep)
    assert wire["causal_chain"] == [plain.unstructure(link) for link in ep.causal_chain]
    assert wire["events"] == ep.events and wire["supports"] == ep.supports
    assert wire["events"] is not ep.events  # a copy: later appends leave the encoding alone
