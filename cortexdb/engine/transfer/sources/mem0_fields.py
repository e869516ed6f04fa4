"""The Mem0 fields a memory's labels keep (``mem0.memory``), and which of them a record has."""

from __future__ import annotations

from typing import Any

LABELLED = ("hash", "metadata", "immutable", "expiration_date", "replaced_by", "synthesized", "attributed_to",
            "role", "actor_id", "user_id", "agent_id", "run_id", "session_id", "app_id", "created_at", "updated_at")  # fmt: skip

LABEL_NAMES = tuple((name, f"mem0_{name}") for name in LABELLED)
SCALARS = frozenset((str, int, float, bool))
FIELD_SETS = 256  # the field names of records (a file's records have few sets), remembered


def labelled(item: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The ``LABEL_NAMES`` pairs whose field ``item`` has, in that order: remembered by the
    record's field names (one lookup a record instead of sixteen)."""
    fields = tuple(item)
    found = _FIELDS.get(fields)
    if found is None:
        if len(_FIELDS) >= FIELD_SETS:
            _FIELDS.clear()
        names = set(fields)
        found = _FIELDS[fields] = tuple(pair for pair in LABEL_NAMES if pair[0] in names)
    return found


_FIELDS: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {}


def reraise(exc: Exception) -> Any:
    """``exc`` raised again (``mem0._one`` turns it into the failed record)."""
    raise exc
