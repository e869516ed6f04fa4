"""Why a belief is held (reference §8.7.6), pure: its support graph down to events, and a
narrative that cites every id (``narrative_model: deterministic_template_v1``).

The graph's nodes are the belief's supporting and contradicting facts (with their weight and
polarity) and the events each was extracted from (an event of another scope — a consolidation —
is named, not shown); its edges are ``supported_by`` / ``contradicted_by`` (belief → fact) and
``extracted_from`` (fact → event).  The caller loads the records: ``facts`` by id (None when
gone), ``events`` by id (None when not in this scope).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import Belief, Event, Fact, to_wire
from ..model.text import belief_text, fact_claim_text, said_text
from .beliefs import calibrated
from .episodes import first_sentence

NARRATIVE_MODEL = "deterministic_template_v1"


def event_ids(facts: Mapping[str, Fact | None]) -> list[str]:
    """The events the facts cite, each once, in citation order: what the caller loads."""
    return list(dict.fromkeys(e for f in facts.values() if f is not None for e in f.supports))


def why(belief: Belief, facts: Mapping[str, Fact | None],
        events: Mapping[str, Event | None]) -> dict[str, Any]:  # fmt: skip
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    seen: set[str] = set()
    reasons: dict[str, list[str]] = {"supports": [], "against": []}
    for support in belief.supports:
        fact = facts.get(support.id)
        if fact is None:
            continue
        summary = fact_claim_text(fact)
        nodes.append({"id": fact.id, "type": "fact", "weight": support.weight,
                      "polarity": support.polarity, "summary": summary})  # fmt: skip
        relation = "supported_by" if support.polarity == "supports" else "contradicted_by"
        edges.append({"from": belief.id, "to": fact.id, "relation": relation})
        for event_id in fact.supports:
            edges.append({"from": fact.id, "to": event_id, "relation": "extracted_from"})
            if event_id not in seen:
                seen.add(event_id)
                nodes.append(_event_node(event_id, events.get(event_id)))
        when = fact.valid_from.date().isoformat()
        reasons[support.polarity].append(
            f"{summary} since {when} ({fact.id}, from {', '.join(fact.supports)})"
        )
    return {
        "belief": calibrated(to_wire(belief)),
        "support_graph": {"nodes": nodes, "edges": edges},
        "narrative": narrative(belief, reasons),
        "narrative_model": NARRATIVE_MODEL,
    }


def _event_node(event_id: str, event: Event | None) -> dict[str, Any]:
    if event is None:
        return {"id": event_id, "type": "event", "summary": "(an event of another scope)"}
    text = said_text(event.content)
    return {"id": event_id, "type": "event", "observed_at": event.context["observed_at"],
            "summary": f"{event.actor}: {first_sentence(text)}"}  # fmt: skip


def narrative(belief: Belief, reasons: dict[str, list[str]]) -> str:
    interval = belief.confidence_interval
    text = (
        f'The claim "{belief_text(belief)}" is {belief.stance} with confidence {belief.confidence:.2f} '
        f"(90% interval [{interval.lower:.2f}, {interval.upper:.2f}], {interval.method})."
    )
    if reasons["supports"]:
        text += " Evidence for it: " + "; ".join(reasons["supports"]) + "."
    if reasons["against"]:
        text += " Evidence against it: " + "; ".join(reasons["against"]) + "."
    if not reasons["supports"] and not reasons["against"]:
        text += " No evidence remains for or against it."
    return text
