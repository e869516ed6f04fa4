"""The gate: the one place that decides whether a caller may touch a scope (DESIGN §8).

Every capability check of every route — and of the engine, through its policy hook — ends in
``Gate.decide``, which stacks two questions:

1. **Capability** — the four-tier policy (``policy.PolicyEngine.decide``): deployment → tenant →
   scope → actor, token caps and scopes narrowing.
2. **Membership** — for capabilities that touch a scope's records, the caller's *role* on that
   scope (§3.4.4): reading needs any role, writing needs ``writer`` or ``owner`` (or a
   scratchpad), administering (members, scope policy, erasure) needs ``owner``, and *claiming* a
   scope (registering it) needs ``owner`` or ``claimant``.

A caller's role on a scope, first rule that applies (docs/security.md):

1. deployment operators and tenant admins are ``owner`` everywhere;
2. an explicitly registered scope: its member list;
3. a *personal* scope — one with a ``user:X`` segment (the outermost one) — belongs to ``user:X``
   unless registered: nobody else reads or writes it;
4. below an explicitly registered ancestor: the nearest such ancestor's member list;
5. otherwise the scope is a scratchpad (§3.4.4): any caller reads and writes it (``open``); its
   first writer — or anyone, while nothing was ever written to it — is its ``claimant``, who may
   register it, unless other actors' scopes already lie below it (registering it would put them
   under its members and policy): then only a tenant admin may.

A membership denial is a 403 ``NOT_A_MEMBER`` attributed to the ``scope`` tier, audited like
every other denial.  Requests are also *admitted* here before authentication: JSON bodies must be
``application/json`` (415) and browser origins must be loopback or configured (403), so a web
page cannot drive a local server (CSRF).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..engine.policy import capabilities as cap
from ..engine.scopes import ancestors, segments
from ..errors import OriginNotAllowed, UnsupportedMediaType
from .policy import Decision, PolicyEngine, Principal
from .registry import ScopeRegistry

READ, WRITE, CLAIM, ADMINISTER = "read", "write", "claim", "administer"
RIGHTS = {
    "owner": frozenset({READ, WRITE, CLAIM, ADMINISTER}),
    "writer": frozenset({READ, WRITE}),
    "reader": frozenset({READ}),
    "claimant": frozenset({READ, WRITE, CLAIM}),  # a scratchpad's first writer, or nobody yet
    "open": frozenset({READ, WRITE}),  # a scratchpad someone else wrote first
}

# What a capability needs on the scope it is checked against.  Capabilities not listed are
# tenant-level (audit, admin, tokens, phrases, ...) and need no membership.
_EXACT = {
    cap.SCOPE_READ_LOCAL: READ, cap.SCOPE_READ_HOLISTIC: READ, cap.SCOPE_READ_DESCEND: READ,
    cap.SCOPE_READ_CROSS_TENANT: READ, cap.UNDERSTANDING_READ: READ,
    cap.UNDERSTANDING_READ_CROSS_SCOPE: READ, cap.LIFECYCLE_SUBSCRIBE: READ, cap.DIAGNOSTICS_READ: READ,
    cap.SCOPE_WRITE: WRITE, cap.SCOPE_WRITE_ELEVATED: WRITE, cap.SCOPE_WRITE_ON_BEHALF_OF: WRITE,
    cap.SCOPE_WRITE_ABOUT_OTHER: WRITE, cap.FORGET_CASCADE_DERIVED_ONLY: WRITE,
    cap.FORGET_CASCADE_REDACT_EVENTS: WRITE, cap.LLM_INVOKE: READ,
    cap.POLICY_ADMINISTER_SCOPE: ADMINISTER, cap.FORGET_GDPR: ADMINISTER,
    cap.FORGET_GDPR_CROSS_WORKSPACE: ADMINISTER, cap.UNDERSTANDING_SYNTHESIZE: ADMINISTER,
    cap.BLOB_UPLOAD: WRITE, cap.BLOB_READ: READ,  # a blob's scope is the one it was uploaded to
    cap.SIGNAL_WRITE: WRITE, cap.SIGNAL_READ: READ, cap.PROPOSAL_CREATE: WRITE, cap.PROPOSAL_READ: READ,
    cap.PROPOSAL_REVIEW: ADMINISTER, cap.INTAKE_READ: READ, cap.INTAKE_ACK: WRITE,
}  # fmt: skip
_PREFIXES = ((cap.EXPORT_FORMAT_PREFIX, READ), (cap.IMPORT_FROM_PREFIX, WRITE),
             (cap.SCOPE_CREATE_PREFIX, CLAIM))  # fmt: skip

LOOPBACK_HOSTS = frozenset({"localhost", "::1"})
JSON_TYPES = ("application/json",)


def needed_access(capability: str) -> str | None:
    """The access a capability needs on its scope, or None for a tenant-level capability."""
    found = _EXACT.get(capability)
    if found is not None:
        return found
    for prefix, access in _PREFIXES:
        if capability.startswith(prefix):
            return access
    return None


def personal_owner(scope: str) -> str | None:
    """``user:X`` for a scope with a ``user:X`` segment (the outermost), else None."""
    for kind, ident in segments(scope):
        if kind == "user":
            return f"user:{ident}"
    return None


class Gate:
    def __init__(self, policy: PolicyEngine, registry: ScopeRegistry, *,
                 tenant_admins: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> None:  # fmt: skip
        self.policy = policy
        self.registry = registry
        self.tenant_admins = frozenset(tenant_admins)
        self.allowed_origins = frozenset(o.rstrip("/").lower() for o in allowed_origins)

    # -- who is who --------------------------------------------------------------------------
    def is_admin(self, principal: Principal) -> bool:
        """Deployment operators and the tenant's admins: owners of every scope of the tenant."""
        return principal.operator or principal.actor in self.tenant_admins

    def role(self, principal: Principal, scope: str) -> str | None:
        """The caller's role on ``scope``: owner | writer | reader | claimant | open | None."""
        if self.is_admin(principal):
            return "owner"
        actor = principal.actor
        acl = self.registry.acl(scope)
        if acl is not None and not acl.auto:
            return acl.members.get(actor)
        personal = personal_owner(scope)
        if personal is not None:
            return "owner" if actor == personal else None
        for ancestor in ancestors(scope):
            inherited = self.registry.acl(ancestor)
            if inherited is not None and not inherited.auto:
                return inherited.members.get(actor)
        if acl is None or acl.members.get(actor) == "owner":
            return "claimant"
        return "open"

    def may(self, principal: Principal, access: str, scope: str) -> bool:
        role = self.role(principal, scope)
        if role is None or access not in RIGHTS[role]:
            return False
        if access == CLAIM and role == "claimant":
            return not self.registry.others_below(scope, principal.actor)
        return True

    # -- decisions ---------------------------------------------------------------------------
    def decide(self, principal: Principal, capability: str, scope: str | None = None, *,
               access: str | None = None) -> Decision:  # fmt: skip
        """The capability decision, then the membership one; ``access`` overrides what the
        capability needs on the scope (registration claims with ``policy.administer.scope``)."""
        decision = self.policy.decide(principal, capability, scope)
        if not decision.allowed or scope is None:
            return decision
        access = access or needed_access(capability)
        if access is None or self.may(principal, access, scope):
            return decision
        role = self.role(principal, scope)
        if access == CLAIM and role == "claimant":
            why = "other actors' scopes lie below it, so only a tenant admin may register it"
        elif role == "claimant":
            why = f"it is an unregistered scratchpad; register it first (POST /v1/scopes) to {access} it"
        elif role in (None, "open", "claimant"):
            why = f"{principal.actor} is not a member of {scope}"
        else:
            why = f"{principal.actor} is a {role} of {scope}"
        return Decision(False, capability, "scope", f"{capability} needs the right to {access} {scope}: {why}",
                        membership=True)  # fmt: skip

    # -- admission (before authentication) ---------------------------------------------------
    def admit(self, headers: Any, method: str, body: bytes, json_body: bool) -> None:
        """Refuse cross-site browser requests and non-JSON bodies on JSON routes."""
        origin = headers.get("Origin")
        if origin is not None and not self.origin_allowed(origin):
            raise OriginNotAllowed(
                f"requests from the web origin {origin[:200]!r} are refused: only loopback "
                "origins and those configured with --allow-origin may call this server",
                details={"origin": origin[:200]})  # fmt: skip
        if json_body and method in ("POST", "PUT", "PATCH", "DELETE") and body.strip():
            content_type = (headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if content_type not in JSON_TYPES:
                raise UnsupportedMediaType(
                    f"this endpoint takes a JSON body: send Content-Type: application/json "
                    f"(got {content_type or 'none'!r})",
                    details={"content_type": content_type[:200] or None, "expected": "application/json"})  # fmt: skip

    def origin_allowed(self, origin: str) -> bool:
        normalised = origin.strip().rstrip("/").lower()
        if normalised in self.allowed_origins or "*" in self.allowed_origins:
            return True
        try:
            parts = urlsplit(normalised)
            host = parts.hostname or ""
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and (host in LOOPBACK_HOSTS or _is_loopback_v4(host))


def _is_loopback_v4(host: str | None) -> bool:
    if not host:
        return False
    parts = host.split(".")
    return len(parts) == 4 and parts[0] == "127" and all(p.isdigit() and int(p) < 256 for p in parts)
