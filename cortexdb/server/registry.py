"""Scope registration and ACLs (reference §3.4.4, §8.8, §18.2 items 5 and 19).

Registration records live in the engine's ``scopes`` table (``Engine.tables.scopes``) and are
edited inside the scope's actor (``Engine.edit_scope``).  This module keeps an in-memory index of
explicit ``owner``/``writer`` memberships per actor, which gives the caller's *natural level*
(the deepest scope where they are an owner or writer) without a scan per request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import attrs

from ..engine.model import Scope, to_wire
from ..engine.policy.capabilities import (
    FORGET_GDPR,
    SCOPE_CREATE_CUSTOM,
    SCOPE_WRITE,
    SCOPE_WRITE_ELEVATED,
    scope_create,
)
from ..engine.scopes import canonical_scope, depth
from ..engine.temporal import parse_duration
from ..errors import (
    InvalidScopeRequest,
    NotFound,
    NotYetAvailable,
    PolicyDenied,
    ScopeRegistrationExists,
    UnregisteredScopeType,
)
from .policy import PolicyEngine, Principal, scope_type

ROLES = ("owner", "writer", "reader")
WRITE_ROLES = ("owner", "writer")
REVIEW_VALUES = (True, False, "writes", "derived")  # true is "writes"
POLICY_FIELDS = ("consolidation", "conflict_resolution", "inherit_from", "audit", "children", "segmentation",
                 "require_review")  # fmt: skip






@attrs.frozen
class Acl:
    """What the gate needs of a scope record: explicit or auto-provisioned, and who has which role."""

    auto: bool
    members: dict[str, str]  # actor -> owner | writer | reader
    review: bool = False  # policies.require_review: non-owners' writes are held as proposals


def _members(value: Any, field: str = "members") -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise InvalidScopeRequest(f"{field} must be a list", details={"field": field})
    seen, out = set(), []
    for i, member in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(member, dict) or set(member) - {"actor", "role"}:
            raise InvalidScopeRequest(f"{where} must be {{actor, role}}", details={"field": where})
        actor, role = member.get("actor"), member.get("role")
        if not isinstance(actor, str) or ":" not in actor:
            raise InvalidScopeRequest(f"{where}.actor must be a type:id actor",
                                      details={"field": f"{where}.actor"})  # fmt: skip
        if role not in ROLES:
            raise InvalidScopeRequest(f"{where}.role must be one of {list(ROLES)}",
                                      details={"field": f"{where}.role"})  # fmt: skip
        if actor in seen:
            raise InvalidScopeRequest(f"{where}: {actor} is listed twice", details={"field": where})
        seen.add(actor)
        out.append({"actor": actor, "role": role})
    return out


class ScopeRegistry:
    def __init__(self, engine: Any, policy: PolicyEngine) -> None:
        self.engine = engine
        self.policy = policy
        self.writers: dict[str, set[str]] = {}  # actor -> scopes where owner/writer
        # every scope record (registered or auto-provisioned) -> its ACL: the gate decides
        # membership on every request without a read
        self.acls: dict[str, Acl] = {}

    async def load(self) -> None:
        async for _, record in self.engine.tables.scopes.scan():
            self._index(record)

    def _index(self, record: Scope | None, previous: Scope | None = None) -> None:
        if previous is not None:
            self.acls.pop(previous.path, None)
            for member in previous.members:
                self.writers.get(member["actor"], set()).discard(previous.path)
        if record is not None:
            self.acls[record.path] = Acl(record.auto_provisioned, {m["actor"]: m["role"] for m in record.members},
                                         record.policies.get("require_review") in (True, "writes"))  # fmt: skip
            for member in record.members:
                if member["role"] in WRITE_ROLES:
                    self.writers.setdefault(member["actor"], set()).add(record.path)

    def refresh(self, path: str, record: Scope | None) -> None:
        """A scope record as another node wrote it (server/shared.py): its ACL and writers anew."""
        self.acls.pop(path, None)
        for scopes in self.writers.values():
            scopes.discard(path)
        self._index(record)

    def acl(self, path: str) -> Acl | None:
        return self.acls.get(path)

    def others_below(self, path: str, actor: str) -> bool:
        """True when a scope below ``path`` holds records or a registration ``actor`` does not
        own (claiming ``path`` would put someone else's scope under its members and policy)."""
        below = path + "/"
        for other, acl in self.acls.items():
            if other.startswith(below) and acl.members.get(actor) != "owner":
                return True
        return False

    def natural_level(self, actor: str) -> str | None:
        scopes = self.writers.get(actor)
        return max(scopes, key=lambda s: (depth(s), s)) if scopes else None

    async def get(self, path: str) -> Scope | None:
        return await self.engine.tables.scopes.get(canonical_scope(path))

    # -- writes ----------------------------------------------------------------------------------
    def write_capability(self, principal: Principal, scope: str) -> str:
        """``scope.write.elevated`` for a write above the caller's natural level (§18.2 item 5),
        else ``scope.write`` (membership itself is the gate's question)."""
        natural = self.natural_level(principal.actor)
        if natural is not None and depth(scope) < depth(natural):
            return SCOPE_WRITE_ELEVATED
        return SCOPE_WRITE

    async def note_write(self, scope: str) -> None:
        """After a successful write: a scope seen for the first time was auto-provisioned by the
        write (its first writer is its owner); index its record."""
        if scope not in self.acls:
            self._index(await self.get(scope))

    async def register(self, principal: Principal, body: Any, now: dt.datetime,
                       check: Callable[[str, str], Any]) -> dict[str, Any]:  # fmt: skip
        """Register ``body["path"]``; ``check(capability, scope)`` is the request's audited
        capability check (it raises when denied)."""
        if not isinstance(body, dict):
            raise InvalidScopeRequest("the body must be an object")
        unknown = set(body) - {"path", "members", "policies", "idempotency_key"}
        if unknown:
            raise InvalidScopeRequest(f"unknown fields {sorted(unknown)}", details={"field": sorted(unknown)[0]})
        if not isinstance(body.get("path"), str):
            raise InvalidScopeRequest("path is required", details={"field": "path"})
        path = canonical_scope(body["path"])
        members = _members(body.get("members", []))
        policies = body.get("policies", {}) or {}
        if not isinstance(policies, dict) or set(policies) - set(POLICY_FIELDS):
            raise InvalidScopeRequest(f"policies may hold {list(POLICY_FIELDS)}", details={"field": "policies"})
        inherit = policies.get("inherit_from")
        if inherit is not None:
            if not isinstance(inherit, list):
                raise InvalidScopeRequest("policies.inherit_from must be a list", details={"field": "policies.inherit_from"})
            policies["inherit_from"] = [canonical_scope(p) for p in inherit]
        if "segmentation" in policies:  # the segment strategy (docs/episodes.md)
            policies["segmentation"] = self.engine.segmentation.check(policies["segmentation"])
        review = policies.get("require_review", False)  # docs/proposals.md (1 is not true here)
        if isinstance(review, int) and not isinstance(review, bool) or review not in REVIEW_VALUES:
            raise InvalidScopeRequest('policies.require_review must be true, false, "writes" or "derived"',
                                      details={"field": "policies.require_review"})  # fmt: skip
        kind = scope_type(path)
        if kind not in self.policy.preset.allowed_scope_types:
            try:
                check(SCOPE_CREATE_CUSTOM, path)
            except PolicyDenied as exc:
                raise UnregisteredScopeType(
                    f"scope type {kind!r} is not in this deployment's allowed_scope_types",
                    details={"type": kind, "allowed": list(self.policy.preset.allowed_scope_types),
                             "capability": SCOPE_CREATE_CUSTOM,
                             "denied_by_tier": exc.details.get("denied_by_tier")}) from None  # fmt: skip
        else:
            check(scope_create(kind), path)
        if not members:
            members = [{"actor": principal.actor, "role": "owner"}]

        def edit(current: Scope | None) -> Scope:
            if current is not None and not current.auto_provisioned:
                raise ScopeRegistrationExists(f"scope {path} is already registered", details={"path": path})
            return Scope(path=path, tenant_id=principal.tenant, members=members, policies=policies,
                         auto_provisioned=False, registered_at=now, created_by=principal.actor,
                         last_write_at=current.last_write_at if current else None)  # fmt: skip

        previous = await self.get(path)
        record = await self.engine.edit_scope(path, edit)
        self._index(record, previous)
        self.policy.changed("scope", path)  # open streams re-check their reader's rights
        return to_wire(record)

    async def set_members(self, principal: Principal, path: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or "members" not in body:
            raise InvalidScopeRequest("the body must be {members: [...]}", details={"field": "members"})
        members = _members(body["members"])
        if not any(m["role"] == "owner" for m in members):
            raise InvalidScopeRequest("a scope keeps at least one owner", details={"field": "members"})
        path = canonical_scope(path)
        diff: dict[str, list] = {}

        def edit(current: Scope | None) -> Scope:
            if current is None:
                raise NotFound(f"scope {path} is not registered", details={"path": path})
            before = {m["actor"]: m["role"] for m in current.members}
            after = {m["actor"]: m["role"] for m in members}
            diff["added"] = [{"actor": a, "role": r} for a, r in after.items() if a not in before]
            diff["removed"] = [{"actor": a, "role": r} for a, r in before.items() if a not in after]
            diff["changed"] = [{"actor": a, "from": before[a], "to": r} for a, r in after.items()
                               if a in before and before[a] != r]  # fmt: skip
            return attrs.evolve(current, members=members, auto_provisioned=False)

        previous = await self.get(path)
        record = await self.engine.edit_scope(path, edit)
        self._index(record, previous)
        self.policy.changed("scope", path)  # open streams re-check their reader's rights
        return {"scope": to_wire(record), **diff}

    async def delete(self, path: str, records: str, check: Callable[[str, str], Any]) -> dict[str, Any]:
        path = canonical_scope(path)
        if records not in ("keep", "forget"):
            raise InvalidScopeRequest("records must be keep or forget", details={"field": "records"})
        previous = await self.get(path)
        if previous is None:
            raise NotFound(f"scope {path} is not registered", details={"path": path})
        if records == "forget":
            check(FORGET_GDPR, path)
            raise NotYetAvailable(
                "records=forget needs GDPR erasure (POST /v1/erasures), which this server does not "
                "implement yet; use records=keep to remove only the registration",
                details={"path": path, "records": "forget"})  # fmt: skip
        await self.engine.edit_scope(path, lambda current: None)
        self._index(None, previous)
        self.policy.changed("scope", path)
        return {"path": path, "deleted": True, "records": "keep"}

    async def list(self, *, prefix: str = "", auto_provisioned: bool | None = None,
                   after: str | None = None, limit: int = 50,
                   keep: Callable[[str], bool] | None = None) -> tuple[list[dict], bool]:  # fmt: skip
        """A page of scope records in path order; ``keep(path)`` filters before the page is cut
        (the caller's read right), so pages are full and cursors exact."""
        items: list[dict] = []
        scopes = self.engine.tables.scopes
        async for _, record in scopes.scan(starting_with=prefix, after=after or None):
            if auto_provisioned is not None and record.auto_provisioned != auto_provisioned:
                continue
            if keep is not None and not keep(record.path):
                continue
            if len(items) == limit:
                return items, True
            items.append(to_wire(record))
        return items, False

    async def prune(self, *, older_than: str, dry_run: bool, now: dt.datetime,
                    prefix: str = "") -> dict[str, Any]:  # fmt: skip
        try:
            age = parse_duration(older_than)
        except (ValueError, TypeError):
            raise InvalidScopeRequest("older_than must be an ISO 8601 duration such as P90D",
                                      details={"field": "older_than"}) from None  # fmt: skip
        cutoff = now - age
        candidates = []
        async for _, record in self.engine.tables.scopes.scan(starting_with=prefix):
            last = record.last_write_at or record.registered_at
            if record.auto_provisioned and last < cutoff:
                candidates.append(record)
        out = []
        for record in candidates:
            counts = await self.engine.layer_counts(record.path)
            out.append({"path": record.path, "last_write": to_wire(record)["last_write_at"],
                        "records": counts})  # fmt: skip
            if not dry_run:
                await self.engine.edit_scope(record.path, lambda current: None)
                self._index(None, record)
                self.policy.changed("scope", record.path)
        return {"candidates": out, "total": len(out), "dry_run": dry_run}
