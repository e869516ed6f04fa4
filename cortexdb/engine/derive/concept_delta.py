"""A closed concept version stored compact (``CV``), pure: what its row holds and how it reads.

A concept is re-synthesized at every event that touches its subject, and each change closes a
version; its summary, ``supports``, ``edges`` and ``supported_by`` grow with the subject and
change by a few lines at a time.  A closed version's row keeps its scalar fields whole and each
of ``DELTA_FIELDS`` only as the difference from the version that replaced it (``later``): absent
when equal, else an edit script (``diff``) that rebuilds it from ``later``'s value.  The row is
marked by ``_d`` (the edit scripts) and ``_c``, a CRC-32 of ``later``'s fields it reads, so a
chain whose next version was rewritten or lost fails loudly (``broken``: a 500 ``INTERNAL``) instead of
answering with text that was never there.  A row without ``_d`` is whole (every row before
session 35, and one in every ``chain`` versions: ``whole``).

Edit scripts, for two values of the same field (``old`` the closed version's, ``new`` ``later``'s):
- ``{"s": ops}``: a string, as its ``"; "``-separated pieces (a summary's lines) edited;
- ``{"l": ops}``: a list, item by item;
- ``{"m": [[key, script], ...]}``: a dict, key by key in ``old``'s order (``{"=": 1}`` the same value);
- ``{"v": value}``: ``old`` itself; ``{"x": 1}``: the field was absent.
``ops`` are ``[i, n]`` (``new``'s items ``i`` to ``i + n``) and ``[items]`` (``old``'s own items),
in order.
"""

from __future__ import annotations

import difflib
import zlib
from typing import Any

from ...errors import Internal
from .. import jsoncodec

#: the fields a compact row keeps as edits of the later version's
DELTA_FIELDS = ("summary", "supports", "edges", "supported_by", "synthesis_inputs", "derived_from")
SEP = "; "
_SAME = {"=": 1}
_ABSENT = {"x": 1}


def whole(version: int, later_version: int, chain: int) -> bool:
    """Whether the version closed at ``version`` (replaced by ``later_version``) is stored whole:
    when a multiple of ``chain`` lies in ``(version, later_version]``.  Versions only grow along a
    concept's rows, so a read goes forward through at most ``chain`` rows to a whole one (or to
    the current version); ``chain`` 1 stores every version whole."""
    return version // chain != later_version // chain


def broken(version: str, why: str) -> Internal:
    """The error a read of a broken chain raises (a stored-data fault: never a silent answer)."""
    return Internal(f"the stored concept version {version} cannot be read: {why}",
                    details={"concept_version": version, "reason": "broken_version_chain"},
                    retriable=False)


def is_compact(row: dict[str, Any]) -> bool:
    return "_d" in row


def check(later: dict[str, Any]) -> int:
    """The CRC-32 of what a compact row reads of ``later`` (a concept's wire form)."""
    return zlib.crc32(jsoncodec.encode([later.get(name, _ABSENT) for name in DELTA_FIELDS]))


def compact(closed: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """The row of ``closed`` (a concept version's wire form) written against ``later`` (the wire
    form of the version that replaced it, as it is stored)."""
    row = {k: v for k, v in closed.items() if k not in DELTA_FIELDS}
    scripts: dict[str, Any] = {}
    for name in DELTA_FIELDS:
        if name in closed and name in later and closed[name] == later[name]:
            continue
        if name not in closed and name not in later:
            continue
        scripts[name] = diff(closed[name], later[name]) if name in closed and name in later else (
            _ABSENT if name not in closed else {"v": closed[name]})  # fmt: skip
    row["_d"], row["_c"] = scripts, check(later)
    return row


def expand(row: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """The wire form of the version ``row`` holds (``later``: the next version's wire form)."""
    if not is_compact(row):
        return row
    if row["_c"] != check(later):
        raise broken(f"{row.get('id')}@v{row.get('version', 1)}", "its next version is not the one it was written against")
    out = {k: v for k, v in row.items() if k not in ("_d", "_c")}
    scripts = row["_d"]
    for name in DELTA_FIELDS:
        script = scripts.get(name)
        if script is None:
            if name in later:
                out[name] = later[name]
        elif script != _ABSENT:
            out[name] = patch(script, later.get(name))
    return out


def diff(old: Any, new: Any) -> dict[str, Any]:
    """The edit script that makes ``old`` from ``new``."""
    if old == new and type(old) is type(new):
        return _SAME
    if isinstance(old, str) and isinstance(new, str) and SEP in old:
        return {"s": _ops(old.split(SEP), new.split(SEP))}
    if isinstance(old, list) and isinstance(new, list):
        return {"l": _ops(old, new)}
    if isinstance(old, dict) and isinstance(new, dict):
        return {"m": [[k, diff(v, new[k]) if k in new else {"v": v}] for k, v in old.items()]}
    return {"v": old}


def patch(script: dict[str, Any], new: Any) -> Any:
    """``diff``'s inverse: the old value from ``script`` and ``new``."""
    if "=" in script:
        return new
    if "v" in script:
        return script["v"]
    if "s" in script:
        return SEP.join(_apply(script["s"], new.split(SEP)))
    if "l" in script:
        return _apply(script["l"], new)
    return {k: patch(s, new.get(k) if isinstance(new, dict) else None) for k, s in script["m"]}


def _key(item: Any) -> Any:
    return item if isinstance(item, str) else jsoncodec.encode(item)


def _ops(old: list[Any], new: list[Any]) -> list[list[Any]]:
    """The ops that make ``old`` from ``new``: their common ends copied as they are, the middle
    matched by ``difflib`` (a revision changes a few items: the middle is short)."""
    old_keys, new_keys = [_key(x) for x in old], [_key(x) for x in new]
    head = 0
    while head < len(old_keys) and head < len(new_keys) and old_keys[head] == new_keys[head]:
        head += 1
    tail = 0
    while (tail < len(old_keys) - head and tail < len(new_keys) - head
           and old_keys[-1 - tail] == new_keys[-1 - tail]):  # fmt: skip
        tail += 1
    ops: list[list[Any]] = [[0, head]] if head else []
    middle = difflib.SequenceMatcher(None, new_keys[head : len(new_keys) - tail],
                                     old_keys[head : len(old_keys) - tail], autojunk=False)  # fmt: skip
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        if tag == "equal":
            ops.append([head + i1, i2 - i1])
        elif j2 > j1:  # replace or insert: old's own items; delete: nothing
            ops.append([old[head + j1 : head + j2]])
    if tail:
        ops.append([len(new) - tail, tail])
    return ops


def _apply(ops: list[list[Any]], new: list[Any]) -> list[Any]:
    out: list[Any] = []
    for op in ops:
        if len(op) == 2:
            out += new[op[0] : op[0] + op[1]]
        else:
            out += op[0]
    return out
