"""The administrative endpoint families: erasure (§8.6), blobs (§8.13), scopes (§8.8), policy
(§5.5), audit (§8.10), tokens (§8.16), temporal phrases (§8.17) and admin (§8.15)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, BinaryIO

from ._admin_models import (
    AuditRow,
    AuditVerification,
    Blob,
    CapabilitySet,
    Erasure,
    ErasureCancel,
    ErasurePreview,
    ForgetResult,
    Phrase,
    Scope,
    Whoami,
)
from ._ops import Namespace, new_key, page, record, segment
from ._records import Page, Record
from ._transport import Call, json_body

POLICY_TIERS = ("deployment", "tenant", "scope", "actor")


class Forgetting(Namespace):
    """Selective forget and GDPR erasure, on the client itself (§8.5, §8.6.3)."""

    def forget(self, *, scope: str | None = None, layers: list[str] | None = None,
               selector: Mapping[str, Any] | None = None, cascade: str | None = None,
               confirm_all: bool | None = None, audit_note: str | None = None,
               idempotency_key: str | None = None) -> Any:  # fmt: skip
        """Forget records of the named layers matching ``selector`` (``about_subject``,
        ``about_entity``, ``predicate``, ``memory_ids``, ``valid_during``, ``recorded_during``);
        ``cascade`` is ``derived_only`` (the deployment's default) or ``redact_events``.  An
        empty selector needs ``confirm_all=True``."""
        body = {"scope": self.resolve_scope(scope), "layers": layers, "selector": dict(selector or {}),
                "cascade": cascade, "confirm_all": confirm_all, "audit_note": audit_note,
                "idempotency_key": idempotency_key or new_key()}  # fmt: skip
        return self.run(Call("POST", "/v1/forget", json={k: v for k, v in body.items() if v is not None},
                             parse=record(ForgetResult)))  # fmt: skip

    def forget_gdpr(self, *, scope: str | None = None, audit_note: str | None = None,
                    from_preview_id: str | None = None, idempotency_key: str | None = None) -> Any:  # fmt: skip
        """Erase a scope for good (a GDPR erasure job; ``client.erasures.execute``)."""
        return Erasures(self.transport).execute(scope=scope, audit_note=audit_note, from_preview_id=from_preview_id,
                                                idempotency_key=idempotency_key)  # fmt: skip

    def whoami(self) -> Any:
        """Who the server takes this client for, and its effective capabilities."""
        return Auth(self.transport).whoami()


class Erasures(Namespace):
    """Reference-counted GDPR erasure (§8.6, experimental): preview, manifest, execute, status,
    cancel.  Progress arrives on ``client.lifecycle(erasure_id=...)``."""

    def preview(self, scope: str | None = None, *, audit_note: str | None = None) -> Any:
        body = {"scope": self.resolve_scope(scope), **({"audit_note": audit_note} if audit_note else {})}
        return self.run(Call("POST", "/v1/erasures/preview", json=body, parse=record(ErasurePreview), safe=True))

    def manifest(self, job_id: str, *, limit: int | None = None, cursor: str | None = None) -> Any:
        """One page of the line-by-line plan of a preview (``ervw_``) or an erasure."""
        return self.run(self._manifest_call(job_id, limit, cursor))

    def manifest_iter(self, job_id: str, *, limit: int | None = None) -> Any:
        return self.transport.paginate(self._manifest_call(job_id, limit, None))

    def _manifest_call(self, job_id: str, limit: int | None, cursor: str | None) -> Call:
        kind = "preview/" if job_id.startswith("ervw_") else ""
        return Call("GET", f"/v1/erasures/{kind}{segment(job_id)}/manifest", params={"limit": limit, "cursor": cursor},
                    parse=page(Record))  # fmt: skip

    def execute(self, scope: str | None = None, *, audit_note: str | None = None, from_preview_id: str | None = None,
                idempotency_key: str | None = None) -> Any:  # fmt: skip
        """Start the erasure (202): an ``Erasure`` with its ``erasure_id``."""
        body = {"scope": self.resolve_scope(scope), "audit_note": audit_note, "from_preview_id": from_preview_id,
                "idempotency_key": idempotency_key or new_key()}  # fmt: skip
        return self.run(Call("POST", "/v1/erasures", json={k: v for k, v in body.items() if v is not None},
                             parse=record(Erasure)))  # fmt: skip

    def status(self, erasure_id: str) -> Any:
        return self.run(Call("GET", f"/v1/erasures/{segment(erasure_id)}", parse=record(Erasure)))

    def cancel(self, erasure_id: str) -> Any:
        """Best-effort cancel at the next phase boundary."""
        return self.run(Call("POST", f"/v1/erasures/{segment(erasure_id)}/cancel", json={},
                             parse=record(ErasureCancel), safe=True))  # fmt: skip


class Blobs(Namespace):
    """Files for multimodal experiences (§8.13)."""

    def upload(self, data: bytes | BinaryIO, *, scope: str | None = None, content_type: str | None = None,
               filename: str | None = None) -> Any:  # fmt: skip
        """Upload bytes or a seekable binary file (sent whole, streamed) into ``scope``.  The
        same bytes, content type and file name into the same scope again are a replay (the first
        ``blob_id``, ``blob.replay``), so retries are safe."""
        headers = {"Content-Type": content_type or "application/octet-stream"}
        params = {"scope": self.resolve_scope(scope), "filename": filename}
        return self.run(Call("POST", "/v1/blobs", params=params, body=data, headers=headers,
                             parse=record(Blob), safe=True))  # fmt: skip

    def download(self, blob_id: str) -> Any:
        """The blob's bytes."""
        return self.run(Call("GET", f"/v1/blobs/{segment(blob_id)}", parse=lambda response: response.content))


class Scopes(Namespace):
    """Scope registration, lookup, listing, members, deletion and pruning (§8.8)."""

    def register(self, path: str, *, members: list[Mapping[str, str]] | None = None,
                 policies: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
        """Register ``path`` (the caller its owner unless ``members`` say otherwise).  Not
        retried after a lost answer: a second registration is ``SCOPE_REGISTRATION_EXISTS``."""
        body: dict[str, Any] = {"path": path, "members": list(members or [])}
        if policies:
            body["policies"] = dict(policies)
        return self.run(Call("POST", "/v1/scopes", json=body, parse=record(Scope)))

    def get(self, path: str | None = None) -> Any:
        return self.run(Call("GET", "/v1/scopes", params={"path": self.resolve_scope(path)}, parse=record(Scope)))

    def list(self, prefix: str | None = None, *, auto_provisioned: bool | None = None, limit: int | None = None,
             cursor: str | None = None) -> Any:  # fmt: skip
        return self.run(self._list_call(prefix, auto_provisioned, limit, cursor))

    def iter(self, prefix: str | None = None, *, auto_provisioned: bool | None = None, limit: int | None = None) -> Any:
        return self.transport.paginate(self._list_call(prefix, auto_provisioned, limit, None))

    def _list_call(self, prefix: str | None, auto: bool | None, limit: int | None, cursor: str | None) -> Call:
        params = {"prefix": prefix, "auto_provisioned": auto, "limit": limit, "cursor": cursor}
        return Call("GET", "/v1/scopes", params=params, parse=page(Scope))

    def set_members(self, path: str, members: list[Mapping[str, str]]) -> Any:
        """Replace the member list (the server answers with the diff)."""
        return self.run(Call("PUT", "/v1/scopes/members", params={"path": path}, json={"members": list(members)},
                             parse=record(Record)))  # fmt: skip

    def delete(self, path: str, *, records: str = "keep") -> Any:
        return self.run(Call("DELETE", "/v1/scopes", params={"path": path, "records": records}, parse=record(Record)))

    def prune(self, *, older_than: str = "P90D", dry_run: bool = True, prefix: str | None = None) -> Any:
        """Idle auto-provisioned scopes (``dry_run`` lists them; tenant admins only)."""
        body = {"older_than": older_than, "dry_run": dry_run, **({"prefix": prefix} if prefix else {})}
        return self.run(Call("POST", "/v1/scopes/prune", json=body, parse=record(Record), safe=dry_run))

    def segmentation(self, path: str | None = None) -> Any:
        """The scope's episode segment strategy (``strategy``, ``gap_seconds``, ``source``: scope
        or engine) and its latest re-segmentation ``job`` (docs/episodes.md)."""
        params = {"path": self.resolve_scope(path)}
        return self.run(Call("GET", "/v1/scopes/segmentation", params=params, parse=record(Record)))

    def set_segmentation(self, strategy: str, path: str | None = None, *, gap_seconds: float | None = None) -> Any:
        """Set the scope's segment strategy (``time_gap``, ``session``, ``thread``, ``turn_pair``,
        ``daily``): its episodes are re-segmented from the WAL by a job, whose status this is
        (``job_id``, ``progress``; ``segmentation()`` shows it later).  Setting the same strategy
        again is safe: it re-segments to the same episodes."""
        body = {"strategy": strategy, **({"gap_seconds": gap_seconds} if gap_seconds is not None else {})}
        params = {"path": self.resolve_scope(path)}
        return self.run(Call("PUT", "/v1/scopes/segmentation", params=params, json=body, parse=record(Record), safe=True))


class Policy(Namespace):
    """Effective capabilities and each tier's policy document (§5.5)."""

    def effective(self, *, actor: str | None = None, scope: str | None = None) -> Any:
        return self.run(Call("GET", "/v1/policy/effective", params={"actor": actor, "scope": scope},
                             parse=record(CapabilitySet)))  # fmt: skip

    def get(self, tier: str, target: str | None = None, *, scope: str | None = None) -> Any:
        """``tier`` is ``deployment`` (no target), ``tenant``, ``scope`` or ``actor``."""
        return self.run(Call("GET", self._path(tier, target), params={"scope": scope}, parse=record(Record)))

    def put(self, tier: str, document: Mapping[str, Any], target: str | None = None, *,
            scope: str | None = None) -> Any:  # fmt: skip
        return self.run(Call("PUT", self._path(tier, target), params={"scope": scope}, json=dict(document),
                             parse=record(Record)))  # fmt: skip

    @staticmethod
    def _path(tier: str, target: str | None) -> str:
        if tier not in POLICY_TIERS:
            raise ValueError(f"tier must be one of {POLICY_TIERS}")
        if tier == "deployment":
            return "/v1/policy/deployment"
        if not target:
            raise ValueError(f"the {tier} policy needs a target (the {tier}'s id)")
        return f"/v1/policy/{tier}/{target if tier == 'scope' else segment(target)}"


class Audit(Namespace):
    """The audit log (§8.10): query, one row, verify a body against a row's hash."""

    def query(self, *, scope: str | None = None, actor: str | None = None, capability: str | None = None,
              decision: str | None = None, since: str | None = None, limit: int | None = None,
              cursor: str | None = None) -> Any:  # fmt: skip
        return self.run(self._query_call(locals()))

    def iter(self, *, scope: str | None = None, actor: str | None = None, capability: str | None = None,
             decision: str | None = None, since: str | None = None, limit: int | None = None) -> Any:  # fmt: skip
        return self.transport.paginate(self._query_call(locals()))

    @staticmethod
    def _query_call(args: dict[str, Any]) -> Call:
        params = {k: v for k, v in args.items() if k != "self"}
        return Call("GET", "/v1/audit", params=params, parse=page(AuditRow))

    def get(self, audit_id: str) -> Any:
        return self.run(Call("GET", f"/v1/audit/{segment(audit_id)}", parse=record(AuditRow)))

    def verify(self, audit_id: str, body: str | bytes | Mapping[str, Any]) -> Any:
        """Does ``body`` (the raw request body, or a dict encoded as JSON) hash to the row's?"""
        if isinstance(body, Mapping):
            body = json.dumps(body)
        text = body.decode() if isinstance(body, bytes) else body
        return self.run(Call("POST", "/v1/audit/verify", json={"audit_id": audit_id, "body": text},
                             parse=record(AuditVerification), safe=True))  # fmt: skip


class Auth(Namespace):
    """Tokens (§8.16)."""

    def whoami(self) -> Any:
        return self.run(Call("GET", "/v1/auth/whoami", parse=record(Whoami)))

    def revoke(self, jti: str, *, reason: str | None = None, exp: int | None = None) -> Any:
        """Revoke a token by its ``jti`` (one's own, or any as an operator); repeating is harmless."""
        body = {k: v for k, v in {"jti": jti, "reason": reason, "exp": exp}.items() if v is not None}
        return self.run(Call("POST", "/v1/auth/revoke", json=body, parse=json_body, safe=True))


class Phrases(Namespace):
    """Custom temporal phrases of the tenant (§8.17; admins register and delete)."""

    def add(self, name: str, pattern: str, resolves_to: Mapping[str, Any]) -> Any:
        body = {"name": name, "pattern": pattern, "resolves_to": dict(resolves_to)}
        return self.run(Call("POST", "/v1/temporal/phrases", json=body, parse=record(Phrase)))

    def list(self) -> Any:
        return self.run(Call("GET", "/v1/temporal/phrases",
                             parse=lambda response: [Phrase.from_wire(p) for p in response.json()["items"]]))  # fmt: skip

    def delete(self, name: str) -> Any:
        return self.run(Call("DELETE", f"/v1/temporal/phrases/{segment(name)}", parse=record(Record)))


class Admin(Namespace):
    """Operations (§8.15): version, health, metrics, flushing derivations, compaction."""

    def version(self) -> Any:
        return self.run(Call("GET", "/v1/admin/version", parse=record(Record)))

    def health(self) -> Any:
        return self.run(Call("GET", "/v1/admin/health", parse=record(Record)))

    def metrics(self) -> Any:
        """The Prometheus text."""
        return self.run(Call("GET", "/v1/admin/metrics", parse=lambda response: response.text))

    def flush(self, scope: str | None = None, *, seal: bool = False) -> Any:
        """Wait until queued derivations (of ``scope``, or all) are done; ``seal`` closes open episodes."""
        body = {"seal": seal, **({"scope": scope} if scope else {})}
        return self.run(Call("POST", "/v1/admin/flush-views", json=body, parse=record(Record), safe=True))

    def compact(self) -> Any:
        return self.run(Call("POST", "/v1/admin/compact", json={}, parse=record(Record), safe=True))

    def openapi(self) -> Any:
        """The API as OpenAPI 3.1 (a dict)."""
        return self.run(Call("GET", "/v1/openapi.json"))


__all__ = ["Admin", "Audit", "Auth", "Blobs", "Erasures", "Forgetting", "Page", "Phrases", "Policy", "Scopes"]
