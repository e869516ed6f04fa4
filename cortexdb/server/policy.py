"""The four-tier capability policy (reference §5, Appendix A).

Deployment → tenant → scope → actor.  A capability is allowed iff every tier allows it; a tier
that is silent inherits its parent's value; no tier can grant what its parent denies (the
evaluation simply never lets a lower tier turn a denial back into an allowance).  Token ``caps``
and ``scopes`` narrow the result further and can never widen it.  Every decision names the tier
that decided, so a 403 cites ``denied_by_tier`` and an allowed call sets ``X-Cortex-Policy``.

The evaluator is synchronous and in memory (the engine calls its hook inline on every write and
read); documents are persisted in the engine's ``policy_docs`` table (``Engine.tables``: (tier,
target) -> document) and reloaded at boot.
"""

from __future__ import annotations

import fnmatch
import re
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import yaml

from ..engine.policy.capabilities import (
    BUILTIN_SCOPE_TYPES,
    CAPABILITIES,
    FORGET_GDPR,
    policy_administer,
)
from ..engine.scopes import ancestors, canonical_scope, is_within, segments
from ..errors import InvalidPolicy, NotAMember, PolicyDenied, PolicyLockout, UnknownPreset

TIERS = ("deployment", "tenant", "scope", "actor")
PRESETS = ("on_prem_enterprise", "cloud_shared_saas", "cloud_private", "dev_local")

SCOPED = "|"  # stored target of an actor's policy within a scope: "<actor>|<scope>"
_PATTERN = re.compile(r"^[a-z0-9_*]+(\.[a-z0-9_*]+)*$")




def matches(patterns: tuple[str, ...] | list[str], capability: str) -> bool:
    """Wildcard match (``*`` = any run of characters, so ``scope.read.*`` covers every read)."""
    return any(p == capability or fnmatch.fnmatchcase(capability, p) for p in patterns)


@attrs.frozen
class PolicyDoc:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    defaults: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def parse(cls, data: Any, where: str = "policy") -> PolicyDoc:
        if not isinstance(data, dict):
            raise InvalidPolicy(f"{where} must be an object", details={"field": where})
        unknown = set(data) - {"allow", "deny", "defaults", "preset", "operator_only",
                               "tenant_defaults", "allowed_scope_types", "experimental_enabled"}  # fmt: skip
        if unknown:
            raise InvalidPolicy(f"{where}: unknown fields {sorted(unknown)}",
                                details={"field": sorted(unknown)[0]})  # fmt: skip
        lists = {}
        for name in ("allow", "deny"):
            value = data.get(name, [])
            if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
                raise InvalidPolicy(f"{where}.{name} must be a list of capability patterns",
                                    details={"field": f"{where}.{name}"})  # fmt: skip
            bad = [p for p in value if p != "*" and not _PATTERN.match(p)]
            if bad:
                raise InvalidPolicy(f"{where}.{name}: malformed pattern {bad[0]!r}",
                                    details={"field": f"{where}.{name}", "pattern": bad[0]})  # fmt: skip
            lists[name] = tuple(value)
        defaults = data.get("defaults", {}) or {}
        if not isinstance(defaults, dict):
            raise InvalidPolicy(f"{where}.defaults must be an object",
                                details={"field": f"{where}.defaults"})  # fmt: skip
        return cls(allow=lists["allow"], deny=lists["deny"], defaults=dict(defaults))

    def to_wire(self) -> dict[str, Any]:
        return {"allow": list(self.allow), "deny": list(self.deny), "defaults": dict(self.defaults)}


@attrs.frozen
class Preset:
    name: str
    doc: PolicyDoc
    operator_only: tuple[str, ...]
    tenant_defaults: PolicyDoc
    allowed_scope_types: tuple[str, ...]
    experimental_enabled: bool
    source: str

    @property
    def defaults(self) -> dict[str, Any]:
        return self.doc.defaults

    def to_wire(self) -> dict[str, Any]:
        return {
            "preset": self.name,
            **self.doc.to_wire(),
            "operator_only": list(self.operator_only),
            "tenant_defaults": self.tenant_defaults.to_wire(),
            "allowed_scope_types": list(self.allowed_scope_types),
            "experimental_enabled": self.experimental_enabled,
        }


