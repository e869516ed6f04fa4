"""Vocabularies (reference §7.3.1, §8.14): per tenant, stored in the node's ``VO`` table.

A vocabulary names terms of one of two kinds, each term with optional ``aliases``:

| kind        | terms                     | used by                                                  |
|-------------|---------------------------|----------------------------------------------------------|
| ``predicate`` | ``predicates``: ``{id, datatype?, values?, aliases?}`` | extraction: a fact predicate equal to a term's id or one of its aliases (after case-folding, spaces and dashes read as ``_``) is stored as the term's id |
| ``relation``  | ``relations``: ``{id, aliases?}`` | understanding: an edge drawn from a record whose predicate is the term or an alias is labelled with the term (and the vocabulary's name) |

A predicate vocabulary applies to the scopes under its ``scopes`` (scope path prefixes; none: the
whole tenant).  ``PUT`` replaces a vocabulary and bumps its ``version``; what was derived before
keeps the predicates it was derived with.  The maps derivation reads are cached per tenant until
a vocabulary of the tenant changes.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidBody, NotFound, VocabularyExists
from .derive.concepts import term_key
from .scopes import canonical_scope
from .temporal import format_ts

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TERM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_:.-]{0,127}$")
KINDS = ("predicate", "relation")
DATATYPES = ("string", "integer", "number", "boolean", "entity", "timestamp")
FIELDS = ("name", "kind", "description", "predicates", "relations", "scopes")


def _fail(field: str, message: str) -> InvalidBody:
    return InvalidBody(f"{field} {message}", details={"field": field})


class Vocabularies:
    def __init__(self, tables: Any, clock: Any, config: Any) -> None:
        self.table = tables.vocabularies
        self.clock, self.config = clock, config
        self._maps: dict[str, dict[str, Any]] = {}  # tenant -> {"predicates": [...], "relations": {...}}

    # -- validation ----------------------------------------------------------------------------
    def parse(self, body: Any, name: str | None = None) -> dict[str, Any]:
        """The vocabulary a request body describes (400 naming the field otherwise)."""
        if not isinstance(body, dict):
            raise InvalidBody("the body must be a JSON object", details={"field": "body"})
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise _fail(unknown[0], f"is not a field of a vocabulary (fields: {', '.join(FIELDS)})")
        name = body.get("name", name) if name is None else name
        if body.get("name") not in (None, name):
            raise _fail("name", f"must be the name in the path ({name!r})")
        if not isinstance(name, str) or not NAME.match(name):
            raise _fail("name", "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit")
        kind = body.get("kind", "predicate")
        if kind not in KINDS:
            raise _fail("kind", f"must be one of {', '.join(KINDS)}")
        field = "predicates" if kind == "predicate" else "relations"
        other = "relations" if kind == "predicate" else "predicates"
        if body.get(other):
            raise _fail(other, f"has no place in a vocabulary of kind {kind!r} (it lists {field})")
        terms = body.get(field)
        if not isinstance(terms, list) or not terms:
            raise _fail(field, "must be a non-empty array of terms")
        if len(terms) > self.config.vocabulary_max_terms:
            raise _fail(field, f"has {len(terms)} terms; at most {self.config.vocabulary_max_terms}")
        parsed = [self._term(f"{field}[{i}]", term, kind) for i, term in enumerate(terms)]
        seen: dict[str, str] = {}
        for i, term in enumerate(parsed):
            for key in [term_key(term["id"]), *map(term_key, term.get("aliases", ()))]:
                if seen.setdefault(key, term["id"]) != term["id"]:
                    raise _fail(f"{field}[{i}]", f"names {key!r}, which term {seen[key]!r} already names")
        scopes = body.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes) or len(scopes) > 100:
            raise _fail("scopes", "must be an array of at most 100 scope paths")
        description = body.get("description")
        if description is not None and (not isinstance(description, str) or len(description) > 2000):
            raise _fail("description", "must be a string of at most 2000 characters")
        return {"name": name, "kind": kind, "description": description, field: parsed,
                "scopes": [canonical_scope(s) for s in scopes]}  # fmt: skip

    def _term(self, where: str, term: Any, kind: str) -> dict[str, Any]:
        if not isinstance(term, dict):
            raise _fail(where, "must be an object with an id")
        allowed = {"id", "aliases", "description"} | ({"datatype", "values"} if kind == "predicate" else set())
        unknown = sorted(set(term) - allowed)
        if unknown:
            raise _fail(f"{where}.{unknown[0]}", f"is not a field of a {kind} term")
        if not isinstance(term.get("id"), str) or not TERM.match(term["id"]):
            raise _fail(f"{where}.id", "must be 1-128 letters, digits, '_', ':', '.' or '-'")
        out: dict[str, Any] = {"id": term["id"]}
        aliases = term.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and 0 < len(a) <= 128 for a in aliases):
            raise _fail(f"{where}.aliases", "must be an array of strings of 1-128 characters")
        if len(aliases) > self.config.vocabulary_max_aliases:
            raise _fail(f"{where}.aliases", f"has {len(aliases)} aliases; at most {self.config.vocabulary_max_aliases}")
        if aliases:
            out["aliases"] = list(aliases)
        if "datatype" in term:
            if term["datatype"] not in DATATYPES:
                raise _fail(f"{where}.datatype", f"must be one of {', '.join(DATATYPES)}")
            out["datatype"] = term["datatype"]
        if "values" in term:
            values = term["values"]
            if not isinstance(values, list) or len(values) > 1000:
                raise _fail(f"{where}.values", "must be an array of at most 1000 values")
            out["values"] = list(values)
        if isinstance(term.get("description"), str):
            out["description"] = term["description"][:2000]
        return out

    # -- storage -------------------------------------------------------------------------------
    async def create(self, tenant: str, body: Any) -> dict[str, Any]:
        record = self.parse(body)
        if await self.table.exists((tenant, record["name"])):
            raise VocabularyExists(f"vocabulary {record['name']!r} exists: PUT /v1/vocabularies/{record['name']} "
                                   "replaces it", details={"name": record["name"]})  # fmt: skip
        now = format_ts(self.clock.now())
        record.update(version=1, created_at=now, updated_at=now)
        return await self._save(tenant, record)

    async def replace(self, tenant: str, name: str, body: Any) -> dict[str, Any]:
        record = self.parse(body, name)
        before = await self.get(tenant, name)
        record.update(version=before["version"] + 1, created_at=before["created_at"],
                      updated_at=format_ts(self.clock.now()))  # fmt: skip
        return await self._save(tenant, record)

    async def get(self, tenant: str, name: str) -> dict[str, Any]:
        record = await self.table.get((tenant, name)) if isinstance(name, str) else None
        if record is None:
            raise NotFound(f"no vocabulary {str(name)[:80]!r}", details={"name": str(name)[:80]})
        return record

    async def _save(self, tenant: str, record: dict[str, Any]) -> dict[str, Any]:
        await self.table.put((tenant, record["name"]), record, sync=True)
        self._maps.pop(tenant, None)
        return record

    # -- what derivation reads -----------------------------------------------------------------
    async def _map(self, tenant: str) -> dict[str, Any]:
        if tenant not in self._maps:
            predicates: list[tuple[list[str], dict[str, str]]] = []  # (scopes, alias key -> term)
            relations: dict[str, tuple[str, str]] = {}
            async for _, record in self.table.scan(tenant):
                if record["kind"] == "predicate":
                    names = {term_key(t["id"]): t["id"] for t in record["predicates"]}
                    names.update({term_key(a): t["id"] for t in record["predicates"] for a in t.get("aliases", ())})
                    predicates.append((record["scopes"], names))
                else:
                    for term in record["relations"]:
                        for word in [term["id"], *term.get("aliases", ())]:
                            relations.setdefault(term_key(word), (term["id"], record["name"]))
            self._maps[tenant] = {"predicates": predicates, "relations": relations}
        return self._maps[tenant]

    async def predicate(self, tenant: str, scope: str, predicate: str) -> str:
        """A fact predicate normalised through the vocabularies active for ``scope``: the term
        it names, or itself when none names it."""
        key = term_key(predicate)
        for scopes, names in (await self._map(tenant))["predicates"]:
            if key in names and (not scopes or any(scope == s or scope.startswith(s + "/") for s in scopes)):
                return names[key]
        return predicate

    async def relations(self, tenant: str) -> dict[str, tuple[str, str]]:
        """Predicate -> (relation, vocabulary): the tenant's relation terms and their aliases
        (the default relations need no entry: ``derive.concepts.relation_label``)."""
        return dict((await self._map(tenant))["relations"])

