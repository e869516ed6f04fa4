"""The ONLY module that knows how records map to storage keys.

Every key is ``<table> 0x00 <parts joined by 0x00>``.  Scope paths, ids, actor ids and tenant
ids never contain NUL, so prefixes are unambiguous and a table's prefix never matches another
table's.  UUID v7 ids sort by creation time, so per-scope tables iterate in capture order.

| table | key parts                                   | value                                |
|-------|---------------------------------------------|--------------------------------------|
| E     | scope, evt_id                               | Event (immutable once written)       |
| W     | wal_offset (8 bytes, big-endian)            | scope NUL evt_id — the node WAL order |
| X     | evt_id                                      | EventState (stages, derives, errors) |
| P     | scope, evt_id                               | empty — marks an unfinished pipeline |
| F     | scope, fact_id                              | Fact                                 |
| FI    | scope, subject_id, predicate, fact_id       | empty — fact resolution index        |
| FS    | scope, fact_id, evt_id                      | empty — every event supporting a fact |
| B     | scope, belief_id                            | Belief                               |
| BI    | scope, claim key                            | belief_id                            |
| EP    | scope, ep_id                                | Episode                              |
| EO    | scope, window key                           | ep_id of the open episode            |
| BD    | scope, belief_id                            | deletion note (410 on direct lookup) |
| FW    | scope, evt_id                               | foreign consolidation work item      |
| V     | scope, record id                            | float32 embedding of the record text |
| N     | tenant, ent_id                              | Entity                               |
| NA    | tenant, normalised alias                    | ent_id                               |
| I     | tenant, caller, endpoint family, key        | idempotency record                   |
| TP    | tenant, phrase name                         | custom temporal phrase               |
| L     | lce_id                                      | LifecycleEvent                       |
| S     | scope                                       | Scope                                |
| BT    | batch_id                                    | bulk batch record                    |
| M     | name                                        | node metadata (e.g. last wal_offset) |
| PO    | tier, target                                | policy document (server: four tiers) |
| RV    | jti                                         | revoked token (expires with the token) |
| AU    | audit_id                                    | audit row (server, §14)              |
| PP    | tenant, version (8 digits)                  | audit pepper                         |
"""

from __future__ import annotations

SEP = b"\x00"


def _key(table: bytes, *parts: str) -> bytes:
    return table + SEP + "\x00".join(parts).encode()


def _prefix(table: bytes, *parts: str) -> bytes:
    return _key(table, *parts) + SEP if parts else table + SEP


def last_part(key: bytes) -> str:
    return key.rsplit(SEP, 1)[1].decode()


# events -------------------------------------------------------------------------------------
def event(scope: str, event_id: str) -> bytes:
    return _key(b"E", scope, event_id)


def events_prefix(scope: str) -> bytes:
    return _prefix(b"E", scope)


def wal(offset: int) -> bytes:
    return b"W" + SEP + offset.to_bytes(8, "big")


WAL_PREFIX = b"W" + SEP


def wal_offset_of(key: bytes) -> int:
    return int.from_bytes(key[2:], "big")


def wal_value(scope: str, event_id: str) -> bytes:
    return scope.encode() + SEP + event_id.encode()


def parse_wal_value(value: bytes) -> tuple[str, str]:
    scope, event_id = value.split(SEP)
    return scope.decode(), event_id.decode()


def event_state(event_id: str) -> bytes:
    return _key(b"X", event_id)


def pending(scope: str, event_id: str) -> bytes:
    return _key(b"P", scope, event_id)


def pending_prefix(scope: str) -> bytes:
    return _prefix(b"P", scope)


# derived layers -----------------------------------------------------------------------------
def fact(scope: str, fact_id: str) -> bytes:
    return _key(b"F", scope, fact_id)


def facts_prefix(scope: str) -> bytes:
    return _prefix(b"F", scope)


def fact_index(scope: str, subject_id: str, predicate: str, fact_id: str) -> bytes:
    return _key(b"FI", scope, subject_id, predicate, fact_id)


