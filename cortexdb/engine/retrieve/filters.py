"""Recall ``filters``: ``AND`` / ``OR`` trees of ``{field: {op: value}}`` (reference §8.3).

Fields: ``observed_actor``, ``confidence``, ``modality``, ``labels``, ``predicate``, ``subject``,
``aspect`` (the statement aspect of an event, fact or belief: ``model.aspects``).
Operators: ``in``, ``eq``, ``gte``, ``lte``.  A record lacking a field does not match a condition on
it (so ``confidence`` filters keep only layers that carry a confidence).
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidFilter
from ..model import aspects

FIELDS = ("observed_actor", "confidence", "modality", "labels", "predicate", "subject", "aspect")
OPERATORS = ("in", "eq", "gte", "lte")


def validate(node: Any, path: str = "filters") -> list[str]:
    """Check a filter tree; return the applied filter names (``observed_actor.in``...)."""
    if node in (None, {}):
        return []
    if not isinstance(node, dict):
        raise InvalidFilter(f"{path} must be an object", details={"field": path})
    applied: list[str] = []
    for key, value in node.items():
        if key in ("AND", "OR"):
            if not isinstance(value, list):
                raise InvalidFilter(
                    f"{path}.{key} must be an array", details={"field": f"{path}.{key}"}
                )
            for index, child in enumerate(value):
                applied += validate(child, f"{path}.{key}[{index}]")
        elif key in FIELDS:
            if not isinstance(value, dict) or not value:
                raise InvalidFilter(
                    f"{path}.{key} must be an object of operators",
                    details={"field": f"{path}.{key}"},
                )
            for op, operand in value.items():
                if op not in OPERATORS:
                    raise InvalidFilter(f"{path}.{key}.{op}: unknown operator; use one of {list(OPERATORS)}",
                                        details={"field": f"{path}.{key}.{op}"})  # fmt: skip
                if op == "in" and not isinstance(operand, list):
                    raise InvalidFilter(
                        f"{path}.{key}.in must be an array", details={"field": f"{path}.{key}.in"}
                    )
                if op in ("gte", "lte") and (
                    isinstance(operand, bool) or not isinstance(operand, int | float)
                ):
                    raise InvalidFilter(
                        f"{path}.{key}.{op} must be a number",
                        details={"field": f"{path}.{key}.{op}"},
                    )
                applied.append(f"{key}.{op}")
        else:
            raise InvalidFilter(
                f"{path}: unknown field {key!r}; filterable: {list(FIELDS)}",
                details={"field": f"{path}.{key}"},
            )
    return applied


def mentions(node: Any, field: str) -> bool:
    """Whether a (validated) filter tree has a condition on ``field``."""
    if not isinstance(node, dict):
        return False
    return any(key == field or (key in ("AND", "OR") and any(mentions(c, field) for c in value))
               for key, value in node.items())  # fmt: skip


def field_values(layer: str, record: dict[str, Any]) -> dict[str, Any]:
    """The filterable values of a record (a field absent from a layer is absent here).  A fact's
    or a belief's ``observed_actor`` is not on the record: recall adds it (the observers of the
    events it rests on, ``actors/candidates.py``)."""
    values: dict[str, Any] = {}
    if layer == "events":
        values["observed_actor"] = record.get("actor")
        values["modality"] = record.get("modality")
        labels = record.get("context", {}).get("labels")
        values["labels"] = (
            list(labels)
            if isinstance(labels, list)
            else [f"{k}:{v}" for k, v in (labels or {}).items()]
        )
        values["subject"] = record.get("subject", {}).get("id")
    elif layer == "facts":
        values["confidence"] = record.get("confidence")
        values["predicate"] = record.get("predicate")
        values["subject"] = [record["subject"].get("id"), record["subject"].get("name")]
    elif layer == "beliefs":
        values["confidence"] = record.get("confidence")
        values["predicate"] = record["claim"].get("predicate")
        values["subject"] = [
            record["claim"]["subject"].get("id"),
            record["claim"]["subject"].get("name"),
        ]
    elif layer == "episodes":
        values["observed_actor"] = record.get("actors_involved")
        values["confidence"] = record.get("centrality_score")
    elif layer == "understanding":  # a concept: its subjects (ids, name) and topics (predicates)
        inputs = record.get("synthesis_inputs", {}).get("filters", {})
        values["confidence"] = record.get("confidence")
        values["predicate"] = list(inputs.get("topics", ()))
        values["subject"] = [*inputs.get("subjects", ()), record.get("name")]
    values["aspect"] = aspects.of_record(layer, record)
    return {k: v for k, v in values.items() if v is not None}


def _condition(value: Any, op: str, operand: Any) -> bool:
    candidates = value if isinstance(value, list) else [value]
    if op == "in":
        return any(v in operand for v in candidates)
    if op == "eq":
        return any(v == operand for v in candidates)
    numbers = [v for v in candidates if isinstance(v, int | float) and not isinstance(v, bool)]
    if op == "gte":
        return any(v >= operand for v in numbers)
    return any(v <= operand for v in numbers)


def matches(node: Any, values: dict[str, Any]) -> bool:
    if not node:
        return True
    for key, value in node.items():
        if key == "AND":
            if not all(matches(child, values) for child in value):
                return False
        elif key == "OR":
            if not any(matches(child, values) for child in value):
                return False
        else:
            if key not in values:
                return False
            if not all(_condition(values[key], op, operand) for op, operand in value.items()):
                return False
    return True
