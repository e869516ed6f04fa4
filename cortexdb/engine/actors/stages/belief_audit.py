"""The audit row of a belief deleted under the tenant's confidence floor (reference §7.4, §18.2
item 16: "the ``audit_id`` of the deletion is recorded in the audit log").

The deletion is the consolidation's, not a request's: the row (§14's shape) names the write
whose evidence moved the belief below the floor — its caller as ``actor``, its ``event_id`` —
the ``tenant`` tier (whose floor decided), and in ``summary`` the deletion note that ``GET
/v1/beliefs/{id}`` answers with its 410, which carries the row's ``audit_id`` in turn.  Its
``body_hash`` is the sha256 of the note's canonical JSON (the engine holds no tenant pepper).
Deletions for lack of any evidence (a forget, a cancel) are audited by that request's own row.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ... import jsoncodec
from ...derive.revision import Deletion
from ...model import Event
from ...policy.capabilities import SCOPE_WRITE
from ...temporal import format_ts

BELOW_FLOOR = "below_confidence_floor"
SYSTEM_ACTOR = "system:consolidate"  # a revision no write of this scope caused (another scope's)


def audited(deletion: Deletion) -> bool:
    return deletion.reason == BELOW_FLOOR


def deletion_row(work: Any, deletion: Deletion, cause: Event | None, audit_id: str) -> dict[str, Any]:
    """The deletion note (with its ``audit_id``) and the audit row, as one dict each."""
    note = {**deletion.note(), "audit_id": audit_id, "confidence_floor": work.config.confidence_floor}
    digest = hashlib.sha256(jsoncodec.encode_canonical(note)).hexdigest()
    return {
        "id": audit_id, "ts": format_ts(deletion.at),
        "actor": cause.caller if cause is not None else SYSTEM_ACTOR, "token_jti": None,
        "tenant_id": cause.tenant_id if cause is not None else work.config.tenant_id,
        "scope": work.scope, "endpoint": "INTERNAL belief deletion", "capability": SCOPE_WRITE,
        "decision": "allow", "decided_by_tier": "tenant",
        "request": {"method": "INTERNAL", "path": "consolidate", "body_hash": f"sha256:{digest}",
                    "headers_hash": "sha256:" + hashlib.sha256(b"").hexdigest()},
        "response_status": 200, "event_id": cause.id if cause is not None else None, "client_ip": None,
        "user_agent": None, "request_id": cause.id if cause is not None else audit_id, "elapsed_ms": 0,
        "gdpr": False, "belief_id": deletion.belief.id, "summary": note,
    }  # fmt: skip
