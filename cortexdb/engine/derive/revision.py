"""Belief revision (DESIGN §6, reference §7.4), a pure function of one (subject, predicate) pair.

Given the pair's facts (its current facts, plus those just superseded or excluded, whose claims
need one last look), the existing belief of each claim, the tenant's floor and default revision
policy, and ``now``, ``revise_pair`` decides for every claim (an object of the pair asserted
positively):

| the claim's live evidence                     | outcome                                              |
|-----------------------------------------------|------------------------------------------------------|
| none, and no belief or a closed one           | nothing (history stays as it is)                     |
| below the floor, not ``contradicted``; or none at all | the belief is **deleted** (``below_confidence_floor`` / ``no_remaining_evidence``) |
| some, no belief yet                           | a belief is **created**                              |
| some, a belief whose confidence moves by ``min_evidence_delta`` since its last revision, or whose stance changes | **revised** — unless the policy's cooldown or hourly rate is spent: then **deferred** (``partial``, ``revision_in_progress``) |
| some, a smaller move                          | the confidence follows the evidence in place (``revised_confidence`` keeps the last revision's) |
| none, but facts superseded since the last revision held it | a **closed** belief is created (or its end moved), as a revision between them would have left it |
| the supporting facts were all superseded      | the belief is closed: ``valid_to`` = when the last of them ended |

A belief's confidence is the Beta posterior mean of its evidence (``confidence_rule:
beta_posterior``, the default).  Under the policy's ``confidence_rule: min_input`` it is never
above the confidence of its weakest supporting fact (derived knowledge is no more confident than
its weakest input): the mean and the interval are capped there, the stance follows the capped
mean, and the floor is judged against it.

Evidence *for* a claim is the weight of its live positive facts; *against* it, its live negative
facts and, for a single-valued predicate, the live positive facts of rival objects.  Rival claims
of a single-valued predicate then list each other in ``contradicts`` with their ``tension`` and
how they stand: ``newer_wins`` (one superseded the other), ``unresolved`` (recorded in conflict)
or ``higher_confidence_wins``.

Nothing here does I/O: the consolidate stage loads the beliefs, calls this, and writes what the
returned ``Revision`` says.  New ids come from ``new_id``; the inputs are never modified (a
revised belief is a copy).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import attrs

from ..model import Belief, ConfidenceInterval, Fact, RevisionPolicy, SupportRef, to_wire
from ..temporal import format_ts, parse_duration
from . import beliefs as belief_math
from .facts import object_key

HOUR = dt.timedelta(hours=1)


def claim_key(subject_id: str, predicate: str, object_key_: str) -> str:
    """The key of a belief's claim (table ``BI``)."""
    return f"{subject_id}\x1f{predicate}\x1f{object_key_}"


def claim_pair(claim: str) -> tuple[str, str]:
    """The (subject id, predicate) of a claim key."""
    subject_id, predicate, _ = claim.split("\x1f")
    return subject_id, predicate


@attrs.frozen
class Deletion:
    claim: str
    belief: Belief  # as it was
    reason: str  # below_confidence_floor | no_remaining_evidence
    at: dt.datetime

    def note(self) -> dict[str, Any]:
        """What ``GET /v1/beliefs/{id}`` answers with 410 afterwards (table ``BD``)."""
        return {"belief_id": self.belief.id, "deleted_at": format_ts(self.at), "reason": self.reason,
                "confidence": self.belief.confidence}  # fmt: skip


@attrs.define
class Revision:
    """What one pair's revision decided.  Id lists are in claim order."""

    beliefs: dict[str, Belief] = attrs.field(factory=dict)  # claim -> its belief, as revised
    created: list[str] = attrs.field(factory=list)
    revised: list[str] = attrs.field(factory=list)
    deferred: list[str] = attrs.field(factory=list)
    deleted: list[Deletion] = attrs.field(factory=list)
    new_claims: dict[str, str] = attrs.field(factory=dict)  # claim -> id of its new belief
    changed: list[Belief] = attrs.field(factory=list)  # beliefs whose stored record changed
    gated: set[str] = attrs.field(factory=set)  # claims now waiting on the policy gate
    settled: set[str] = attrs.field(factory=set)  # claims no longer waiting on it
    previous: dict[str, Belief] = attrs.field(factory=dict)  # belief id -> as it was before


@attrs.define
class _Evidence:
    supporting: list[Fact]
    against: list[Fact]
    weight_for: float
    weight_against: float
    mean: float
    lower: float
    upper: float
    stance: str


CONFIDENCE_RULES = ("beta_posterior", "min_input")


