"""The default extractor: ``triple`` and ``json`` content mapped directly, text read by rules.

The rules are deliberately few and documented in ``docs/extraction.md``; what they cannot read
they leave alone (no guessing).  First-person rules apply to what the subject says about
themselves (user messages, text, documents); assistant/tool/system turns only feed the
third-person rules.
"""

from __future__ import annotations

import re
from typing import Any

from ..spi.extractor import CandidateFact, Extraction, ExtractionContext, TermRef
from ..temporal import try_parse_rfc3339
from . import interpersonal

NAME = "rules_v1"
MAX_OBJECT_CHARS = 80

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE_END = re.compile(
    r"\s*(?:[,;:()]|\s-\s|\bbut\b|\bbecause\b|\bwhich\b|\bso\b|\band I\b|\band my\b|\bwhen\b|\bsince\b|$)",
    re.I,
)
_HEDGE = re.compile(r"\b(i think|maybe|probably|perhaps|might|i guess|not sure|possibly)\b", re.I)
_STOP_SUBJECTS = {
    "it", "this", "that", "there", "he", "she", "they", "we", "i", "you", "what", "here",
    "which", "who", "where", "when", "how", "why", "these", "those", "everything", "nothing",
    "something", "someone", "everyone", "today", "yesterday", "tomorrow", "life", "that's",
}  # fmt: skip
_FIRST_PERSON_ROLES = {None, "user"}

_LIKE_VERBS = {
    "like": "likes", "love": "likes", "enjoy": "likes", "adore": "likes",
    "prefer": "prefers", "hate": "dislikes", "dislike": "dislikes", "detest": "dislikes",
}  # fmt: skip

_MY_ATTR = re.compile(r"\bmy (?P<attr>[a-z][a-z' ]{1,40}?) (?:is|are|was) (?P<value>.+)", re.I)
_AGE = re.compile(r"\bI(?:'m| am) (?P<num>\d{1,3}) years? old\b", re.I)
_LIVE = re.compile(r"\bI (?:live|am living|reside|'m living) in (?P<value>.+)", re.I)
_MOVED = re.compile(r"\bI (?:just |recently )?moved to (?P<value>.+)", re.I)
_WORK_AT = re.compile(r"\bI (?:work|am working|'m working) (?:at|for) (?P<value>.+)", re.I)
_WORK_AS = re.compile(r"\bI (?:work|am working|'m working) as (?:a |an )?(?P<value>.+)", re.I)
_PREF = re.compile(
    r"\bI (?:really |also |just |absolutely |still )?(?P<neg>don't |do not |no longer |never |can't stand )?"
    r"(?P<verb>like|love|enjoy|adore|prefer|hate|dislike|detest)s? (?P<value>.+)",
    re.I,
)
_I_AM_A = re.compile(r"\bI(?:'m| am) (?:a|an) (?P<value>.+)", re.I)
_PROPER = r"(?P<subject>(?:[A-Z][\w&'.-]*)(?: (?:[A-Z][\w&'.-]*|of|&))*)"
_X_IS = re.compile(_PROPER + r" (?:is|was) (?:now )?(?P<value>(?:a |an |the )?.+)")
_X_WORKS = re.compile(_PROPER + r" works? (?:at|for) (?P<value>.+)")
_X_LIVES = re.compile(_PROPER + r" lives? in (?P<value>.+)")
_QUANTITY = re.compile(
    r"(?P<subject>\bI\b|" + _PROPER[len("(?P<subject>") : -1] + r") "
    r"(?:has|have|had|moved to|grew to|reached|signed(?: for)?|bought|owns?|needs?|upgraded to|now has)"
    r" (?:about |around |over |nearly |exactly )?(?P<num>\d[\d,]*(?:\.\d+)?) (?P<unit>[a-z][a-z-]{1,30})",
)
_ENTITY_MENTION = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?: [A-Z][a-z]+)*)\b")
_TRAILING = re.compile(
    r"\s+(?:anymore|any more|now|too|either|as well|a lot|so much|very much)$", re.I
)
_NUMBER = re.compile(r"^-?\d[\d,]*(?:\.\d+)?$")


def _predicate(text: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "_", text.casefold()).strip("_")
    return words[:64]


def _clause(text: str) -> str | None:
    """The object phrase: up to the clause boundary, trimmed; None when empty or too long."""
    match = _CLAUSE_END.search(text)
    value = text[: match.start()] if match else text
    value = value.strip().rstrip(".!?\"' ").strip()
    value = _TRAILING.sub("", value).strip()
    if not value or len(value) > MAX_OBJECT_CHARS:
        return None
    return value


def _literal(value: str) -> tuple[Any, str]:
    if _NUMBER.match(value):
        number = value.replace(",", "")
        return (float(number), "number") if "." in number else (int(number), "integer")
    if value.casefold() in ("true", "yes"):
        return True, "boolean"
    if value.casefold() in ("false", "no"):
        return False, "boolean"
    return value, "string"