def load_preset(name_or_path: str) -> Preset:
    """One of the four shipped presets by name, or a custom YAML file by path."""
    if name_or_path in PRESETS:
        text = resources.files("cortexdb.presets").joinpath(f"{name_or_path}.yaml").read_text()
        source = f"cortexdb/presets/{name_or_path}.yaml"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise UnknownPreset(
                f"unknown deployment preset {name_or_path!r}: use one of {list(PRESETS)} "
                "or the path of a YAML file", details={"preset": name_or_path})  # fmt: skip
        text, source = path.read_text(), str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidPolicy(f"{source}: not valid YAML ({exc})") from None
    return preset_from_dict(data, source)


def preset_from_dict(data: Any, source: str = "policy") -> Preset:
    doc = PolicyDoc.parse(data, source)
    tenant_defaults = PolicyDoc.parse(data.get("tenant_defaults") or {}, f"{source}.tenant_defaults")
    types = tuple(data.get("allowed_scope_types") or BUILTIN_SCOPE_TYPES)
    return Preset(
        name=str(data.get("preset") or "custom"), doc=doc,
        operator_only=tuple(data.get("operator_only") or ()), tenant_defaults=tenant_defaults,
        allowed_scope_types=types, experimental_enabled=bool(data.get("experimental_enabled")),
        source=source,
    )  # fmt: skip


@attrs.define
class Principal:
    """Who is calling, as established by authentication."""

    actor: str
    tenant: str
    signed: bool = False
    caps: tuple[str, ...] | None = None
    scopes: tuple[str, ...] | None = None
    claims: dict[str, Any] = attrs.field(factory=dict)
    operator: bool = False

    @property
    def jti(self) -> str | None:
        return self.claims.get("jti")


@attrs.frozen
class Decision:
    allowed: bool
    capability: str
    tier: str  # the deciding tier: for a denial the tier that denied, else the most specific allow
    reason: str = ""
    membership: bool = False  # denied by the scope's member list (NOT_A_MEMBER), not a capability

    def header(self) -> str:
        verdict = "allow" if self.allowed else "deny"
        return f"tier={self.tier}; decision={verdict}; capability={self.capability}"

    def raise_if_denied(self, preset: str, scope: str | None = None) -> None:
        if not self.allowed:
            details = {"capability": self.capability, "denied_by_tier": self.tier,
                       "deployment_preset": preset, "remediation": self.reason}  # fmt: skip
            if scope:
                details["scope"] = scope
            if self.membership:
                raise NotAMember(f"{self.reason}", details=details)
            raise PolicyDenied(
                f"{self.capability} is denied by the {self.tier} tier: {self.reason}",
                details=details,
            )


def _scope_allows(pattern: str, scope: str) -> bool:
    if pattern.endswith("/*"):
        root = pattern[:-2]
        return is_within(scope, root)
    return fnmatch.fnmatchcase(scope, pattern)


