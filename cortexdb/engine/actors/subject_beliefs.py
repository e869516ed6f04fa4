"""The beliefs of the subjects the derivation lane revises and synthesizes, kept current at each
belief write so a batch does not read back every belief of a subject it touches (decisions.md,
"A running summary of each subject's beliefs").

For a subject, once loaded (``load``: one ``BI`` range read and the beliefs it names, as
``PartitionState.beliefs_of`` returns them: committed, plus this batch's changes in the lane's
cache), ``SubjectBeliefs`` holds
- ``ids``: every claim of the subject that has a stored belief (its ``BI`` row) and the belief's
  id, so revision knows without a read that a claim has none, and reads those it has by id;
- ``live``: a ``derive.concepts.BeliefDigest`` of each live belief (not closed on the recorded
  axis, not deprecated, not excluded from recall), what concept synthesis reads of it;
- ``unsettled``: the claims whose belief is partial (gated), contradicts another or has ended
  (``valid_to``), so revision knows without reading a belief whether a claim it was not asked
  to revise would revise to what it is (``stages.consolidate.independent``).
The lane's belief writes keep both current (``note``: every belief a revision keeps, creates or
deletes, through ``PartitionState.keep_belief``).  What changes
beliefs elsewhere drops them all (``clear``: a forget or an erasure, a rebuild's ``reset``), and
they load again on next use.  Bounded by ``derived_cache_records`` subjects and sixteen digests a
record (``trim``): the least recently used subjects go first; a subject dropped loads again.
"""

from __future__ import annotations

from ..derive.concepts import BeliefDigest, digest
from ..model import Belief

DIGESTS_PER_RECORD = 16  # the digests held together, per derived_cache_records


def live(belief: Belief | None) -> bool:
    """A belief synthesis consults (``understanding.Synthesis``)."""
    return (belief is not None and belief.recorded_to is None and belief.stance != "deprecated"
            and not belief.excluded_from_recall)  # fmt: skip


def settled(belief: Belief) -> bool:
    """A belief a revision of unchanged evidence leaves as it is: live on the valid axis, not
    waiting on the revision-policy gate, contradicting nothing."""
    return not belief.partial and not belief.contradicts and belief.valid_to is None


class Summary:
    __slots__ = ("ids", "live", "unsettled")

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # claim -> its belief's id (a ``BI`` row, stored or this batch's)
        self.live: dict[str, BeliefDigest] = {}  # claim -> the digest of its live belief
        self.unsettled: set[str] = set()  # claims of ``ids`` whose belief is not ``settled``


class SubjectBeliefs:
    __slots__ = ("subjects", "held")

    def __init__(self) -> None:
        self.subjects: dict[str, Summary] = {}  # least recently used first
        self.held = 0  # digests held in all

    def get(self, subject_id: str) -> Summary | None:
        summary = self.subjects.pop(subject_id, None)
        if summary is not None:
            self.subjects[subject_id] = summary  # most recently used
        return summary

    def load(self, subject_id: str, claims: dict[str, Belief | None]) -> Summary:
        """A subject's summary from its beliefs by claim (``beliefs_of``: ``BI``'s claims with
        this batch's changes)."""
        self.drop(subject_id)
        summary = self.subjects[subject_id] = Summary()
        for claim, belief in claims.items():
            if belief is not None:
                summary.ids[claim] = belief.id
                if not settled(belief):
                    summary.unsettled.add(claim)
                if live(belief):
                    summary.live[claim] = digest(belief)
        self.held += len(summary.live)
        return summary

    def note(self, claim: str, belief: Belief | None) -> None:
        """A claim's belief as revision leaves it (None: deleted, or none)."""
        summary = self.subjects.get(claim.partition("\x1f")[0])
        if summary is None:
            return  # not loaded: its first use reads it
        if belief is None:
            summary.ids.pop(claim, None)
            summary.unsettled.discard(claim)
        else:
            summary.ids[claim] = belief.id
            if settled(belief):
                summary.unsettled.discard(claim)
            else:
                summary.unsettled.add(claim)
        before = len(summary.live)
        if live(belief):
            held = summary.live.get(claim)  # what the digest reads of it unchanged: kept
            if held is None or (held.id, held.confidence, held.stance) != (belief.id, belief.confidence, belief.stance):
                summary.live[claim] = digest(belief)
        else:
            summary.live.pop(claim, None)
        self.held += len(summary.live) - before

    def drop(self, subject_id: str) -> None:
        summary = self.subjects.pop(subject_id, None)
        if summary is not None:
            self.held -= len(summary.live)

    def clear(self) -> None:
        self.subjects.clear()
        self.held = 0

    def trim(self, limit: int) -> None:
        """At most ``limit`` subjects and ``DIGESTS_PER_RECORD × limit`` digests, down to three
        quarters of the bound when over it, the least recently used first."""
        budget = DIGESTS_PER_RECORD * limit
        if len(self.subjects) <= limit and self.held <= budget:
            return
        for subject_id in list(self.subjects):
            if len(self.subjects) <= limit * 3 // 4 and self.held <= budget * 3 // 4:
                break
            self.drop(subject_id)
