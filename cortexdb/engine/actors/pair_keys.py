"""What the lane knows of a current fact without its record: its object's key, whether it is of a
single-valued predicate, whether it asserts positively (decisions.md, "Derivation costs what an
event changes").

A pair a subject restates with ever new objects (someone who likes 120 things, each with someone
else) holds as many current facts.  Fact resolution of a multi-valued assertion compares it with
the facts of its own object only, and revision of a pair whose claims cannot weigh on each other
revises only the claims of the objects a batch changed; both used to decode and key every current
fact of the pair (and re-read those the record cache had dropped) on every assertion.  With the
keys of the pair's current ids held here, they decode only the facts of the objects concerned.

A fact's object, predicate arity and polarity never change once it is made (a new assertion makes
a new fact), so a key stays true for as long as its fact exists; entries of facts no longer in a
pair's current list are dropped at a trim (``cache_bounds._trim_pairs``), and all at once with the
lane's caches.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from ..derive.facts import object_key
from ..model import Fact


class FactKey(NamedTuple):
    okey: str  # ``derive.facts.object_key`` of its object
    single_valued: bool
    positive: bool  # polarity > 0: it names a claim


class Keyed(NamedTuple):
    """A pair's current facts split by object key."""

    facts: list[Fact]  # those of the objects asked for, in id order (as ``current_facts``)
    single_valued: bool  # whether any current fact of the pair is of a single-valued predicate
    others: set[str]  # the object keys of the other positive current facts (their claims)


class FactKeys:
    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: dict[str, FactKey] = {}  # fact id -> its key

    def note(self, fact: Fact) -> FactKey:
        key = self.keys[fact.id] = FactKey(object_key(fact.object), fact.single_valued, fact.polarity > 0)
        return key

    def unknown(self, ids: set[str]) -> list[str]:
        """The ids of ``ids`` not noted yet (a set difference, in C: most calls find none), in id order."""
        return sorted(ids.difference(self.keys))

    def split(self, ids: Iterable[str], okeys: set[str]) -> tuple[list[str], bool, set[str]]:
        """Of the fact ids ``ids`` (each noted, or gone from the store): those whose object key
        is in ``okeys`` (sorted), whether any is single-valued, the other positive ones' keys."""
        keys, wanted, single, others = self.keys, [], False, set()
        for fact_id in ids:
            key = keys.get(fact_id)
            if key is None:
                continue  # not in the store (``decoded`` leaves it out too)
            single = single or key.single_valued
            if key.okey in okeys:
                wanted.append(fact_id)
            elif key.positive:
                others.add(key.okey)
        wanted.sort()
        return wanted, single, others

    def keep_only(self, held: Iterable[Collection[str]], slack: int) -> None:
        """Keep only the keys of the ids still ``held`` (the pairs' current lists) once the others
        outnumber them by more than ``slack``: a superseded fact is never keyed again, and in a
        scope whose facts keep superseding each other they were nearly all of them (one rebuild
        per as many new keys as it keeps, plus ``slack``: amortised constant work a fact)."""
        held = list(held)
        if len(self.keys) <= 2 * sum(map(len, held)) + slack:
            return
        keys = self.keys
        self.keys = {i: keys[i] for ids in held for i in ids if i in keys}

    def clear(self) -> None:
        self.keys.clear()