class PolicyEngine:
    """The tier documents and the evaluator."""

    def __init__(self, preset: Preset, documents: Any, *, operators: tuple[str, ...] = ()) -> None:
        self.preset = self._initial = preset
        self.documents = documents  # the persisted tier documents (Engine.tables.policy_docs)
        self.operators = frozenset(operators)
        self.tenants: dict[str, PolicyDoc] = {}
        self.scopes: dict[str, PolicyDoc] = {}
        self.actors: dict[str, PolicyDoc] = {}
        # an actor's policy within one scope (and below), set by that scope's owners: (actor, scope)
        self.actor_scoped: dict[tuple[str, str], PolicyDoc] = {}
        self.version = 0
        self.last_change: dict[str, Any] | None = None

    async def load(self) -> None:
        async for (tier, target), data in self.documents.items():
            doc = PolicyDoc.parse(data)
            if tier == "deployment":
                self.preset = attrs.evolve(self.preset, doc=doc)
            elif tier == "actor" and SCOPED in target:
                actor, scope = target.split(SCOPED, 1)
                self.actor_scoped[(actor, scope)] = doc
            else:
                self._table(tier)[target] = doc

    async def reload(self) -> None:
        """Read every document again (another node changed one: server/shared.py)."""
        self.preset, self.tenants, self.scopes, self.actors, self.actor_scoped = self._initial, {}, {}, {}, {}
        await self.load()
        self.changed("reload", "*")

    def _table(self, tier: str) -> dict[str, PolicyDoc]:
        return {"tenant": self.tenants, "scope": self.scopes, "actor": self.actors}[tier]

    def _get(self, tier: str, target: str, scope: str | None) -> PolicyDoc | None:
        if tier == "actor" and scope is not None:
            return self.actor_scoped.get((target, scope))
        return self._table(tier).get(target)

    def _set(self, tier: str, target: str, scope: str | None, doc: PolicyDoc | None) -> None:
        """Install (or, with None, remove) a document in memory; nothing is persisted."""
        if tier == "deployment":
            self.preset = attrs.evolve(self.preset, doc=doc)
            return
        table: dict[Any, PolicyDoc] = self.actor_scoped if tier == "actor" and scope else self._table(tier)
        key = (target, scope) if tier == "actor" and scope else target
        if doc is None:
            table.pop(key, None)
        else:
            table[key] = doc

    def document(self, tier: str, target: str, scope: str | None = None) -> dict[str, Any]:
        if tier == "deployment":
            return self.preset.to_wire()
        doc = self._get(tier, target, scope)
        if doc is None and tier == "tenant":
            return {"tenant_id": target, "inherited": True, **self.preset.tenant_defaults.to_wire()}
        wire = doc.to_wire() if doc else {"allow": [], "deny": [], "defaults": {}}
        out = {"target": target, "inherited": doc is None, **wire}
        if scope is not None:
            out["scope"] = scope
        return out

    def changed(self, tier: str, target: str) -> None:
        """Something open streams must re-check changed (a policy document or a member list)."""
        self.version += 1
        self.last_change = {"tier": tier, "scope_or_actor": target}

    async def put(self, tier: str, target: str, data: Any, *, principal: Principal,
                  scope: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Replace a tier's document — for the deployment tier, the keys given replace the
        current ones and the rest stay (a partial or empty document cannot wipe the allow list).
        A change that would take away the caller's own right to administer this tier is refused
        with 409 ``POLICY_LOCKOUT`` and nothing is written."""
        if tier == "scope":
            target = canonical_scope(target)
        if tier == "deployment":
            if not isinstance(data, dict):
                raise InvalidPolicy("body must be an object", details={"field": "body"})
            current = self.preset.doc.to_wire()
            merged = {**current, **{k: v for k, v in data.items() if k != "defaults"}}
            if isinstance(data.get("defaults"), dict):
                merged["defaults"] = {**current["defaults"], **data["defaults"]}
            elif "defaults" in data:
                merged["defaults"] = data["defaults"]
            doc = PolicyDoc.parse(merged, "body")
        else:
            doc = PolicyDoc.parse(data, "body")
        capability = policy_administer(tier)
        where = target if tier == "scope" else scope
        previous = self.preset.doc if tier == "deployment" else self._get(tier, target, scope)
        self._set(tier, target, scope, doc)  # try it in memory: the decision is synchronous
        try:
            after = self.decide(principal, capability, where)
        finally:
            self._set(tier, target, scope, previous)
        if not after.allowed:
            raise PolicyLockout(
                f"this change would deny {principal.actor} {capability} (by the {after.tier} tier), "
                "locking the caller out of the policy it is editing; nothing was changed",
                details={"capability": capability, "would_deny_by_tier": after.tier, "tier": tier})  # fmt: skip
        stored_target = f"{target}{SCOPED}{scope}" if tier == "actor" and scope else target
        await self.documents.put((tier, stored_target), doc.to_wire(), sync=True)
        self._set(tier, target, scope, doc)
        self.changed(tier, target if scope is None else f"{target} in {scope}")
        return self.document(tier, target, scope)

    # -- evaluation ------------------------------------------------------------------------------
    def tenant_doc(self, tenant: str) -> PolicyDoc:
        return self.tenants.get(tenant) or self.preset.tenant_defaults

    def settings(self, tenant: str) -> dict[str, Any]:
        """A tenant's settings: the deployment's defaults, its tenant policy's over them."""
        return {**self.preset.defaults, **self.tenant_doc(tenant).defaults}

    def rate_limits(self, tenant: str) -> dict[str, str]:
        defaults = self.settings(tenant)
        return {k: defaults[f"rate_limit.{k}"] for k in ("write", "read") if f"rate_limit.{k}" in defaults}

    def decide(self, principal: Principal, capability: str, scope: str | None = None) -> Decision:
        preset = self.preset
        if matches(preset.doc.deny, capability):
            return Decision(False, capability, "deployment",
                            f"{capability} is not available on {preset.name} deployments")  # fmt: skip
        if matches(preset.operator_only, capability) and principal.actor not in self.operators:
            return Decision(False, capability, "deployment",
                            "operator-only capability: the caller is not a deployment operator")  # fmt: skip
        if not matches(preset.doc.allow, capability):
            return Decision(False, capability, "deployment",
                            f"{preset.name} does not allow {capability}")  # fmt: skip
        tier = "deployment"
        tenant = self.tenant_doc(principal.tenant)
        if matches(tenant.deny, capability):
            return Decision(False, capability, "tenant", "denied by the tenant policy")
        if matches(tenant.allow, capability):
            tier = "tenant"
        if scope is not None and self.scopes:
            for path in [*reversed(ancestors(scope)), scope]:
                doc = self.scopes.get(path)
                if doc is None:
                    continue
                if matches(doc.deny, capability):
                    return Decision(False, capability, "scope", f"denied by the policy of scope {path}")
                if matches(doc.allow, capability):
                    tier = "scope"
        actor_docs = [self.actors.get(principal.actor)]
        if scope is not None and self.actor_scoped:
            actor_docs += [doc for (who, root), doc in self.actor_scoped.items()
                           if who == principal.actor and is_within(scope, root)]  # fmt: skip
        for actor in actor_docs:
            if actor is None:
                continue
            if matches(actor.deny, capability):
                return Decision(False, capability, "actor", "denied by the actor policy")
            if matches(actor.allow, capability):
                tier = "actor"
        if principal.caps is not None and capability not in principal.caps:
            return Decision(False, capability, "token", "the token's caps do not include it")
        if principal.scopes and scope is not None:
            bound = [s.split(":", 1)[1] for s in principal.scopes if s.split(":", 1)[0] == capability]
            if bound and not any(_scope_allows(p, scope) for p in bound):
                return Decision(False, capability, "token",
                                f"the token's scopes do not cover {scope}")  # fmt: skip
        if capability.startswith(FORGET_GDPR) and principal.actor.startswith("service:"):
            return Decision(False, capability, "token",
                            "service tokens cannot perform forget.gdpr (§4.4)")  # fmt: skip
        return Decision(True, capability, tier)

    def check(self, principal: Principal, capability: str, scope: str | None = None) -> Decision:
        decision = self.decide(principal, capability, scope)
        decision.raise_if_denied(self.preset.name, scope)
        return decision

    def effective(self, principal: Principal, scope: str | None) -> dict[str, Any]:
        allowed, denied = [], []
        for capability in CAPABILITIES:
            decision = self.decide(principal, capability, scope)
            if decision.allowed:
                allowed.append(capability)
            else:
                denied.append({"capability": capability, "denied_by_tier": decision.tier})
        return {"allowed": allowed, "denied": denied}


def scope_type(path: str) -> str:
    return segments(path)[-1][0]