def capped(evidence: _Evidence, policy: RevisionPolicy) -> _Evidence:
    """The evidence as the policy's ``confidence_rule`` reads it (``min_input``: no more
    confident than the weakest supporting fact)."""
    if policy.confidence_rule != "min_input" or not evidence.supporting:
        return evidence
    weakest = min(f.confidence for f in evidence.supporting)
    if evidence.mean <= weakest:
        return evidence
    mean = weakest
    return attrs.evolve(evidence, mean=mean, lower=min(evidence.lower, mean), upper=min(evidence.upper, mean),
                        stance=belief_math.stance(mean, evidence.weight_against))  # fmt: skip


def claims_of(subject_id: str, predicate: str, facts: list[Fact]) -> dict[str, Fact]:
    """Claim key -> the fact that represents it: the latest positive assertion of each object
    (excluded ones still name their claim, so a belief that rested only on them is revisited and
    deleted for lack of evidence)."""
    return claims_keyed(subject_id, predicate, keyed_facts(facts))


def keyed_facts(facts: list[Fact]) -> list[tuple[str, Fact]]:
    return [(object_key(f.object), f) for f in facts]  # each fact's object key, computed once


def claims_keyed(subject_id: str, predicate: str, keyed: list[tuple[str, Fact]]) -> dict[str, Fact]:
    claims: dict[str, Fact] = {}
    # in creation order (ids are time-ordered; ``recorded_from`` is the current version's)
    for okey, fact in sorted(keyed, key=lambda kf: (not kf[1].excluded_from_recall, kf[1].id)):
        if fact.polarity > 0:
            claims[claim_key(subject_id, predicate, okey)] = fact
    return claims


def weight(fact: Fact) -> float:
    """A fact's evidence for a belief: every observation asserting it counts."""
    return fact.evidence_weight or fact.confidence


def revise_pair(
    subject_id: str, predicate: str, facts: list[Fact], beliefs: Mapping[str, Belief | None], *,
    scope: str, floor: float, policy: RevisionPolicy, now: dt.datetime, new_id: Callable[[], str],
    claims: Mapping[str, Fact] | None = None, suppressed: AbstractSet[str] = frozenset(),
    keyed: list[tuple[str, Fact]] | None = None) -> Revision:  # fmt: skip
    """Revise the beliefs of one pair's claims from its facts (the table in the module doc).
    ``beliefs`` holds the stored belief (or None) of every claim ``claims_of`` names; a caller
    that computed ``claims_of(subject_id, predicate, facts)`` to load them passes it as
    ``claims`` (not computed twice; ``keyed``: its ``keyed_facts``).  No belief is created for a
    ``suppressed`` claim (one a forget removed)."""
    out = Revision()
    before: dict[str, Belief] = {}  # each existing belief as it was (revision changes a copy)
    keyed = keyed_facts(facts) if keyed is None else keyed
    if claims is None:
        claims = claims_keyed(subject_id, predicate, keyed)
    evidence_of = _Grouped(keyed)
    skip = len(subject_id) + len(predicate) + 2  # a claim key is "subject\x1fpredicate\x1fokey"
    for claim, representative in claims.items():
        belief = beliefs.get(claim)
        if belief is not None and belief.id not in before:
            before[belief.id] = belief
        if belief is None and claim in suppressed:
            continue
        evidence = capped(evidence_of(claim[skip:]), belief.revision_policy if belief is not None else policy)
        held: list[Fact] = []
        if not evidence.supporting and (belief is None or belief.valid_to is not None):
            # no live evidence: nothing to create, or history already closed; unless the claim
            # was held by facts superseded since the last revision (by events of the same batch):
            # then it is created, or its end moved, as revisions between them would have
            held = evidence_of.superseded(claim[skip:])
            if not held or _never_held(held, floor) or (
                    belief is not None and max(f.valid_to for f in held) <= belief.valid_to):
                continue  # fmt: skip
        if belief_math.should_delete(evidence.mean, evidence.stance, floor, evidence.weight_for,
                                     evidence.weight_against):  # fmt: skip
            if belief is not None:
                reason = ("below_confidence_floor" if evidence.weight_for or evidence.weight_against
                          else "no_remaining_evidence")  # fmt: skip
                out.deleted.append(Deletion(claim, belief, reason, now))
            out.settled.add(claim)
            continue
        if belief is None:
            belief = _create(representative, predicate, evidence, scope, policy, now, new_id(), held,
                             evidence_of.ended(claim[skip:]))  # fmt: skip
            out.created.append(belief.id)
            out.new_claims[claim] = belief.id
        else:
            ended = evidence_of.ended(claim[skip:])
            belief = _revise(claim, belief.copy(), evidence, ended, now, out)
        out.beliefs[claim] = belief
    _contradictions(out.beliefs, claims, evidence_of, skip)
    out.changed = [b for b in out.beliefs.values()
                   if (was := before.get(b.id)) is None or not same(was, b)]  # fmt: skip
    out.previous = before
    return out