def fact_index_prefix(
    scope: str, subject_id: str | None = None, predicate: str | None = None
) -> bytes:
    parts = [scope] + [p for p in (subject_id, predicate) if p is not None]
    return _prefix(b"FI", *parts)


def belief(scope: str, belief_id: str) -> bytes:
    return _key(b"B", scope, belief_id)


def beliefs_prefix(scope: str) -> bytes:
    return _prefix(b"B", scope)


def belief_claim(scope: str, claim_key: str) -> bytes:
    return _key(b"BI", scope, claim_key)


def episode(scope: str, episode_id: str) -> bytes:
    return _key(b"EP", scope, episode_id)


def episodes_prefix(scope: str) -> bytes:
    return _prefix(b"EP", scope)


def open_episode(scope: str, window: str) -> bytes:
    return _key(b"EO", scope, window)


def open_episodes_prefix(scope: str) -> bytes:
    return _prefix(b"EO", scope)


def belief_deleted(scope: str, belief_id: str) -> bytes:
    return _key(b"BD", scope, belief_id)


def foreign_work(scope: str, event_id: str) -> bytes:
    return _key(b"FW", scope, event_id)


def foreign_work_prefix(scope: str) -> bytes:
    return _prefix(b"FW", scope)


def vector(scope: str, record_id: str) -> bytes:
    return _key(b"V", scope, record_id)


def vectors_prefix(scope: str) -> bytes:
    return _prefix(b"V", scope)


VECTOR_TABLE_PREFIX = b"V" + SEP


def concept(scope: str, concept_id: str) -> bytes:
    return _key(b"C", scope, concept_id)


def concepts_prefix(scope: str) -> bytes:
    return _prefix(b"C", scope)


def fact_support(scope: str, fact_id: str, event_id: str) -> bytes:
    return _key(b"FS", scope, fact_id, event_id)


def fact_supports_prefix(scope: str, fact_id: str) -> bytes:
    return _prefix(b"FS", scope, fact_id)


SCOPED_DERIVED_TABLES = (b"F", b"FI", b"FS", b"B", b"BI", b"BD", b"EP", b"EO", b"C", b"V")


def derived_prefixes(scope: str) -> list[bytes]:
    """Every per-scope derived table, for ``rebuild``."""
    return [_prefix(table, scope) for table in SCOPED_DERIVED_TABLES]


# tenant-wide --------------------------------------------------------------------------------
def entity(tenant: str, entity_id: str) -> bytes:
    return _key(b"N", tenant, entity_id)


def entity_alias(tenant: str, alias: str) -> bytes:
    return _key(b"NA", tenant, alias)


def idempotency(tenant: str, caller: str, family: str, key: str) -> bytes:
    return _key(b"I", tenant, caller, family, key)


IDEMPOTENCY_PREFIX = b"I" + SEP


def temporal_phrase(tenant: str, name: str) -> bytes:
    return _key(b"TP", tenant, name)


def temporal_phrases_prefix(tenant: str) -> bytes:
    return _prefix(b"TP", tenant)


# node ---------------------------------------------------------------------------------------
def lifecycle(lce_id: str) -> bytes:
    return _key(b"L", lce_id)


LIFECYCLE_PREFIX = b"L" + SEP


def scope_record(scope: str) -> bytes:
    return _key(b"S", scope)


SCOPE_PREFIX = b"S" + SEP


def batch(batch_id: str) -> bytes:
    return _key(b"BT", batch_id)


def meta(name: str) -> bytes:
    return _key(b"M", name)


# server -------------------------------------------------------------------------------------
def policy_doc(tier: str, target: str) -> bytes:
    return _key(b"PO", tier, target)


POLICY_PREFIX = b"PO" + SEP


def revoked(jti: str) -> bytes:
    return _key(b"RV", jti)


REVOKED_PREFIX = b"RV" + SEP


def audit_row(audit_id: str) -> bytes:
    return _key(b"AU", audit_id)


AUDIT_PREFIX = b"AU" + SEP


def pepper(tenant: str, version: int) -> bytes:
    return _key(b"PP", tenant, f"{version:08d}")


def peppers_prefix(tenant: str) -> bytes:
    return _prefix(b"PP", tenant)
