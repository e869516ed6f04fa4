"""A recall's context document (``format: "xml"``): the pack rendered as ``<cortex-context>``.

The layer items are the ones the token knapsack kept, costed as document elements
(``retrieve.document.item_cost``) against the budget left after the document's skeleton; the
pack parts ``signals`` and ``relationships`` (when a recall attaches them) fill what is left, in
their order.  Whatever does not fit is counted in ``diagnostics.document_evictions`` and makes
the pack ``_partial`` — never a silent cut.
"""

from __future__ import annotations

from typing import Any

from ..retrieve import document
from ..retrieve.scoring import estimate_tokens
from .partial import mark_partial

ORDER = ("beliefs", "facts", "episodes", "events", "understanding")  # as the context block states them


def header(scope: str, as_of: str) -> dict[str, Any]:
    return {"scope": scope, "as_of": as_of}


def minimum_tokens(scope: str) -> int:
    """The smallest budget any document of this scope fits (its empty skeleton, longest as_of)."""
    return document.skeleton_cost(header(scope, "0000-00-00T00:00:00.000000Z"))


def item_budget(max_tokens: int | None, head: dict[str, Any]) -> int | None:
    """What the knapsack may spend on layer items: the budget less the skeleton."""
    if max_tokens is None:
        return None
    return max(0, max_tokens - document.skeleton_cost(head))


def part_items(pack: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The items of a pack part: ``pack[name]`` as a list, or as ``{"items": [...]}``."""
    part = pack.get(name)
    if part is None:
        part = (pack.get("layers") or {}).get(name)
    if isinstance(part, dict):
        part = part.get("items")
    return [item for item in part or [] if isinstance(item, dict)]


def build(pack: dict[str, Any], records: dict[str, list[dict[str, Any]]], head: dict[str, Any],
          max_tokens: int | None, with_markers: bool) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """(the document, its markers, its report: tokens used and per-part evictions)."""
    sections: dict[str, list[str]] = {section: [] for section in document.SECTIONS}
    markers: list[dict[str, Any]] = []
    ordered = [(layer, r) for layer in ORDER for r in records.get(layer, [])]
    # reminders first, so markers number the document top to bottom
    ordered.sort(key=lambda pair: not document.is_reminder(*pair))
    used = document.skeleton_cost(head)
    for layer, record in ordered:
        marker = f"[{len(markers) + 1}]"
        markers.append({"marker": marker, "layer": layer.rstrip("s"), "id": record["id"]})
        text = document.item_element(layer, record, marker if with_markers else None)
        section = "reminders" if document.is_reminder(layer, record) else "active-context"
        sections[section].append(text)
        conflicts = document.conflict_elements(layer, record)
        sections["conflicts"].extend(conflicts)
        used += sum(estimate_tokens(e) for e in [text, *conflicts])
    evictions: dict[str, int] = {}
    for part in document.PARTS:
        evictions[part] = 0
        for item in part_items(pack, part):
            text = document.part_element(part, item)
            cost = estimate_tokens(text)
            if max_tokens is not None and used + cost > max_tokens:
                evictions[part] += 1
                continue
            sections[part].append(text)
            used += cost
    return document.render(head, sections), markers, {"tokens_used": used, "document_evictions": evictions}


def attach(pack: dict[str, Any], records: dict[str, list[dict[str, Any]]], head: dict[str, Any],
           max_tokens: int | None, citation_mode: str) -> None:
    """Render the document into ``pack`` (its ``context_block``), with markers and diagnostics."""
    text, markers, report = build(pack, records, head, max_tokens, citation_mode != "none")
    pack["format"] = "xml"
    pack["context_block"] = text
    if citation_mode != "none":
        pack["provenance"]["markers"] = markers
    pack["provenance"]["trail"].append({"phase": "render_document", "format": "xml",
                                        "budget_tokens": max_tokens, **report})  # fmt: skip
    if pack.get("diagnostics") is not None:
        pack["diagnostics"]["document_evictions"] = report["document_evictions"]
    if any(report["document_evictions"].values()):
        mark_partial(pack, "token_budget_exhausted")
