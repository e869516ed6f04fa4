"""A scope partition's tables: what one ``ScopeActor`` owns (``keys`` documents each table).

Every table below is the scope's slice of its key table (``<table> NUL <scope> NUL …``), except
``event_states``: event states are keyed by event id alone (``Engine.home_scope`` finds an
event's scope from it), shared with ``NodeTables``; the partition's actor is their only writer.

| attribute          | table | row key                         | value                       |
|--------------------|-------|---------------------------------|-----------------------------|
| ``events``         | E     | evt_id                          | ``Event``                   |
| ``event_states``   | X     | evt_id (node-wide)              | ``EventState``              |
| ``pending``        | P     | evt_id                          | marker: pipeline unfinished |
| ``facts``          | F     | fact_id                         | ``Fact``                    |
| ``fact_index``     | FI    | (subject_id, predicate, fact_id)| marker                      |
| ``fact_objects``   | FO    | (object entity id, predicate, fact_id) | marker: relationships by target |
| ``fact_supports``  | FS    | (fact_id, evt_id)               | marker                      |
| ``beliefs``        | B     | belief_id                       | ``Belief``                  |
| ``belief_claims``  | BI    | claim key                       | belief_id                   |
| ``belief_deletions`` | BD  | belief_id                       | JSON deletion note          |
| ``episodes``       | EP    | ep_id                           | ``Episode``                 |
| ``open_episodes``  | EO    | window key                      | ep_id                       |
| ``episodes.members`` | EK  | (ep_id, position)               | JSON [evt_id, role]: an open episode's member |
| ``foreign_work``   | FW    | evt_id (of the source scope)    | JSON work item              |
| ``vectors``        | V     | record id (or passage id)       | float32 embedding           |
| ``given_vectors``  | GV    | evt_id                          | float32: the writer's vector (primary) |
| ``concepts``       | C     | concept_id                      | ``Concept``                 |
| ``concept_versions`` | CV  | (concept_id, closed at)         | JSON: a closed version, compact (``derive.concept_delta``) |
| ``concept_subjects`` | CS  | subject entity id               | concept_id                  |
| ``fact_versions``  | FV    | (fact_id, closed at)            | ``Fact``: a closed version  |
| ``belief_versions``| BV    | (belief_id, closed at)          | ``Belief``: a closed version |
| ``episode_versions`` | EV  | (ep_id, closed at)              | JSON: a closed version (``derive.versions``) |
| ``suppressions``   | FG    | ("fact", evt_id, key) / ("claim", key) / ("episode", evt_id) | JSON: what a forget suppressed |
| ``forgotten``      | FD    | record id                       | JSON note: 410 on lookup    |
| ``signals``        | SG    | sig_id                          | JSON: a signal (primary: rebuild keeps it) |
| ``proposals``      | PR    | prp_id                          | JSON: a memory write proposal |
| ``intake_queue``   | IQ    | intk_id                         | JSON: an intake result to acknowledge (derived) |
| ``intake_acks``    | IA    | (evt_id, fingerprint)           | JSON: an acknowledged result (primary) |
| ``held_facts``     | PH    | (evt_id, assertion digest)      | prp_id: a derived fact held for review (primary) |
"""

from __future__ import annotations

from typing import Any

from .. import jsoncodec
from ..model import Belief, Concept, Event, EventState, Fact
from ..spi.kv import KVStore, Op, Put
from . import keys
from .concept_versions import ConceptVersions
from .episodes import EpisodeTable
from .table import JSON, MARK, TEXT, VECTOR, Records, Table
from .versions import Versions