def _object(value: str, *, prefer_entity: bool) -> tuple[Any, str]:
    literal, datatype = _literal(value)
    if datatype != "string":
        return literal, datatype
    stripped = re.sub(r"^(?:the|a|an) ", "", value, flags=re.I)
    if prefer_entity or _looks_like_a_name(stripped):
        return TermRef(stripped), "entity"
    return value, "string"


def _looks_like_a_name(value: str) -> bool:
    """Capitalised words (``Acme Corp``, ``Rex``), not shouting (``BLUE``) or a sentence."""
    words = value.split()
    return 0 < len(words) <= 4 and all(w[:1].isupper() for w in words) and not value.isupper()


def _scalar(value: Any) -> tuple[Any, str] | None:
    """A JSON scalar with its fact datatype (None for null, objects and arrays)."""
    if isinstance(value, bool):
        return value, "boolean"
    if isinstance(value, int):
        return value, "integer"
    if isinstance(value, float):
        return value, "number"
    if isinstance(value, str):
        return value, "string"
    return None


def _unit_predicate(unit: str) -> str:
    singular = unit[:-1] if unit.endswith("s") and not unit.endswith("ss") else unit
    return _predicate(singular) + "_count"


class RuleExtractor:
    """Deterministic, dependency-free extraction; see ``docs/extraction.md`` for the patterns."""

    name = NAME

    def extract(self, context: ExtractionContext) -> Extraction:
        kind = context.content.get("kind")
        if kind == "triple":
            return Extraction(facts=(self._triple(context),))
        if kind == "json":
            return Extraction(facts=tuple(self._json(context)))
        text = context.content.get("text")
        if kind not in ("message", "text") or not isinstance(text, str):
            return Extraction(unread=True)
        first_person = context.content.get("role") in _FIRST_PERSON_ROLES
        me = TermRef(context.subject_id, actor_id=context.subject_id)
        facts: list[CandidateFact] = []
        mentions: dict[str, TermRef] = {}
        for sentence in _SENTENCE.split(text):
            sentence = sentence.strip()
            if not sentence:
                continue
            hedge = 0.6 if _HEDGE.search(sentence) else 1.0
            found = self._sentence(sentence, me if first_person else None, hedge)
            facts.extend(found)
            for match in _ENTITY_MENTION.finditer(sentence):
                name = match.group(1)
                if name.casefold() not in _STOP_SUBJECTS and name not in ("I",):
                    mentions.setdefault(name.casefold(), TermRef(name))
        for fact in facts:
            for term in (fact.subject, fact.object_value):
                if isinstance(term, TermRef) and term.actor_id is None:
                    mentions.setdefault(term.name.casefold(), term)
        return Extraction(facts=tuple(facts), entities=tuple(mentions.values()))

    # -- text -----------------------------------------------------------------------------------
    def _sentence(self, sentence: str, me: TermRef | None, hedge: float) -> list[CandidateFact]:
        out: list[CandidateFact] = []

        def add(subject, predicate, raw, *, conf, pattern, single=True, polarity=1, entity=False):
            value = _clause(raw) if isinstance(raw, str) else raw
            if value is None or not predicate:
                return
            if isinstance(value, str):
                obj, datatype = _object(value, prefer_entity=entity)
            else:
                obj, datatype = value
            out.append(
                CandidateFact(
                    subject=subject, predicate=predicate, object_value=obj, datatype=datatype,
                    confidence=round(conf * hedge, 4), pattern=pattern, single_valued=single,
                    polarity=polarity,
                )
            )  # fmt: skip

        if me is not None:
            _about_me(sentence, me, add)
        _quantities(sentence, me, add)
        interpersonal.relations(sentence, me, add)
        _about_others(sentence, out, add)
        return out

    # -- structured -----------------------------------------------------------------------------
    def _subject_term(self, value: Any, context: ExtractionContext) -> TermRef:
        if isinstance(value, str) and re.match(r"^[a-z][a-z0-9_]*:[^\s/]+$", value):
            return TermRef(value, actor_id=value)
        if isinstance(value, str) and value:
            return TermRef(value)
        return TermRef(context.subject_id, actor_id=context.subject_id)

    def _triple(self, context: ExtractionContext) -> CandidateFact:
        content = context.content
        raw = content["object"]
        if isinstance(raw, str) and raw.startswith("ent:"):
            obj, datatype = TermRef(raw[4:]), "entity"
        elif isinstance(raw, str):
            obj, datatype = raw, content.get("datatype", "string")
            if datatype == "entity":
                obj = TermRef(raw)
        else:
            obj, datatype = _scalar(raw)
        return CandidateFact(
            subject=self._subject_term(content["subject"], context),
            predicate=_predicate(content["predicate"]) or "related_to",
            object_value=obj,
            datatype=datatype,
            confidence=float(content.get("confidence", 0.95)),
            pattern="triple",
            single_valued=bool(content.get("single_valued", True)),
            polarity=-1 if content.get("negated") else 1,
            valid_from=try_parse_rfc3339(content.get("valid_from") or ""),
            valid_to=try_parse_rfc3339(content.get("valid_to") or ""),
        )

    def _json(self, context: ExtractionContext) -> list[CandidateFact]:
        data = context.content["data"]
        subject = self._subject_term(
            data.get("subject") if isinstance(data, dict) else None, context
        )
        out: list[CandidateFact] = []

        def emit(path: str, value: Any, single: bool) -> None:
            if isinstance(value, str) and not 0 < len(value) <= MAX_OBJECT_CHARS:
                return  # an empty or essay-long value is not a fact object (never cut short)
            typed = _scalar(value)
            if typed is None:
                return
            obj, datatype = typed
            out.append(CandidateFact(subject=subject, predicate=_predicate(path), object_value=obj,
                                     datatype=datatype, confidence=0.9, pattern="json_field",
                                     single_valued=single))  # fmt: skip

        def walk(prefix: str, value: Any, depth: int) -> None:
            if isinstance(value, dict) and depth < 3:
                for key, item in value.items():
                    if depth == 0 and key == "subject":
                        continue
                    walk(f"{prefix}.{key}" if prefix else str(key), item, depth + 1)
            elif isinstance(value, list):
                for item in value[:1000]:
                    if not isinstance(item, dict | list):
                        emit(prefix, item, single=False)
            elif prefix:
                emit(prefix, value, single=True)

        walk("", data, 0)
        return out


