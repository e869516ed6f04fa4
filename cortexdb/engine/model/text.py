"""How each record reads as text: the one home of these phrasings (DESIGN §1.1, rule 9).

The indexes, recall's candidates, the why-graph and the context block all read records through
this module, as attrs records or as wire dicts (the shapes stored JSON decodes to):

| record  | what the indexes see (``*_text``)       | other readings                          |
|---------|-----------------------------------------|-----------------------------------------|
| event   | ``speaker: content media`` (``event_  | ``said_text`` (display): the text, else |
|         | text``; ``media_text``: its blobs'      | its blobs, else the content kind;       |
|         | captions, alt texts, names and types);  | ``message_text``: the text of a message |
|         | a passage: ``speaker: passage``         | ('' otherwise)                          |
|         | (``turn_text``)                         |                                         |
| fact    | its claim, ``not`` before the predicate | the bare claim (``fact_claim_text``)    |
|         | when its polarity is negative           | where the polarity is shown beside it   |
|         | (``fact_text``)                         | (why-graph edges) or not looked at      |
|         |                                         | (candidates' MMR tokens)                |
| belief  | its claim (``belief_text``)             |                                         |
| episode | ``name. summary`` (``episode_text``)    |                                         |

A claim reads ``subject predicate value``: the subject's name (its id when it has none), the
predicate with ``_`` as spaces, an entity's name or a literal's value (with its unit only when
``units`` is asked for: the context block).  Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from .. import jsoncodec


def _get(item: Any, name: str) -> Any:
    """A field of a wire dict or of an attrs record."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name)


# -- events -------------------------------------------------------------------------------------
def speaker_name(actor_id: str) -> str:
    """``user:caroline_smith`` -> ``caroline smith``: how a turn's speaker is named in the index."""
    return actor_id.split(":", 1)[-1].replace("_", " ")


def content_text(content: dict[str, Any]) -> str:
    """The text an event's content is indexed by (passage offsets index it)."""
    text = content.get("text")
    if isinstance(text, str):
        return text
    kind = content.get("kind")
    if kind == "triple":
        return f"{content.get('subject')} {content.get('predicate')} {content.get('object')}"
    if kind == "json":
        return jsoncodec.encode(content.get("data")).decode()
    return ""


def turn_text(actor_id: str, text: str) -> str:
    """A turn as the indexes see it: who said it, then what was said.  The speaker is part of
    the memory — questions name people, turns rarely do (on LoCoMo the speaker lifts MiniLM's
    turn recall@10 from 30 to 51, see docs/decisions.md)."""
    return f"{speaker_name(actor_id)}: {text}"


MEDIA_WORDS = ("caption", "alt", "title", "description", "filename", "content_type")


def media_text(content: dict[str, Any]) -> str:
    """What an event's blobs add to its indexed text (reference §3.5.4: blobs are found by their
    metadata, their bytes are not embedded): for a ``blob_ref`` content and each ``media`` item,
    the caption, alt text, title and description the writer gave, the file name and the content
    type (capture adds the blob's own name and type, ``engine/blobs.py``)."""
    items = [content] if content.get("kind") == "blob_ref" else []
    media = content.get("media")
    if isinstance(media, list):
        items += media
    words = [item[name] for item in items if isinstance(item, dict)
             for name in MEDIA_WORDS if isinstance(item.get(name), str) and item[name]]  # fmt: skip
    return " ".join(words)


def event_text(event: Any) -> str:
    """What the indexes see of an event (record or wire dict): who, what, and its blobs."""
    content = _get(event, "content")
    media = media_text(content)
    text = content_text(content)
    return turn_text(_get(event, "actor"), f"{text} {media}" if text and media else text or media)


def said_text(content: dict[str, Any]) -> str:
    """What an event says, for display: its text, else its blobs, else its content kind."""
    return str(content.get("text") or media_text(content) or content.get("kind", ""))


def message_text(content: dict[str, Any]) -> str:
    """The text a message or text content says ('' for triples and JSON)."""
    return str(content.get("text") or "")


# -- claims: facts and beliefs ------------------------------------------------------------------
def value_text(obj: Any, *, units: bool = False) -> Any:
    """A claim's object: an entity's (or concept's) name — its id when it has none — or a
    literal's value, followed by its unit when ``units``."""
    if _get(obj, "type") != "literal":
        return _get(obj, "name") or _get(obj, "id")
    value = _get(obj, "value")
    unit = _get(obj, "unit") if units else None
    return f"{value} {unit}" if unit else value


def claim_text(subject: Any, predicate: str, obj: Any, *, negated: bool = False,
               units: bool = False) -> str:  # fmt: skip
    """``subject [not ]predicate value``: how a claim reads."""
    name = _get(subject, "name") or _get(subject, "id")
    negation = "not " if negated else ""
    return f"{name} {negation}{predicate.replace('_', ' ')} {value_text(obj, units=units)}"


def fact_text(fact: Any) -> str:
    """What the indexes see of a fact (record or wire dict): its claim, negated if it is."""
    polarity = _get(fact, "polarity")
    return claim_text(_get(fact, "subject"), _get(fact, "predicate"), _get(fact, "object"),
                      negated=polarity is not None and polarity < 0)  # fmt: skip


def fact_claim_text(fact: Any) -> str:
    """The claim a fact bears on, without its polarity."""
    return claim_text(_get(fact, "subject"), _get(fact, "predicate"), _get(fact, "object"))


def belief_text(belief: Any) -> str:
    """What the indexes see of a belief (record or wire dict): its claim."""
    claim = _get(belief, "claim")
    return claim_text(claim["subject"], claim["predicate"], claim["object"])


# -- episodes -----------------------------------------------------------------------------------
def episode_text(episode: Any) -> str:
    """What the indexes see of an episode (record or wire dict): its title, then its summary."""
    return f"{_get(episode, 'name')}. {_get(episode, 'summary')}"


# -- concepts -----------------------------------------------------------------------------------
def concept_text(concept: Any) -> str:
    """What the indexes see of a concept (record or wire dict): its name, then its summary."""
    return f"{_get(concept, 'name')}. {_get(concept, 'summary') or ''}".strip()
