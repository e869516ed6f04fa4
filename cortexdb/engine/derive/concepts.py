"""Concept synthesis (DESIGN §6, reference §7.5), pure: one concept per subject entity.

A concept gathers what a scope knows about one entity: its current facts and beliefs (and those
of the entities coalesced into it).  ``synthesize`` composes the concept's version from them and
decides whether it is a new version of the concept it had:

| inputs consulted                         | the concept                                        |
|------------------------------------------|----------------------------------------------------|
| at least ``min_support`` distinct claims | ``_partial: false``, stance ``supported`` when its confidence is at least 0.5, else ``uncertain`` |
| fewer (a belief and the fact it rests on are one claim) | ``_partial: true``, ``insufficient_supporting_facts`` |
| none left (all superseded or forgotten)  | ``support_loss_fraction`` 1.0, stance ``deprecated`` (hidden from default reads) |
| coalesced into another (``same_as``)     | ``canonical_id`` names the canonical concept; stance ``deprecated`` |
| more than ``max_inputs`` records         | the first ``max_inputs`` (strongest first) are consulted; ``coverage_score`` says how many |

The summary cites every record it consulted (``[fact_…]``, ``[belief_…]``); edges go to the
concepts of entities the records name as objects, labelled by the relation vocabulary
(``relation_label``).  Confidence is the mean confidence of the consulted records times
``1 - 2**-n`` (n records): corroboration raises it towards the evidence, never above it.

A new version is written only when what the concept says changes (``content``); otherwise the
current version is refreshed in place (``last_synthesized_at``), as a belief's weights are.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from types import SimpleNamespace
from typing import Any, NamedTuple

import attrs

from ..model import Belief, Concept, Fact
from ..model.text import value_text
from .facts import object_key

SYNTHESIZER = "deterministic"
SYNTHESIZER_VERSION = "1"
#: predicates that say two entities are one (coalescence)
SAME_AS = frozenset({"same_as", "is_same_as", "alias_of", "also_known_as"})
#: the default relation vocabulary (reference §7.5.1)
DEFAULT_RELATIONS = ("is_a", "part_of", "specializes", "generalizes", "depends_on", "causes",
                     "contradicts", "co_occurs_with", "related_to")  # fmt: skip
DEFAULT_VOCABULARY = "default"


@attrs.frozen
class Settings:
    min_support: int = 2
    max_inputs: int = 50
    invalidation_threshold: float = 0.5


class BeliefDigest(NamedTuple):
    """What synthesis reads of a live belief (``digest``): the lane keeps one per live belief of
    the subjects it synthesizes (``actors.subject_beliefs``), so a batch does not decode every
    belief of a subject it touches."""

    id: str
    confidence: float
    stance: str
    predicate: str
    line: str  # its summary line (``_belief_line``)
    okey: str  # its object's key (``object_key_wire``): what makes it a distinct claim
    target: str | None  # the entity its object names (an edge's end), else None


def digest(belief: Belief) -> BeliefDigest:
    claim = belief.claim
    obj = claim["object"]
    target = obj.get("id") if obj.get("type") == "entity" else None
    return BeliefDigest(belief.id, belief.confidence, belief.stance, claim["predicate"], _belief_line(belief),
                        object_key_wire(obj), target or None)  # fmt: skip


def strongest(digests: list[BeliefDigest], limit: int) -> list[BeliefDigest]:
    """The ``limit`` digests synthesis would consult first (``consulted``'s order)."""
    return sorted(digests, key=_belief_order)[:limit]


def _belief_order(b: BeliefDigest) -> tuple[float, str, str]:
    return (-b.confidence, b.predicate, b.id)


@attrs.frozen
class Inputs:
    """What the scope knows about a concept's subject (and the subjects coalesced into it).
    ``beliefs`` may hold only the strongest ``max_inputs`` (``strongest``) when ``belief_count``
    says how many live beliefs there are in all."""

    subject_id: str
    name: str
    facts: tuple[Fact, ...]
    beliefs: tuple[BeliefDigest, ...]
    targets: dict[str, str] = attrs.field(factory=dict)  # entity id -> its concept id
    relations: dict[str, tuple[str, str]] = attrs.field(factory=dict)  # predicate -> (relation, vocabulary)
    members: tuple[str, ...] = ()  # subject ids coalesced into this concept
    belief_count: int | None = None  # the live beliefs in all (None: ``len(beliefs)``)


def term_key(text: str) -> str:
    """How a predicate, a vocabulary term or an alias compare: case-folded, with spaces and
    dashes read as ``_``."""
    return "_".join(text.casefold().replace("-", " ").split())


def relation_label(predicate: str, relations: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """The relation an edge from a record of ``predicate`` carries, and its vocabulary: a
    registered relation term (or alias) wins, a default relation named as such is itself,
    anything else is ``related_to``."""
    key = term_key(predicate)
    if key in relations:
        return relations[key]
    if key in DEFAULT_RELATIONS:
        return key, DEFAULT_VOCABULARY
    return "related_to", DEFAULT_VOCABULARY


def _fact_line(fact: Fact) -> str:
    negation = "not " if fact.polarity < 0 else ""
    return f"{negation}{fact.predicate.replace('_', ' ')} {value_text(fact.object, units=True)} [{fact.id}]"


def _belief_line(belief: Belief) -> str:
    claim = belief.claim
    obj = value_text(claim["object"], units=True)
    return f"{claim['predicate'].replace('_', ' ')} {obj} ({belief.stance}, {belief.confidence:.2f}) [{belief.id}]"


def object_key_wire(obj: dict[str, Any]) -> str:
    """``object_key`` of a belief claim's object (its wire dict)."""
    return object_key(SimpleNamespace(type=obj.get("type"), id=obj.get("id"), value=obj.get("value")))


def consulted(inputs: Inputs, settings: Settings) -> tuple[list[Fact], list[BeliefDigest], int]:
    """The records synthesis consults (strongest first, at most ``max_inputs``) and how many
    there were in all."""
    facts = sorted(inputs.facts, key=lambda f: (-f.confidence, f.predicate, f.id))
    beliefs = sorted(inputs.beliefs, key=_belief_order)
    total = len(facts) + (len(beliefs) if inputs.belief_count is None else inputs.belief_count)
    budget = settings.max_inputs
    facts = facts[:budget]
    beliefs = beliefs[: max(0, budget - len(facts))]
    return facts, beliefs, total


def _edges(facts: list[Fact], beliefs: list[BeliefDigest], inputs: Inputs) -> list[dict[str, Any]]:
    best: dict[tuple[str, str], dict[str, Any]] = {}
    claims = [(f.predicate, f.object.id if f.object.type == "entity" else None, f.confidence, f.polarity)
              for f in facts]  # fmt: skip
    claims += [(b.predicate, b.target, b.confidence, 1) for b in beliefs]
    for predicate, target_entity, confidence, polarity in claims:
        if target_entity is None or polarity < 0 or predicate in SAME_AS:
            continue
        target = inputs.targets.get(target_entity or "")
        if target is None:
            continue
        relation, vocabulary = relation_label(predicate, inputs.relations)
        edge = {"to": target, "relation": relation, "weight": round(confidence, 4), "vocabulary": vocabulary}
        key = (target, relation)
        if key not in best or best[key]["weight"] < edge["weight"]:
            best[key] = edge
    return [best[key] for key in sorted(best)]


def topics_of(facts: list[Fact], beliefs: list[BeliefDigest]) -> list[str]:
    """A concept's topics: the predicates of what it consulted, most frequent first."""
    counts = Counter([f.predicate for f in facts] + [b.predicate for b in beliefs])
    return [topic for topic, _ in sorted(counts.items(), key=lambda tc: (-tc[1], tc[0]))]


def synthesize(inputs: Inputs, previous: Concept | None, *, concept_id: str, scope: str,
               now: dt.datetime, settings: Settings) -> tuple[Concept, bool]:  # fmt: skip
    """The concept ``inputs`` make, and whether it is a new version (False: ``previous``
    refreshed in place)."""
    facts, beliefs, total = consulted(inputs, settings)
    count = len(facts) + len(beliefs)
    claims = len({(f.predicate, object_key(f.object)) for f in facts}
                 | {(b.predicate, b.okey) for b in beliefs})  # fmt: skip
    lines = [_fact_line(f) for f in facts] + [b.line for b in beliefs]
    summary = f"{inputs.name}: " + "; ".join(lines) + "." if lines else None
    confidences = [f.confidence for f in facts] + [b.confidence for b in beliefs]
    confidence = round(sum(confidences) / count * (1 - 2.0**-count), 4) if count else 0.0
    loss = 0.0
    if count == 0:
        stance, partial, reason = "deprecated", False, None
        loss = 1.0 if previous is not None else 0.0
    elif claims < settings.min_support:
        stance, partial, reason = "uncertain", True, "insufficient_supporting_facts"
    else:
        stance, partial, reason = ("supported" if confidence >= 0.5 else "uncertain"), False, None
    events = sorted({e for f in facts for e in f.supports})
    topics = topics_of(facts, beliefs)
    concept = Concept(
        id=concept_id, scope=scope, name=inputs.name, summary=summary,
        synthesis_inputs={"layers": ["facts", "beliefs"],
                          "filters": {"subjects": [inputs.subject_id, *inputs.members], "topics": topics},
                          "as_of": None, "synthesizer": SYNTHESIZER, "synthesizer_version": SYNTHESIZER_VERSION},
        supported_by={"facts": [f.id for f in facts], "episodes": [], "beliefs": [b.id for b in beliefs],
                      "external": []},
        supports=events, edges=_edges(facts, beliefs, inputs),
        valid_from=min([f.valid_from for f in facts], default=now), recorded_from=now,
        last_synthesized_at=now, stance=stance, confidence=confidence,
        support_loss_fraction=loss, coverage_score=round(count / total, 4) if total else 0.0,
        partial=partial, partial_reason=reason, progress=None,
    )  # fmt: skip
    return _versioned(concept, previous, now)


def content(concept: Concept) -> tuple[Any, ...]:
    """What a concept says: a change here is a new version."""
    return (concept.name, concept.summary, concept.supported_by, concept.edges, concept.stance,
            concept.confidence, concept.partial, concept.partial_reason, concept.canonical_id,
            concept.support_loss_fraction, concept.coverage_score, concept.derived_from)  # fmt: skip


def _versioned(concept: Concept, previous: Concept | None, now: dt.datetime) -> tuple[Concept, bool]:
    if previous is None:
        return concept, True
    concept = attrs.evolve(concept, derived_from=list(previous.derived_from), canonical_id=previous.canonical_id,
                           valid_from=min(previous.valid_from, concept.valid_from))  # fmt: skip
    if previous.canonical_id is not None:  # a merged alias stays what the merge made it
        return previous, False
    if content(concept) == content(previous):
        return attrs.evolve(previous, last_synthesized_at=now, staleness_score=0.0, staleness_reason=None), False
    return attrs.evolve(concept, version=previous.version + 1, previous_version=version_ref(previous)), True


def version_ref(concept: Concept) -> str:
    """How a version is named: ``concept_…@v<n>`` (``previous_version``)."""
    return f"{concept.id}@v{concept.version}"


def merged_alias(alias: Concept, canonical_id: str, now: dt.datetime) -> Concept:
    """The new version of a concept coalesced into ``canonical_id``: an alias, deprecated, its
    history kept (reference §7.5.1)."""
    return attrs.evolve(alias, canonical_id=canonical_id, stance="deprecated", version=alias.version + 1,
                        previous_version=version_ref(alias), recorded_from=now, last_synthesized_at=now,
                        summary=f"{alias.name}: coalesced into {canonical_id}.", partial=False,
                        partial_reason=None)  # fmt: skip


def subjects_of(concept: Concept | None) -> list[str]:
    """The subject entities a concept gathers (its owner first)."""
    return list(concept.synthesis_inputs.get("filters", {}).get("subjects") or ()) if concept else []


def retired(concept: Concept, now: dt.datetime) -> Concept:
    """The last version of a concept split into new ones (reference §7.5.1): it stops holding
    (``valid_to``) and leaves default reads (``deprecated``); its history is kept."""
    return attrs.evolve(concept, stance="deprecated", valid_to=now, recorded_from=now, last_synthesized_at=now)


def concept_id_of(subject_id: str) -> str | None:
    """A subject entity's first concept id: ``concept_`` and the entity's own (time-ordered)
    uuid, so a concept's id is as old as its entity and synthesis draws no id (None for a
    subject that is not an ``ent_`` id).  A split gives its subjects new ids."""
    prefix, _, rest = subject_id.partition("_")
    return f"concept_{rest}" if prefix == "ent" and rest else None


def canonical_of(concept_ids: list[str]) -> str:
    """Which of coalescing concepts stays: the oldest (ids are time-ordered)."""
    return min(concept_ids)


def closed(concept: Concept, now: dt.datetime) -> Concept:
    """The version a new one replaces, closed on the recorded axis."""
    return attrs.evolve(concept, recorded_to=now)



def staleness(concept: Concept, input_times: list[dt.datetime]) -> tuple[float, str | None]:
    """The fraction of a concept's current inputs recorded after it was last synthesized."""
    if not input_times or concept.last_synthesized_at is None:
        return 0.0, None
    newer = sum(1 for t in input_times if t > concept.last_synthesized_at)
    if not newer:
        return 0.0, None
    return round(newer / len(input_times), 4), "inputs_updated_since_synthesis"


def support_loss(concept: Concept, present: set[str]) -> float:
    """The fraction of the records a concept consulted that no longer exist."""
    cited = list(concept.supported_by.get("facts", ())) + list(concept.supported_by.get("beliefs", ()))
    if not cited:
        return concept.support_loss_fraction
    return round(sum(1 for record in cited if record not in present) / len(cited), 4)
