"""The key format: how records map to storage keys.  Only ``engine/storage`` imports it.

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
| FO    | scope, object entity id, predicate, fact_id | empty — relationships by their target |
| FS    | scope, fact_id, evt_id                      | empty — every event supporting a fact |
| B     | scope, belief_id                            | Belief                               |
| BI    | scope, claim key                            | belief_id                            |
| BS    | belief_id                                   | scope — where a belief lives (``beliefs/why`` by id) |
| FV    | scope, fact_id, closed at (``version_stamp``) | Fact: a closed version (docs/time.md) |
| BV    | scope, belief_id, closed at                 | Belief: a closed version             |
| EV    | scope, ep_id, closed at                     | JSON: a closed episode version (compact, see ``derive/versions``) |
| EP    | scope, ep_id                                | Episode (an open one: a header, ``storage/episodes``) |
| EK    | scope, ep_id, position (10 digits)          | JSON [evt_id, role]: an open episode's member |
| EO    | scope, window key                           | ep_id of the open episode            |
| BD    | scope, belief_id                            | deletion note (410 on direct lookup) |
| FW    | scope, evt_id                               | foreign consolidation work item      |
| V     | scope, record id                            | float32 embedding of the record text |
| GV    | scope, evt_id                               | float32: the vector the writer gave (primary: rebuild and re-embed keep it) |
| C     | scope, concept_id                           | Concept (its current version)        |
| CV    | scope, concept_id, closed at                | Concept: a closed version            |
| CS    | scope, subject entity id                    | concept_id — a subject's concept     |
| VO    | tenant, vocabulary name                     | JSON vocabulary (§8.14)              |
| N     | tenant, ent_id                              | Entity                               |
| NA    | tenant, normalised alias                    | ent_id                               |
| NM    | tenant, ent_id, evt_id                      | scope — an event mentioning an entity |
| NE    | evt_id, ent_id                              | tenant — the entities an event mentions |
| I     | tenant, caller, endpoint family, key        | idempotency record                   |
| TP    | tenant, phrase name                         | custom temporal phrase               |
| L     | lce_id                                      | LifecycleEvent                       |
| S     | scope                                       | Scope                                |
| BT    | batch_id                                    | bulk batch record (none written yet) |
| M     | name                                        | node metadata (e.g. the embedder)    |
| PO    | tier, target                                | policy document (server: four tiers) |
| RV    | jti                                         | revoked token (expires with the token) |
| AU    | audit_id                                    | audit row (server, §14)              |
| PP    | tenant, version (8 digits)                  | audit pepper                         |
| J     | job_id                                      | job record (``engine/jobs.py``)      |
| EM    | "h", manifest_id / "c", manifest_id, section, part | erasure manifest head / chunk  |
| FG    | scope, kind, parts (see ``Partition``)      | forget suppression: what re-derivation skips |
| FD    | scope, record id                            | forgotten-record note (410 on lookup) |
| BL    | blob_id                                     | blob metadata (``engine/blobs.py``)  |
| BR    | blob_id, evt_id                             | scope — an event referring to a blob |
| BE    | evt_id, blob_id                             | empty — the blobs an event refers to |
| BH    | sha256, blob_id                             | empty — the blob ids of a content    |
| SG    | scope, sig_id                               | JSON: a signal (``engine/signals.py``) |
| SGT   | tenant, signal type                         | JSON: a tenant's signal type settings |
| PR    | scope, prp_id                               | JSON: a memory write proposal (``engine/proposals.py``) |
| IQ    | scope, intk_id                              | JSON: an intake result awaiting acknowledgement (derived) |
| IA    | scope, evt_id, entry fingerprint            | JSON: an acknowledgement (``engine/intake.py``; rebuild keeps it) |
| PH    | scope, evt_id, assertion digest             | prp_id — the derivation proposal that held it (rebuild keeps it) |

A table of the storage layer (``table.Table``) is a prefix — the table name and, for a per-scope
table, the scope — and its rows' keys are that prefix followed by their remaining parts
(``within``).
"""

from __future__ import annotations

import datetime as dt

SEP = b"\x00"

