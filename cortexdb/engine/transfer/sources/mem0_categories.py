"""Mem0's ``categories`` in one label (``mem0_categories``), and back (sources/mem0.py)."""

from __future__ import annotations

from typing import Any

import orjson


def categories_label(categories: Any) -> str:
    """``categories`` as one label: joined at commas (``travel,food``), or as a JSON array when a
    category holds a comma itself (it would come back split) or the value is not a list."""
    if isinstance(categories, list) and all(isinstance(c, str) and "," not in c for c in categories) \
            and not (categories and categories[0].startswith("[")):  # fmt: skip
        return ",".join(categories)
    return orjson.dumps(categories if isinstance(categories, list) else [categories]).decode()


def categories_of(label: Any) -> list[Any]:
    """The categories a ``mem0_categories`` label holds (``categories_label``'s inverse)."""
    text = str(label)
    if text.startswith("["):
        try:
            found = orjson.loads(text)
        except orjson.JSONDecodeError:
            found = None
        if isinstance(found, list):
            return found
    return text.split(",")
