"""Rendering a pack: the context block with citation markers, and the JSON-LD subgraph.

Deterministic: the same ranked items always render the same text.
"""

from __future__ import annotations

from typing import Any

from ..derive.episodes import first_sentence
from ..model.text import claim_text, said_text, speaker_name

CITATION_MODES = ("none", "inline_with_markers", "block_at_end", "structured_only")
MAX_BELIEFS, MAX_FACTS, MAX_EPISODES, MAX_EVENTS = 5, 8, 3, 5


def item_text(layer: str, record: dict[str, Any]) -> str:
    """The one-line statement an item contributes to the context block."""
    if layer == "beliefs":
        claim = record["claim"]
        statement = claim_text(claim["subject"], claim["predicate"], claim["object"], units=True)
        return f"{statement} (belief: {record['stance']}, confidence {record['confidence']:.2f})"
    if layer == "facts":
        statement = claim_text(record["subject"], record["predicate"], record["object"],
                               negated=record.get("polarity", 1) < 0, units=True)  # fmt: skip
        since = record["valid_from"][:10]
        until = f" until {record['valid_to'][:10]}" if record.get("valid_to") else ""
        return f"{statement} (from {since}{until})"
    if layer == "episodes":
        return f"{record['name']}: {record['summary']}"
    if layer == "understanding":  # a concept: its summary (which names it), else its name
        return record.get("summary") or record["name"]
    if layer == "events":
        text = said_text(record.get("content", {}))
        # a passage of a long text was chosen for what it says, not for how the text begins
        said = " ".join(text.split()) if record.get("passage") else first_sentence(text)
        return f"{record['actor']} on {record['context']['observed_at'][:10]}: {said}"
    return str(record.get("name") or record.get("id"))


def rendered_text(layer: str, record: dict[str, Any]) -> str:
    """What an item adds to the context a model is given (what a token budget counts): its
    context-block statement; an event's is who said it, when, and all it says (a long text: its
    recalled passage), as an answer's passages carry it."""
    if layer == "events":
        said = " ".join(said_text(record.get("content") or {}).split())
        return f"{record['actor']} on {record['context']['observed_at'][:10]}: {said}"
    return item_text(layer, record)


def block_items(layers: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The items the context block states, in marker order: beliefs, facts, episodes (events
    when there are none of those)."""
    chosen: list[tuple[str, dict[str, Any]]] = []
    chosen += [("beliefs", r) for r in layers.get("beliefs", [])[:MAX_BELIEFS]]
    chosen += [("facts", r) for r in layers.get("facts", [])[:MAX_FACTS]]
    chosen += [("episodes", r) for r in layers.get("episodes", [])[:MAX_EPISODES]]
    if not chosen:
        chosen += [("events", r) for r in layers.get("events", [])[:MAX_EVENTS]]
    return chosen


def passages(layers: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every item of a pack as an answer may cite it — ``{marker, layer, id, text, source,
    score}`` — numbered as the context block numbers them (its items first, so ``[n]`` names the
    same record in both), then the pack's other beliefs, facts, episodes and events in rank order.
    An event's text is all it says (a long one: its recalled passage); ``source`` is who said it
    and when."""
    chosen = block_items(layers)
    seen = {(layer, record["id"]) for layer, record in chosen}
    chosen += [(layer, record) for layer in ("beliefs", "facts", "episodes", "events")
               for record in layers.get(layer, []) if (layer, record["id"]) not in seen]  # fmt: skip
    out = []
    for index, (layer, record) in enumerate(chosen, start=1):
        source, text = "", item_text(layer, record)
        if layer == "events":
            source = f"{speaker_name(record['actor'])} on {record['context']['observed_at'][:10]}"
            text = " ".join(said_text(record.get("content") or {}).split())
        out.append({"marker": f"[{index}]", "layer": layer.rstrip("s"), "id": record["id"], "text": text,
                    "source": source, "score": record.get("score", 0.0)})  # fmt: skip
    return out


def context_block(
    layers: dict[str, list[dict[str, Any]]], mode: str
) -> tuple[str, list[dict[str, Any]]]:
    """The context block and its citations ([{marker, layer, id}])."""
    chosen = block_items(layers)
    citations = []
    lines = []
    for index, (layer, record) in enumerate(chosen, start=1):
        marker = f"[{index}]"
        text = item_text(layer, record)
        citations.append({"marker": marker, "layer": layer.rstrip("s"), "id": record["id"]})
        lines.append(f"{text} {marker}" if mode == "inline_with_markers" else text)
    block = "\n".join(lines)
    if mode == "block_at_end" and citations:
        block += "\n\nSources: " + "; ".join(f"{c['marker']} {c['id']}" for c in citations)
    if mode == "none":
        citations = []
    return block, citations


def knowledge_subgraph(layers: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Facts and beliefs as a JSON-LD graph: entities are nodes, assertions are edges with provenance."""
    nodes: dict[str, dict[str, Any]] = {}
    edges = []

    def node(ref: dict[str, Any]) -> str:
        node_id = ref.get("id") or f"literal:{ref.get('value')}"
        if node_id not in nodes:
            entry = {
                "@id": node_id,
                "@type": "cortex:Entity" if ref.get("type") != "literal" else "cortex:Literal",
            }
            if ref.get("name"):
                entry["name"] = ref["name"]
            if ref.get("type") == "literal":
                entry["value"] = ref.get("value")
                entry["datatype"] = ref.get("datatype")
            nodes[node_id] = entry
        return node_id

    for fact in layers.get("facts", []):
        edges.append({
            "@id": fact["id"], "@type": "cortex:Fact", "subject": {"@id": node(fact["subject"])},
            "predicate": fact["predicate"], "object": {"@id": node(fact["object"])},
            "confidence": fact["confidence"], "validFrom": fact["valid_from"], "validTo": fact.get("valid_to"),
            "supports": [{"@id": e} for e in fact.get("supports", [])],
        })  # fmt: skip
    for belief in layers.get("beliefs", []):
        claim = belief["claim"]
        edges.append({
            "@id": belief["id"], "@type": "cortex:Belief", "subject": {"@id": node(claim["subject"])},
            "predicate": claim["predicate"], "object": {"@id": node(claim["object"])},
            "stance": belief["stance"], "confidence": belief["confidence"],
            "supports": [{"@id": s["id"]} for s in belief.get("supports", [])],
        })  # fmt: skip
    for episode in layers.get("episodes", []):
        edges.append({"@id": episode["id"], "@type": "cortex:Episode", "name": episode["name"],
                      "events": [{"@id": e} for e in episode.get("events", [])]})  # fmt: skip
    return {
        "@context": {"cortex": "https://schemas.cortexdb.ai/v1/ld#", "name": "cortex:name",
                     "supports": {"@id": "cortex:supports", "@type": "@id"}},
        "@graph": list(nodes.values()) + edges,
    }  # fmt: skip