class _Grouped:
    """A pair's facts grouped by object key once: the evidence of each claim, and the facts of
    each object (for ``_contradictions``)."""

    def __init__(self, keyed: list[tuple[str, Fact]]) -> None:
        self.by_object: dict[str, list[Fact]] = {}
        self.positive: dict[str, list[Fact]] = {}  # live positive facts, in order
        self.negative: dict[str, list[Fact]] = {}  # live negative facts, in order
        self.rivals: list[tuple[str, Fact]] = []  # live positive facts of a single-valued predicate
        for okey, f in keyed:
            self.by_object.setdefault(okey, []).append(f)
            if f.recorded_to is not None or f.valid_to is not None or f.excluded_from_recall:
                continue
            if f.polarity > 0:
                self.positive.setdefault(okey, []).append(f)
                if f.single_valued:
                    self.rivals.append((okey, f))
            elif f.polarity < 0:
                self.negative.setdefault(okey, []).append(f)

    def __call__(self, okey: str) -> _Evidence:
        """The live evidence for and against the claim of object ``okey``."""
        supporting = self.positive.get(okey, [])
        against = self.negative.get(okey, []) + [f for k, f in self.rivals if k != okey]
        weight_for = sum(weight(f) for f in supporting)
        weight_against = sum(weight(f) for f in against)
        mean, lower, upper = belief_math.posterior(weight_for, weight_against)
        stance = belief_math.stance(mean, weight_against)
        return _Evidence(supporting, against, weight_for, weight_against, mean, lower, upper,
                         stance)  # fmt: skip

    def superseded(self, okey: str) -> list[Fact]:
        """The positive facts of object ``okey`` that a successor closed (not excluded)."""
        return [f for f in self.by_object.get(okey, ()) if f.polarity > 0 and f.superseded_by
                and f.valid_to is not None and not f.excluded_from_recall]  # fmt: skip

    def ended(self, okey: str) -> list[dt.datetime]:
        """When the facts of object ``okey`` that ended did."""
        return [f.valid_to for f in self.by_object.get(okey, ()) if f.valid_to is not None]


def _supports(evidence: _Evidence) -> list[SupportRef]:
    total = (evidence.weight_for + evidence.weight_against) or 1.0
    refs = [SupportRef(type="fact", id=f.id, weight=round(weight(f) / total, 4), polarity="supports")
            for f in evidence.supporting]  # fmt: skip
    refs += [SupportRef(type="fact", id=f.id, weight=round(weight(f) / total, 4), polarity="against")
             for f in evidence.against]  # fmt: skip
    return refs


def _interval(evidence: _Evidence) -> ConfidenceInterval:
    return ConfidenceInterval(lower=round(evidence.lower, 4), upper=round(evidence.upper, 4),
                              method="beta_posterior", level=belief_math.LEVEL)  # fmt: skip


def _weights(evidence: _Evidence) -> dict[str, float]:
    return {"for": round(evidence.weight_for, 4), "against": round(evidence.weight_against, 4)}


def _never_held(held: list[Fact], floor: float) -> bool:
    """Whether superseded facts would not have made a belief while they were live: their weight
    alone is below the floor (rivals live with them then are not known here)."""
    weight_for = sum(weight(f) for f in held)
    mean, _, _ = belief_math.posterior(weight_for, 0.0)
    return belief_math.should_delete(mean, belief_math.stance(mean, 0.0), floor, weight_for, 0.0)


def _create(representative: Fact, predicate: str, evidence: _Evidence, scope: str,
            policy: RevisionPolicy, now: dt.datetime, belief_id: str, held: list[Fact],
            ended: list[dt.datetime]) -> Belief:  # fmt: skip
    """A new belief; ``held``: the superseded facts of a claim that no live fact asserts, whose
    belief is created closed (as a revision between them and their successors would have left it)."""
    if held:
        belief = _create(representative, predicate, attrs.evolve(evidence, supporting=held), scope,
                         policy, now, belief_id, [], [])  # fmt: skip
        belief.supports = _supports(evidence)
        belief.valid_to = max(ended)
        return belief
    return Belief(
        id=belief_id, scope=scope,
        claim={"subject": to_wire(representative.subject), "predicate": predicate,
               "object": to_wire(representative.object)},
        stance=evidence.stance, confidence=round(evidence.mean, 4),
        confidence_interval=_interval(evidence), supports=_supports(evidence),
        valid_from=min(f.valid_from for f in evidence.supporting), recorded_from=now,
        last_revised_at=now, why_url=f"/v1/beliefs/why?belief_id={belief_id}",
        evidence=_weights(evidence), revision_policy=attrs.evolve(policy),
    )  # fmt: skip


