"""The records of forgetting, erasure, blobs, scopes, identity, policy and audit (reference
§8.5, §8.6, §8.8, §8.10, §8.13, §8.16, §5.5)."""

from __future__ import annotations

from typing import Any

import attrs

from ._records import Record


# -- forget and erasure (§8.5, §8.6) -----------------------------------------------------------------
@attrs.frozen(kw_only=True)
class ForgetResult(Record):
    """``POST /v1/forget``: how many records of each layer went, and the audit row."""

    LOCAL = ("replay",)
    deleted: dict[str, int] = attrs.field(factory=dict)
    audit_id: str | None = None
    replay: bool = False


@attrs.frozen(kw_only=True)
class ErasurePreview(Record):
    """``POST /v1/erasures/preview``: what an erasure would do (nothing is changed)."""

    preview_id: str | None = None
    scope: str | None = None
    data_subjects: list[str] = attrs.field(factory=list)
    estimated_affected: dict[str, int] = attrs.field(factory=dict)
    refcount_breakdown: dict[str, int] = attrs.field(factory=dict)
    cross_scope_propagation: dict[str, Any] = attrs.field(factory=dict)
    legal_holds: list[Any] = attrs.field(factory=list)
    estimated_duration_ms: int | None = None
    manifest_url: str | None = None
    expires_at: str | None = None


@attrs.frozen(kw_only=True)
class Erasure(Record):
    """An erasure job: accepted (``POST /v1/erasures``) or its status (``GET``); ``audit_id``
    is set once it completed."""

    erasure_id: str | None = None
    scope: str | None = None
    status: str | None = None
    phase: str | None = None
    fraction_complete: float | None = None
    progress: dict[str, Any] = attrs.field(factory=dict)
    audit_id: str | None = None
    manifest_url: str | None = None
    lifecycle_stream: str | None = None


@attrs.frozen(kw_only=True)
class ErasureCancel(Record):
    erasure_id: str | None = None
    cancellation_accepted: bool | None = None
    deleted_events_before_cancel: int | None = None
    audit_id: str | None = None
    cancel_audit_id: str | None = None


# -- blobs (§8.13) ------------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Blob(Record):
    """An uploaded blob; reference it from an experience as ``content.media: [{"blob_id": ...}]``."""

    LOCAL = ("replay",)
    blob_id: str | None = None
    scope: str | None = None
    size_bytes: int | None = None
    content_type: str | None = None
    filename: str | None = None
    sha256: str | None = None
    replay: bool = False


# -- scopes (§8.8) ----------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Scope(Record):
    path: str | None = None
    tenant_id: str | None = None
    members: list[dict[str, Any]] = attrs.field(factory=list)
    policies: dict[str, Any] = attrs.field(factory=dict)
    auto_provisioned: bool | None = None
    registered_at: str | None = None
    created_by: str | None = None
    last_write_at: str | None = None


# -- identity and policy (§8.16, §5.5) -------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Whoami(Record):
    """``GET /v1/auth/whoami``: who the server takes the caller for, and what it may do."""

    caller: str | None = None
    tenant_id: str | None = None
    deployment_preset: str | None = None
    signed: bool | None = None
    operator: bool | None = None
    token: dict[str, Any] | None = None
    effective_capabilities: list[str] = attrs.field(factory=list)
    natural_level: str | None = None


@attrs.frozen(kw_only=True)
class CapabilitySet(Record):
    """``GET /v1/policy/effective``."""

    actor: str | None = None
    scope: str | None = None
    deployment_preset: str | None = None
    allowed: list[str] = attrs.field(factory=list)
    denied: list[Any] = attrs.field(factory=list)
    natural_level: str | None = None
    rate_limits: dict[str, str] = attrs.field(factory=dict)


# -- audit (§8.10, §14) -----------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class AuditRow(Record):
    id: str | None = None
    ts: str | None = None
    actor: str | None = None
    scope: str | None = None
    endpoint: str | None = None
    capability: str | None = None
    decision: str | None = None
    decided_by_tier: str | None = None
    response_status: int | None = None
    request_id: str | None = None
    event_id: str | None = None


@attrs.frozen(kw_only=True)
class AuditVerification(Record):
    match: bool | None = None
    hashed_at: str | None = None
    algorithm: str | None = None
    tenant_pepper_version: int | None = None


# -- temporal phrases (§8.17) -------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Phrase(Record):
    name: str | None = None
    pattern: str | None = None
    resolves_to: dict[str, Any] = attrs.field(factory=dict)