# -- the text rules, one function per family; ``add`` keeps what they read (``_sentence``) -------
def _about_me(sentence: str, me: TermRef, add) -> None:
    """First-person rules: what the subject says about themselves."""
    if m := _MY_ATTR.search(sentence):
        attr = m.group("attr").strip()
        if not re.search(r"\b(i|you|he|she|it|we|they)\b", attr, re.I):
            add(me, _predicate(attr), m.group("value"), conf=0.9, pattern="my_x_is_y")
    if m := _AGE.search(sentence):
        add(
            me,
            "age",
            (int(m.group("num")), "integer"),
            conf=0.9,
            pattern="i_am_n_years_old",
        )
    if m := _LIVE.search(sentence):
        add(me, "lives_in", m.group("value"), conf=0.85, pattern="i_live_in", entity=True)
    elif m := _MOVED.search(sentence):
        add(me, "lives_in", m.group("value"), conf=0.8, pattern="i_moved_to", entity=True)
    if m := _WORK_AS.search(sentence):
        add(me, "occupation", m.group("value"), conf=0.85, pattern="i_work_as")
    elif m := _WORK_AT.search(sentence):
        add(me, "works_at", m.group("value"), conf=0.85, pattern="i_work_at", entity=True)
    if m := _PREF.search(sentence):
        predicate = _LIKE_VERBS[m.group("verb").casefold()]
        polarity = -1 if m.group("neg") else 1
        add(
            me,
            predicate,
            m.group("value"),
            conf=0.8,
            pattern="i_prefer",
            single=False,
            polarity=polarity,
        )
    elif (m := _I_AM_A.search(sentence)) and not _AGE.search(sentence):
        add(me, "is_a", m.group("value"), conf=0.7, pattern="i_am_a", single=False)


def _quantities(sentence: str, me: TermRef | None, add) -> None:
    """``<subject> has 40 employees``: a count, by the unit's predicate."""
    for m in _QUANTITY.finditer(sentence):
        subject_text = m.group("subject")
        if subject_text == "I":
            if me is None:
                continue
            subject = me
        elif subject_text.casefold() in _STOP_SUBJECTS:
            continue
        else:
            subject = TermRef(subject_text)
        number, datatype = _literal(m.group("num"))
        add(subject, _unit_predicate(m.group("unit")), (number, datatype), conf=0.8,
            pattern="quantity_with_unit")  # fmt: skip


def _about_others(sentence: str, out: list[CandidateFact], add) -> None:
    """Third-person rules about a proper-noun subject: only the first rule that matches applies."""
    for regex, predicate, pattern, entity in (
        (_X_WORKS, "works_at", "x_works_at", True),
        (_X_LIVES, "lives_in", "x_lives_in", True),
        (_X_IS, "is", "x_is_y", False),
    ):
        m = regex.search(sentence)
        if not m:
            continue
        subject_text = m.group("subject")
        if subject_text.split()[0].casefold() in _STOP_SUBJECTS or subject_text == "I":
            continue
        if predicate == "is" and any(subject_text in (f.subject.name, getattr(f.object_value, "name", None))
                                     for f in out):  # fmt: skip
            continue  # a more specific rule already read this subject (or named it: "X is Y's sister")
        add(
            TermRef(subject_text),
            predicate,
            m.group("value"),
            conf=0.7,
            pattern=pattern,
            entity=entity,
        )
        break