def _revise(claim: str, belief: Belief, evidence: _Evidence, ended: list[dt.datetime],
            now: dt.datetime, out: Revision) -> Belief:  # fmt: skip
    """An existing belief (a copy) brought up to date with its evidence, unless gated."""
    belief.supports = _supports(evidence)
    belief.evidence = _weights(evidence)
    valid_from = min((f.valid_from for f in evidence.supporting), default=None)
    if valid_from is not None:
        belief.valid_from = valid_from
        belief.valid_to = None  # new live evidence reopens a closed claim
    else:
        # every supporting fact was superseded: the claim held until the last of them ended
        belief.valid_to = max(ended) if ended else now
    policy = belief.revision_policy
    anchor = belief.confidence if belief.revised_confidence is None else belief.revised_confidence
    changed = (abs(evidence.mean - anchor) >= policy.min_evidence_delta
               or evidence.stance != belief.stance)  # fmt: skip
    if not changed:
        # the confidence follows the evidence (whatever batches it came in); a move by less than
        # the delta from the last revision is not a revision (docs/decisions.md, "Belief
        # confidence whatever the batches")
        belief.confidence = round(evidence.mean, 4)
        belief.confidence_interval = _interval(evidence)
        belief.revised_confidence = anchor if belief.confidence != anchor else None
        return belief
    if gated(belief, now):
        belief.partial, belief.partial_reason = True, "revision_in_progress"
        out.gated.add(claim)
        out.deferred.append(belief.id)
        return belief
    belief.confidence = round(evidence.mean, 4)
    belief.confidence_interval = _interval(evidence)
    belief.revised_confidence = None
    belief.stance = evidence.stance
    belief.revision_count += 1
    belief.last_revised_at = now
    start = belief.revision_window_start
    if start is None or now - start >= HOUR:
        belief.revision_window_start, belief.revisions_in_window = now, 0
    belief.revisions_in_window += 1
    belief.partial, belief.partial_reason = False, None
    out.settled.add(claim)
    out.revised.append(belief.id)
    return belief


def gated(belief: Belief, now: dt.datetime) -> bool:
    """The revision policy's gate: within the cooldown of the last revision, or the hour's
    revisions spent."""
    policy: RevisionPolicy = belief.revision_policy
    cooldown = parse_duration(policy.cooldown)
    if cooldown and now - belief.last_revised_at < cooldown:
        return True
    start = belief.revision_window_start
    if start is None or now - start >= HOUR:
        return False  # a new hour window begins with this revision
    return belief.revisions_in_window >= policy.max_revisions_per_hour


def _contradictions(results: dict[str, Belief], claims: Mapping[str, Fact], grouped: _Grouped,
                    skip: int) -> None:  # fmt: skip
    """Rival claims of a single-valued predicate are in tension with each other."""
    keyed = {claim[skip:]: (claim, b) for claim, b in results.items()}
    if not any(claims[claim].single_valued for claim in results):
        for belief in results.values():
            belief.contradicts = []
        return
    groups = {okey: grouped.by_object[okey] for okey in keyed}
    ids = {okey: {f.id for f in group} for okey, group in groups.items()}
    successors = {okey: {f.superseded_by for f in group if f.superseded_by}
                  for okey, group in groups.items()}  # fmt: skip
    rivals = {okey: {c for f in group for c in f.conflicts_with} for okey, group in groups.items()}
    for okey, (claim, belief) in keyed.items():
        contradicts = []
        if claims[claim].single_valued:
            for other_key, (_, other) in keyed.items():
                if other_key == okey:
                    continue
                if successors[okey] & ids[other_key] or successors[other_key] & ids[okey]:
                    resolution = "newer_wins"
                elif rivals[okey] & ids[other_key]:
                    resolution = "unresolved"
                else:
                    resolution = "higher_confidence_wins"
                tension = belief_math.tension(belief.confidence, other.confidence)
                contradicts.append({"belief_id": other.id, "tension": tension,
                                    "resolution": resolution})  # fmt: skip
        belief.contradicts = contradicts


def signature(belief: Belief) -> tuple:
    """Everything revision may change, cheap to compare (cheaper than serialising the belief)."""
    return _head(belief) + (tuple(sorted(belief.evidence.items())),) + _refs(belief)


def same(a: Belief, b: Belief) -> bool:
    """``signature(a) == signature(b)``, the cheap parts compared first."""
    return _head(a) == _head(b) and a.evidence == b.evidence and _refs(a) == _refs(b)


def _head(belief: Belief) -> tuple:
    return (belief.confidence, belief.stance, belief.valid_from, belief.valid_to, belief.partial,
            belief.revision_count)  # fmt: skip


def _refs(belief: Belief) -> tuple:
    return (
        tuple((s.id, s.weight, s.polarity) for s in belief.supports),
        tuple((c["belief_id"], c["tension"], c["resolution"]) for c in belief.contradicts),
    )