class Partition:
    def __init__(self, store: KVStore, scope: str, event_states: Table[EventState]) -> None:
        self.scope = scope

        def table(name: bytes, codec: Any) -> Table[Any]:
            return Table(store, keys.prefix(name, scope), codec)

        self.events: Table[Event] = table(keys.EVENTS, Records(Event))
        self.event_states = event_states
        self.pending: Table[bool] = table(keys.PENDING, MARK)
        self.facts: Table[Fact] = table(keys.FACTS, Records(Fact))
        self.fact_index: Table[bool] = table(keys.FACT_INDEX, MARK)
        self.fact_objects: Table[bool] = table(keys.FACT_OBJECTS, MARK)
        self.fact_supports: Table[bool] = table(keys.FACT_SUPPORTS, MARK)
        self.beliefs: Table[Belief] = table(keys.BELIEFS, Records(Belief))
        self.belief_claims: Table[str] = table(keys.BELIEF_CLAIMS, TEXT)
        self.belief_deletions = table(keys.BELIEF_DELETIONS, JSON)
        self.episodes = EpisodeTable(store, scope)  # whole episodes, whatever their rows' form
        self.open_episodes: Table[str] = table(keys.OPEN_EPISODES, TEXT)
        self.foreign_work = table(keys.FOREIGN_WORK, JSON)
        self.vectors = table(keys.VECTORS, VECTOR)
        self.given_vectors = table(keys.GIVEN_VECTORS, VECTOR)
        self.concepts: Table[Concept] = table(keys.CONCEPTS, Records(Concept))
        # compact rows read forward to the next whole version (``concept_versions``)
        self.concept_versions = ConceptVersions(store, keys.prefix(keys.CONCEPT_VERSIONS, scope), self.concepts)
        self.concept_subjects: Table[str] = table(keys.CONCEPT_SUBJECTS, TEXT)
        self.fact_versions: Versions[Fact] = Versions(store, keys.prefix(keys.FACT_VERSIONS, scope), Records(Fact))
        self.belief_versions: Versions[Belief] = Versions(store, keys.prefix(keys.BELIEF_VERSIONS, scope),
                                                          Records(Belief))  # fmt: skip
        self.episode_versions: Versions[Any] = Versions(store, keys.prefix(keys.EPISODE_VERSIONS, scope), JSON)
        self.suppressions = table(keys.SUPPRESSIONS, JSON)
        self.forgotten = table(keys.FORGOTTEN, JSON)
        self.signals = table(keys.SIGNALS, JSON)
        self.proposals = table(keys.PROPOSALS, JSON)
        self.intake_queue = table(keys.INTAKE_QUEUE, JSON)
        self.intake_acks = table(keys.INTAKE_ACKS, JSON)
        self.held_facts: Table[str] = table(keys.HELD_FACTS, TEXT)
        self._store = store

    def derived(self) -> list[Table[Any]]:
        """Every table of derived records (``keys.SCOPED_DERIVED_TABLES``): what rebuild empties."""
        return [Table(self._store, keys.prefix(name, self.scope), MARK)
                for name in keys.SCOPED_DERIVED_TABLES]  # fmt: skip

    async def rewrite_history(self, ops: list[Op]) -> tuple[list[Op], dict[str, str]]:
        """A forget rewrites the history of what it touches (docs/time.md): for every fact,
        belief, episode or concept ``ops`` write or delete, every closed version goes, and a written one
        becomes the record's only version, recorded from when its first one was (its ``version``
        back to 1).  Returns the operations to write instead, and the records rewritten with that
        first ``recorded_from`` (for the lane's caches)."""
        layers = [(self.facts, self.fact_versions), (self.beliefs, self.belief_versions),
                  (self.episodes, self.episode_versions), (self.concepts, self.concept_versions)]  # fmt: skip
        out: list[Op] = []
        firsts: dict[str, str] = {}
        for op in ops:
            for heads, versions in layers:
                if not op.key.startswith(heads.prefix):
                    continue
                record_id = op.key[len(heads.prefix) :].decode()
                if record_id not in firsts:
                    oldest = await versions.first_recorded(record_id)
                    if oldest is None:
                        break
                    firsts[record_id] = oldest["recorded_from"]
                    out += await versions.delete_ops(record_id)
                if isinstance(op, Put):
                    value = jsoncodec.decode(op.value)
                    value["recorded_from"] = firsts[record_id]
                    value.pop("version", None)
                    value.pop("previous_version", None)  # a concept's: no earlier version is left
                    op = Put(op.key, jsoncodec.encode(value))
                break
            out.append(op)
        return out, firsts

    async def write(self, ops, *, sync: bool = False) -> None:
        """Apply operations of any tables of the store in one atomic write."""
        await self._store.write(ops, sync=sync)
