"""The audit log (reference §14): one row per policy-gated call, allowed or denied.

``body_hash = sha256(body || pepper)`` and ``headers_hash = sha256(canonical headers minus
Authorization || pepper)`` with a per-tenant pepper.  Peppers are versioned: a new one is made
when the current one is older than ``audit.pepper_rotation_period`` (or on demand), and old ones
are kept for ``audit.retention + audit.pepper_retention_buffer`` so every retained row stays
verifiable.  Rows older than the retention are pruned, except ``gdpr: true`` rows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from ..engine.policy.capabilities import FORGET_GDPR
from ..engine.temporal import format_ts, parse_duration, parse_rfc3339

SKIP_HEADERS = frozenset({"authorization", "cookie"})


def canonical_headers(headers: Any) -> bytes:
    lines = sorted(
        f"{name.lower()}:{value.strip()}" for name, value in headers.items()
        if name.lower() not in SKIP_HEADERS
    )  # fmt: skip
    return "\n".join(lines).encode()


class AuditLog:
    def __init__(self, tables: Any, new_id: Any, clock: Any, defaults: dict[str, Any],
                 settings: Callable[[str], dict[str, Any]] | None = None) -> None:  # fmt: skip
        self.tables = tables  # the engine's node tables (Engine.tables): audit_rows, peppers
        self.new_id = new_id  # (prefix) -> a fresh id
        self.clock = clock
        self.retention = parse_duration(str(defaults.get("audit.retention", "P2Y")))
        self.rotation = parse_duration(str(defaults.get("audit.pepper_rotation_period", "P3M")))
        self.buffer = parse_duration(str(defaults.get("audit.pepper_retention_buffer", "P3M")))
        # a tenant's settings as they are now (its policy's defaults over the deployment's): the
        # tenant setting ``audit.store_body_bytes`` (§18.2 item 15) is read for every row
        self.settings = settings or (lambda tenant: defaults)
        self._peppers: dict[str, dict[int, dict[str, Any]]] = {}

    # -- peppers ---------------------------------------------------------------------------------
    async def _load_peppers(self, tenant: str) -> dict[int, dict[str, Any]]:
        if tenant not in self._peppers:
            found = {}
            async for version, record in self.tables.peppers.scan(tenant):
                found[version] = record
            self._peppers[tenant] = found
        return self._peppers[tenant]

    async def peppers(self, tenant: str) -> list[int]:
        """The tenant's pepper versions still kept (the current one and those in their buffer)."""
        return sorted(await self._load_peppers(tenant))

    async def rotate_pepper(self, tenant: str) -> int:
        peppers = await self._load_peppers(tenant)
        version = max(peppers, default=0) + 1
        record = {"secret": secrets.token_hex(32), "created_at": format_ts(self.clock.now())}
        await self.tables.write([self.tables.peppers.put_op(tenant, version, record)], sync=True)
        peppers[version] = record
        return version

    async def current_pepper(self, tenant: str) -> tuple[int, bytes]:
        peppers = await self._load_peppers(tenant)
        if peppers:
            version = max(peppers)
            age = self.clock.now() - parse_rfc3339(peppers[version]["created_at"])
            if age < self.rotation:
                return version, bytes.fromhex(peppers[version]["secret"])
        version = await self.rotate_pepper(tenant)
        return version, bytes.fromhex(peppers[version]["secret"])

    @staticmethod
    def _hash(data: bytes, pepper: bytes) -> str:
        return "sha256:" + hashlib.sha256(data + pepper).hexdigest()

    # -- rows ------------------------------------------------------------------------------------
    async def request_fields(self, tenant: str, *, method: str, path: str, body: bytes,
                             headers: Any) -> tuple[int, dict[str, Any]]:  # fmt: skip
        """The pepper version and a row's ``request`` part: the hashes, and the body's size when
        ``audit.store_body_bytes`` (an erasure job's row is written after its request)."""
        version, pepper = await self.current_pepper(tenant)
        request = {
            "method": method, "path": path,
            "body_hash": self._hash(body, pepper),
            "headers_hash": self._hash(canonical_headers(headers), pepper),
        }  # fmt: skip
        if self.settings(tenant).get("audit.store_body_bytes", True) is not False:
            request["body_bytes"] = len(body)
        return version, request

    async def record(self, *, principal: Any, scope: str | None, endpoint: str, method: str,
                     path: str, capability: str, decision: str, tier: str, body: bytes,
                     headers: Any, status: int, request_id: str, elapsed_ms: float,
                     client_ip: str | None, user_agent: str | None,
                     event_id: str | None = None, audit_id: str | None = None,
                     summary: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        version, request = await self.request_fields(principal.tenant, method=method, path=path, body=body,
                                                     headers=headers)  # fmt: skip
        row = {
            "id": audit_id or self.new_id("audit"), "ts": format_ts(self.clock.now()),
            "actor": principal.actor, "token_jti": principal.jti, "tenant_id": principal.tenant,
            "scope": scope, "endpoint": endpoint, "capability": capability,
            "decision": decision, "decided_by_tier": tier, "request": request,
            "response_status": status, "event_id": event_id, "client_ip": client_ip,
            "user_agent": user_agent, "request_id": request_id,
            "elapsed_ms": round(elapsed_ms, 3), "gdpr": capability.startswith(FORGET_GDPR),
            "tenant_pepper_version": version,
        }  # fmt: skip
        if summary is not None:  # what the call did, e.g. a forget's counts
            row["summary"] = summary
        await self.tables.audit_rows.put(row["id"], row)
        return row

    async def get(self, audit_id: str) -> dict[str, Any] | None:
        return await self.tables.audit_rows.get(audit_id)

    async def query(self, *, tenant: str, actor: str | None = None, scope: str | None = None,
                    capability: str | None = None, decision: str | None = None,
                    since: dt.datetime | None = None, after: str | None = None,
                    limit: int = 100) -> tuple[list[dict[str, Any]], bool]:  # fmt: skip
        rows: list[dict[str, Any]] = []
        async for _, row in self.tables.audit_rows.scan(after=after or None):
            if row["tenant_id"] != tenant:
                continue
            if actor is not None and row["actor"] != actor:
                continue
            if scope is not None and row["scope"] != scope and not (row["scope"] or "").startswith(scope + "/"):
                continue
            if capability is not None and row["capability"] != capability:
                continue
            if decision is not None and row["decision"] != decision:
                continue
            if since is not None and parse_rfc3339(row["ts"]) < since:
                continue
            if len(rows) == limit:
                return rows, True
            rows.append(row)
        return rows, False

    async def verify(self, row: dict[str, Any], body: bytes) -> dict[str, Any]:
        peppers = await self._load_peppers(row["tenant_id"])
        version = row.get("tenant_pepper_version")  # an embedded engine's erasure row has none
        pepper = peppers.get(version)
        match = False
        if pepper is not None:
            expected = self._hash(body, bytes.fromhex(pepper["secret"]))
            match = hmac.compare_digest(expected, row["request"]["body_hash"])
        return {"match": match, "hashed_at": row["ts"], "algorithm": "sha256",
                "tenant_pepper_version": version, "audit_id": row["id"],
                "pepper_available": pepper is not None}  # fmt: skip

    async def prune(self) -> int:
        """Drop rows past retention (never ``gdpr`` rows) and peppers past retention + buffer."""
        now = self.clock.now()
        cutoff = now - self.retention
        doomed = []
        rows = self.tables.audit_rows
        async for audit_id, row in rows.scan():
            if parse_rfc3339(row["ts"]) >= cutoff:
                break  # rows are in id (time) order
            if not row.get("gdpr"):
                doomed.append(rows.delete_op(audit_id))
        for tenant, peppers in self._peppers.items():
            current = max(peppers, default=None)
            for version, record in list(peppers.items()):
                created = parse_rfc3339(record["created_at"])
                if version != current and created + self.rotation + self.retention + self.buffer < now:
                    doomed.append(self.tables.peppers.delete_op(tenant, version))
                    del peppers[version]
        if doomed:
            await self.tables.write(doomed)
        return len(doomed)