EVENTS, WAL, EVENT_STATES, PENDING = b"E", b"W", b"X", b"P"
FACTS, FACT_INDEX, FACT_SUPPORTS = b"F", b"FI", b"FS"
FACT_OBJECTS = b"FO"  # facts whose object is an entity, by that entity (relationships, incoming)
BELIEFS, BELIEF_CLAIMS, BELIEF_DELETIONS, BELIEF_HOMES = b"B", b"BI", b"BD", b"BS"
FACT_VERSIONS, BELIEF_VERSIONS, EPISODE_VERSIONS = b"FV", b"BV", b"EV"  # closed versions
EPISODES, OPEN_EPISODES, FOREIGN_WORK, VECTORS, CONCEPTS = b"EP", b"EO", b"FW", b"V", b"C"
EPISODE_MEMBERS = b"EK"  # an open episode's members, a row each (``storage/episodes``)
CONCEPT_VERSIONS, CONCEPT_SUBJECTS, VOCABULARIES = b"CV", b"CS", b"VO"
ENTITIES, ENTITY_ALIASES, IDEMPOTENCY, TEMPORAL_PHRASES = b"N", b"NA", b"I", b"TP"
ENTITY_MENTIONS, EVENT_ENTITIES = b"NM", b"NE"
LIFECYCLE, SCOPES, BATCHES, META = b"L", b"S", b"BT", b"M"
POLICY_DOCS, REVOKED, AUDIT_ROWS, PEPPERS = b"PO", b"RV", b"AU", b"PP"
JOBS, ERASURE_MANIFESTS = b"J", b"EM"
SUPPRESSIONS, FORGOTTEN = b"FG", b"FD"  # forget: never emptied by rebuild
BLOBS, BLOB_REFERENCES, EVENT_BLOBS, BLOB_CONTENTS = b"BL", b"BR", b"BE", b"BH"
SIGNALS, SIGNAL_TYPES, PROPOSALS = b"SG", b"SGT", b"PR"  # primary records: rebuild keeps them
INTAKE_QUEUE = b"IQ"  # derived from the events' intake reports
INTAKE_ACKS = b"IA"  # acknowledgements of intake results: primary (rebuild keeps them)
HELD_FACTS = b"PH"  # derivation proposals by event and assertion: primary (rebuild keeps them)
GIVEN_VECTORS = b"GV"  # the vectors writers gave with their events: primary, rebuild keeps them

#: the per-scope tables of derived records (``rebuild`` empties them)
SCOPED_DERIVED_TABLES = (
    FACTS, FACT_INDEX, FACT_SUPPORTS, BELIEFS, BELIEF_CLAIMS, BELIEF_DELETIONS, EPISODES,
    OPEN_EPISODES, CONCEPTS, VECTORS, FACT_VERSIONS, BELIEF_VERSIONS, EPISODE_VERSIONS,
    CONCEPT_VERSIONS, CONCEPT_SUBJECTS, FACT_OBJECTS, INTAKE_QUEUE, EPISODE_MEMBERS,
)  # fmt: skip
#: the per-scope tables a forget compacts whole (``NodeTables.forget_ranges``)
FORGET_SCOPED = (*SCOPED_DERIVED_TABLES, PENDING, FOREIGN_WORK, SUPPRESSIONS, FORGOTTEN, SIGNALS, PROPOSALS,
                 INTAKE_ACKS, HELD_FACTS, GIVEN_VECTORS)  # fmt: skip
#: the node tables a forget of events compacts whole (one range: no other table sorts between
#: them): entities go with their last mention
FORGET_ENTITY_TABLES = (ENTITIES, ENTITY_ALIASES, ENTITY_MENTIONS, EVENT_ENTITIES)


def prefix(table: bytes, *parts: str) -> bytes:
    """The prefix of every key of ``table`` whose first parts are ``parts``."""
    return table + SEP + "".join(part + "\x00" for part in parts).encode()


def within(table_prefix: bytes, *parts: str) -> bytes:
    """The key of a row under ``table_prefix`` (a ``prefix``) with the remaining ``parts``."""
    return table_prefix + "\x00".join(parts).encode()


def last_part(key: bytes) -> str:
    return key.rsplit(SEP, 1)[1].decode()


def first_part(key: bytes) -> str:
    """The first part after the table name (the scope of a per-scope table's key)."""
    return key.split(SEP, 2)[1].decode()


# the node WAL: keys are offsets, not text -------------------------------------------------------
WAL_PREFIX = WAL + SEP


def wal(offset: int) -> bytes:
    return WAL_PREFIX + offset.to_bytes(8, "big")


def wal_offset_of(key: bytes) -> int:
    return int.from_bytes(key[len(WAL_PREFIX) :], "big")


def wal_value(scope: str, event_id: str) -> bytes:
    return scope.encode() + SEP + event_id.encode()


def parse_wal_value(value: bytes) -> tuple[str, str]:
    scope, event_id = value.split(SEP)
    return scope.decode(), event_id.decode()


# closed versions: the moment a version was closed, as a part that sorts in time order ----------
def version_stamp(moment: dt.datetime) -> str:
    """``20260513T154209.123456Z``: fixed width (RFC 3339 text drops a zero fraction, so it
    does not sort), UTC."""
    moment = moment.astimezone(dt.UTC)
    return f"{moment.year:04d}{moment.month:02d}{moment.day:02d}T{moment:%H%M%S.%f}Z"


def stamp_moment(stamp: str) -> dt.datetime:
    """``version_stamp``'s inverse: the UTC moment a stamp names."""
    return dt.datetime.strptime(stamp, "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=dt.UTC)


# audit peppers: the version is a part of 8 digits, so versions sort numerically -----------------
def pepper_version(version: int) -> str:
    return f"{version:08d}"
