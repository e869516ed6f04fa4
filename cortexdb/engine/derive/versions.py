"""Versions of derived records (docs/time.md), pure: what a closed version holds and how it reads.

A fact, a belief or an episode is a chain of versions.  The current one is the record's row;
each earlier one was *closed* (``recorded_to`` set) by the commit that changed what the record
says, and kept.  What changes a record's version:

| layer    | a new version when                                                              |
|----------|---------------------------------------------------------------------------------|
| fact     | its validity (``valid_from``, ``valid_to``), its standing (superseded, in conflict) or its exclusion changes — not when another event merely repeats it (``reinforced``: evidence accrues in place) |
| belief   | a revision (confidence, stance, ``revision_count``), its validity, a deferral or its exclusion — not when only the weights of its supports move (and its confidence by less than the delta) |
| episode  | every commit that changes it (an event joins, it is sealed, an event leaves)     |

A closed fact or belief is stored whole.  A closed episode is stored *compact*: while it is open
an episode only grows (events append), so its closed versions keep their scalar fields and the
number of events they had (``events_count``, ``last_link``), and read their lists as a prefix
of the next version stored whole (a later *full* version, or the current one).  A change that
is not an append (an event leaving) stores the version it closes whole (``full_episode``).

A fact superseded before versions existed (an old data dir) carries ``recorded_to`` on its one
row; ``split_legacy`` reads it as the two versions it would be now.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..model import Belief, Episode, Fact, from_wire, to_wire

#: the lists a compact episode version takes from the next full one
EPISODE_LISTS = ("events", "supports", "causal_chain", "opening")


def snapshot_fact(fact: Fact) -> Fact:
    """A copy of ``fact`` that the changes to come (appends to its lists) leave alone."""
    return attrs.evolve(fact, supports=list(fact.supports), conflicts_with=list(fact.conflicts_with))


def belief_revised(before: Belief, after: Belief) -> bool:
    """Whether ``after`` says something else than ``before`` (a new version) or only weighs its
    evidence anew (the same version, updated in place)."""
    return (_revised(before), before.stance, before.valid_from, before.valid_to, before.partial,
            before.revision_count, before.excluded_from_recall) != (
        _revised(after), after.stance, after.valid_from, after.valid_to, after.partial,
        after.revision_count, after.excluded_from_recall)  # fmt: skip


def _revised(belief: Belief) -> float:
    """The confidence of the belief's last revision: a move by less than the policy's delta since
    is weighed in place (``confidence`` follows the evidence), not a version."""
    return belief.confidence if belief.revised_confidence is None else belief.revised_confidence


def legacy(record: Any) -> bool:
    """A record superseded in place before versions existed: its one row carries ``recorded_to``."""
    return record.recorded_to is not None


def split_legacy(fact: Fact) -> list[Fact]:
    """An old superseded fact as its two versions: open-ended until it was superseded, then
    current with the end learnt."""
    if fact.recorded_to is None:
        return [fact]
    before = attrs.evolve(fact, valid_to=None, superseded_by=None)
    after = attrs.evolve(fact, recorded_from=fact.recorded_to, recorded_to=None, version=fact.version + 1)
    return [before, after]


# -- episodes -------------------------------------------------------------------------------------
def compact_episode(episode: Episode) -> dict[str, Any]:
    """A closed version of a growing episode: its fields without the lists, and how many events
    it had (its lists are a prefix of the next full version's)."""
    chain = episode.causal_chain
    # the lists are left out before encoding, not after: an open episode's grow with every
    # event, and its version is kept at each commit that appends to it
    wire = to_wire(attrs.evolve(episode, events=[], supports=[], causal_chain=chain[-1:], opening=None))
    last = wire["causal_chain"]
    for name in EPISODE_LISTS:
        wire.pop(name, None)
    wire["events_count"] = len(episode.events)
    wire["last_link"] = last[-1] if last else None
    return wire


def full_episode(episode: Episode) -> dict[str, Any]:
    """A closed version stored whole (what an event leaving an episode closes)."""
    return to_wire(episode)


def is_full(row: dict[str, Any]) -> bool:
    return "events" in row


def expand_episode(row: dict[str, Any], later: dict[str, Any]) -> Episode:
    """A closed episode version as a record: ``row`` itself when stored whole, else ``row`` with
    the lists of ``later`` (the next version stored whole, as a wire dict) cut to its length."""
    if is_full(row):
        return from_wire(row, Episode)
    wire = dict(row)
    count, last = wire.pop("events_count"), wire.pop("last_link")
    wire["events"], wire["supports"] = later["events"][:count], later["supports"][:count]
    chain = [dict(link) for link in later["causal_chain"][:count]]
    if last is not None and chain:
        chain[-1] = last  # its last event's role before the episode was sealed
    wire["causal_chain"], wire["opening"] = chain, later.get("opening")
    return from_wire(wire, Episode)
