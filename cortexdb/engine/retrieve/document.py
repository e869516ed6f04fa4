"""The context document: a recall rendered as ``<cortex-context>`` XML (``format: "xml"``).

Five sections, always present and always in this order, so a model finds each in the same place:

- ``reminders``: what the agent was asked to bring up (facts whose predicate names a reminder,
  or records tagged with a ``directive`` / ``task`` aspect);
- ``active-context``: the pack's other assertions — facts, beliefs, episodes, events;
- ``signals``: the pack's ``signals`` part, each with its effective intensity and trajectory;
- ``relationships``: the pack's ``relationships`` part;
- ``conflicts``: every fact in conflict with another, and every contradicted belief.

Every element carries the citation id of the record it states (``id``, the key of
``provenance.citations``).  All user text is escaped; characters XML 1.0 cannot carry (control
characters, lone surrogates) become U+FFFD, so the document always parses.

Pure: the same items always render the same bytes.  Sizes are counted as the context block's are
(``scoring.estimate_tokens`` per element, and once for the fixed skeleton), so a token budget
bounds the document itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..model.text import claim_text, said_text, value_text
from .scoring import estimate_tokens

VERSION = "1.0"
FORMATS = ("text", "xml")
SECTIONS = ("reminders", "active-context", "signals", "relationships", "conflicts")
PARTS = ("signals", "relationships")  # pack parts rendered from the pack, when present
REMINDER_ASPECTS = frozenset({"directive", "task"})
_REMINDER_PREDICATE = re.compile(r"remind|remember_to|follow_up|todo", re.I)
# what XML 1.0 cannot carry: C0 controls but tab, newline and carriage return; surrogates; the
# two non-characters U+FFFE and U+FFFF
_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(value: Any) -> str:
    return _INVALID.sub("\ufffd", str(value))


def escape_text(value: Any) -> str:
    text = clean(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("\r", "&#13;")


def escape_attr(value: Any) -> str:
    text = escape_text(value).replace('"', "&quot;")
    return text.replace("\n", "&#10;").replace("\t", "&#9;")


def element(tag: str, attributes: dict[str, Any], text: str | None = None) -> str:
    """``<tag a="v" ...>text</tag>`` (``<tag .../>`` without text); None attributes are left out."""
    attrs = "".join(f' {name}="{escape_attr(value)}"' for name, value in attributes.items() if value is not None)
    if text is None:
        return f"<{tag}{attrs}/>"
    return f"<{tag}{attrs}>{escape_text(text)}</{tag}>"


def _number(value: Any) -> str | None:
    return None if value is None else f"{float(value):.2f}"


def _date(value: Any) -> str | None:
    return str(value)[:10] if value else None


def _ref(ref: Any) -> Any:
    if isinstance(ref, dict):
        return ref.get("name") or ref.get("id") or ref.get("value")
    return ref


def aspects(record: dict[str, Any]) -> set[str]:
    found = record.get("aspects") or []
    if isinstance(found, str):
        found = [found]
    if isinstance(record.get("aspect"), str):
        found = [*found, record["aspect"]]
    return {str(a) for a in found}


def is_reminder(layer: str, record: dict[str, Any]) -> bool:
    if aspects(record) & REMINDER_ASPECTS:
        return True
    if layer == "facts":
        return bool(_REMINDER_PREDICATE.search(str(record.get("predicate", ""))))
    if layer == "beliefs":
        return bool(_REMINDER_PREDICATE.search(str(record.get("claim", {}).get("predicate", ""))))
    return False


def _fact(tag: str, record: dict[str, Any], marker: str | None) -> str:
    negated = record.get("polarity", 1) < 0
    statement = claim_text(record["subject"], record["predicate"], record["object"], negated=negated, units=True)
    return element(tag, {
        "id": record["id"], "marker": marker, "subject": _ref(record["subject"]),
        "predicate": record["predicate"], "object": value_text(record["object"], units=True),
        "negated": "true" if negated else None, "confidence": _number(record.get("confidence")),
        "valid_from": _date(record.get("valid_from")), "valid_to": _date(record.get("valid_to")),
    }, statement)  # fmt: skip


def _belief(tag: str, record: dict[str, Any], marker: str | None) -> str:
    claim = record["claim"]
    statement = claim_text(claim["subject"], claim["predicate"], claim["object"], units=True)
    return element(tag, {
        "id": record["id"], "marker": marker, "kind": "belief", "subject": _ref(claim["subject"]),
        "predicate": claim["predicate"], "object": value_text(claim["object"], units=True),
        "stance": record.get("stance"), "confidence": _number(record.get("confidence")),
    }, statement)  # fmt: skip


def item_element(layer: str, record: dict[str, Any], marker: str | None = None) -> str:
    """The element one recalled record contributes to ``reminders`` or ``active-context``."""
    tag = "reminder" if is_reminder(layer, record) else "assertion"
    if layer == "facts":
        return _fact(tag, record, marker)
    if layer == "beliefs":
        return _belief(tag, record, marker)
    if layer == "episodes":
        return element("reminder" if tag == "reminder" else "episode", {
            "id": record["id"], "marker": marker, "started_at": record.get("started_at"),
            "ended_at": record.get("ended_at"),
        }, f"{record.get('name', '')}: {record.get('summary', '')}")  # fmt: skip
    if layer == "events":
        said = " ".join(said_text(record.get("content") or {}).split())
        return element("event", {"id": record["id"], "marker": marker, "actor": record.get("actor"),
                                 "observed_at": (record.get("context") or {}).get("observed_at")}, said)  # fmt: skip
    return element("concept", {"id": record.get("id"), "marker": marker}, str(record.get("name") or ""))


def conflict_elements(layer: str, record: dict[str, Any]) -> list[str]:
    """The ``conflicts`` entries of a record: a fact in conflict with others, a contradicted belief."""
    if layer == "facts" and record.get("conflicts_with"):
        statement = claim_text(record["subject"], record["predicate"], record["object"], units=True)
        return [element("conflict", {"id": record["id"], "with": " ".join(record["conflicts_with"])}, statement)]
    if layer == "beliefs" and record.get("stance") == "contradicted":
        claim = record["claim"]
        against = " ".join(str(c.get("id", "")) for c in record.get("contradicts") or [] if isinstance(c, dict))
        statement = claim_text(claim["subject"], claim["predicate"], claim["object"], units=True)
        return [element("conflict", {"id": record["id"], "with": against or None}, statement)]
    return []


def item_cost(layer: str, record: dict[str, Any]) -> int:
    """What a recalled record adds to the document, in tokens (its element and any conflict)."""
    return sum(estimate_tokens(e) for e in [item_element(layer, record, "[000]"), *conflict_elements(layer, record)])


def part_element(part: str, item: dict[str, Any]) -> str:
    """One item of the ``signals`` or ``relationships`` pack part."""
    if part == "signals":
        return element("signal", {
            "id": item.get("id"), "type": item.get("type"), "subject": _ref(item.get("subject")),
            "intensity": _number(item.get("intensity")),
            "effective_intensity": _number(item.get("effective_intensity")),
            "trajectory": item.get("trajectory"), "observed_at": item.get("observed_at"),
        })  # fmt: skip
    citations = item.get("citations") or []
    return element("relationship", {
        "id": item.get("id"), "from": _ref(item.get("from")), "type": item.get("type"),
        "to": _ref(item.get("to")), "confidence": _number(item.get("confidence")),
        "valid_from": item.get("valid_from"), "valid_to": item.get("valid_to"),
        "citations": " ".join(str(c) for c in citations) if isinstance(citations, list) else str(citations),
    })  # fmt: skip


def skeleton(header: dict[str, Any]) -> str:
    """The document with every section empty: what any document costs before its items."""
    return render(header, {section: [] for section in SECTIONS})


def skeleton_cost(header: dict[str, Any]) -> int:
    return estimate_tokens(skeleton(header))


def render(header: dict[str, Any], sections: dict[str, Iterable[str]]) -> str:
    """The document from already-rendered elements, one a line, section by section."""
    root = element("cortex-context", {"version": VERSION, **header})[:-2] + ">"
    lines = [root]
    for section in SECTIONS:
        items = list(sections.get(section) or [])
        if not items:
            lines.append(f"<{section}/>")
            continue
        lines.append(f"<{section}>")
        lines.extend(items)
        lines.append(f"</{section}>")
    lines.append("</cortex-context>")
    return "\n".join(lines)
