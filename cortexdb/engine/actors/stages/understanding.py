"""Understanding in the derivation lane: concept synthesis (``derive.concepts``) at the end of the
consolidation stage, and the re-synthesis and scoring of the ``synthesize`` job.

The consolidation stage re-synthesizes the concepts of the subjects its events' facts touched
(``state.touched``), inside the stage's own batch: a write that waited for ``consolidated`` reads
its concepts.  Each subject entity has one concept (table ``CS`` names it; the id is assigned the
first time the subject is seen, as a concept's own or as the target of an edge: the entity's own
uuid, ``synth.concept_id_of``).  A subject with a
current ``same_as`` fact to another entity shares one concept with it: the older concept is
canonical and the other becomes its deprecated alias (``canonical_id``).

Every change to what a concept says closes its current version into ``CV`` (``recorded_to``),
compact against the version the batch writes last (``Synthesis.close``), and writes the next; ``score`` recomputes coverage, staleness and support loss for a whole scope
without re-synthesizing (the job's scoring phase).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from ...derive import concepts as synth
from ...model import Belief, Concept, Fact
from ...model.text import concept_text
from ..subject_beliefs import live
from .common import StageBatch, StageContext


def settings(config: Any) -> synth.Settings:
    return synth.Settings(min_support=config.understanding_min_support,
                          max_inputs=config.understanding_max_inputs,
                          invalidation_threshold=config.understanding_invalidation_threshold)  # fmt: skip


class Synthesis:
    """One batch's synthesis: concept ids allocated and concepts written in it."""

    def __init__(self, work: StageContext, batch: StageBatch, relations: dict[str, tuple[str, str]]) -> None:
        self.work, self.batch, self.relations = work, batch, relations
        self.ids: dict[str, str] = {}  # subject id -> concept id (allocated or read)
        self.written: dict[str, Concept] = {}  # concept id -> the version this batch wrote
        self.bases: dict[str, Concept | None] = {}  # concept id -> its stored version (before the batch)
        self.changed: set[str] = set()  # concepts this batch gives a new version
        self.done: set[str] = set()  # subjects synthesized (with their coalesced peers)
        self.force = False  # every concept a new version, changed or not (``synthesize`` job)
        self.derived: dict[str, list[str]] = {}  # a concept split out -> the concept it came from
        self.split_out: list[str] = []  # subjects a split left without their group
        self.closing: list[Concept] = []  # the stored versions this batch closes (``close``)
        self.now = batch.stamp(work.ctx.clock)

    async def concept_id(self, subject_id: str, *, allocate: bool = True) -> str | None:
        if subject_id not in self.ids:
            found = await self.work.tables.concept_subjects.get(subject_id)
            if found is None:
                if not allocate:
                    return None
                found = synth.concept_id_of(subject_id) or self.work.ctx.ids.new("concept")
                self.batch.ops.append(self.work.tables.concept_subjects.put_op(subject_id, found))
            self.ids[subject_id] = found
        return self.ids[subject_id]

    async def current(self, concept_id: str) -> Concept | None:
        if concept_id in self.written:
            return self.written[concept_id]
        return await self.work.tables.concepts.get(concept_id)

    async def facts(self, subject_id: str) -> list[Fact]:
        """The subject's current facts: the lane's pair lists (``state.subject_facts``), so a
        subject whose superseded facts pile up costs what it holds now, not all it ever held."""
        return await self.work.state.subject_facts(subject_id)

    async def beliefs(self, subject_id: str) -> list[synth.BeliefDigest]:
        """The digests of the subject's live beliefs (``state.subject_summary``, kept current at
        each belief write: a batch does not read every belief of the subjects it touches)."""
        return list((await self.work.state.subject_summary(subject_id)).live.values())

    async def records(self, subject_id: str) -> list[Belief]:
        """The subject's live beliefs as records, in ``state.beliefs_of``'s order: what the two
        rare cases that depend on that order read (``name``, ``belief_targets``)."""
        return [b for b in await self.work.state.beliefs_of(subject_id) if live(b)]

    async def name(self, subject_id: str, facts: list[Fact], beliefs: list[synth.BeliefDigest]) -> str:
        """The subject's name: the first of its facts that names it, else the first of its own
        live beliefs (in ``beliefs_of``'s order) that does, else its id."""
        name = _name(subject_id, facts, [])
        if name == subject_id and beliefs:
            name = _name(subject_id, [], await self.records(subject_id))
        return name

    async def belief_targets(self, group: list[str], beliefs: list[synth.BeliefDigest]) -> list[str]:
        """The entities the group's live beliefs name as objects.  A concept id drawn for an
        entity that is not an ``ent_`` id (``concept_id``) depends on the order they come in:
        then the records are read, in the order their subjects' ``beliefs_of`` gives."""
        targets = [b.target for b in beliefs if b.target]
        if all(synth.concept_id_of(t) for t in targets):
            return targets
        out = []
        for subject_id in group:
            for belief in await self.records(subject_id):
                obj = belief.claim["object"]
                if obj.get("type") == "entity" and obj.get("id"):
                    out.append(obj["id"])
        return out

    def same_as(self, facts: list[Fact]) -> list[str]:
        """The entities ``facts`` say their subject is one with: for each, the latest current
        ``same_as`` fact decides (a negated one, ``not same_as``, ends the link)."""
        said: dict[str, int] = {}
        for fact in sorted(facts, key=lambda f: (f.valid_from, f.recorded_from, f.id)):
            if fact.predicate in synth.SAME_AS and fact.object.type == "entity" and fact.object.id:
                said[fact.object.id] = fact.polarity
        return sorted(entity for entity, polarity in said.items() if polarity > 0)

    async def peers(self, subject_id: str, facts: list[Fact], mine: Concept | None) -> list[str]:
        """The entities ``subject_id`` is one with now: those its current ``same_as`` facts name,
        and the members of its concept whose own current ``same_as`` facts name it (or a peer)."""
        found = {p for p in self.same_as(facts) if p != subject_id}
        for member in synth.subjects_of(mine) if mine is not None and mine.canonical_id is None else ():
            if member != subject_id and member not in found:
                if {subject_id, *found} & set(self.same_as(await self.facts(member))):
                    found.add(member)
        return sorted(found)

    async def subject(self, subject_id: str) -> None:
        """Re-synthesize the concept of one subject (and coalesce it with its ``same_as`` peers,
        or split it when one of them no longer is: ``split``)."""
        facts = await self.facts(subject_id)
        own = await self.concept_id(subject_id)
        mine = await self.current(own) if own else None
        peers = await self.peers(subject_id, facts, mine)
        if mine is not None and mine.canonical_id is not None and not peers:
            # an alias: its canonical concept holds its records; synthesizing the canonical
            # concept's owner keeps this subject in the group or splits it out
            canonical_concept = await self.current(mine.canonical_id)
            owners = [s for s in synth.subjects_of(canonical_concept) if s != subject_id and s not in self.done]
            if owners:
                await self.subject(owners[0])
            self.done.add(subject_id)
            return
        if mine is not None and mine.canonical_id is None:
            own = await self.split(subject_id, mine, peers) or own
        group = {subject_id: own}
        for peer in peers:
            group[peer] = await self.concept_id(peer)
        canonical = synth.canonical_of([c for c in group.values() if c])
        own = await self.beliefs(subject_id)
        beliefs = list(own)
        for peer in peers:
            facts += await self.facts(peer)
            beliefs += await self.beliefs(peer)
        name = await self.name(subject_id, facts, own)
        targets: dict[str, str] = {}
        entities = [f.object.id for f in facts if f.object.type == "entity" and f.object.id]
        for entity in entities + await self.belief_targets([subject_id, *peers], beliefs):
            if entity not in group:
                targets[entity] = await self.concept_id(entity)
        strongest = synth.strongest(beliefs, self.work.config.understanding_max_inputs)
        inputs = synth.Inputs(subject_id=subject_id, name=name, facts=tuple(facts), beliefs=tuple(strongest),
                              targets=targets, relations=self.relations,
                              members=tuple(p for p in group if p != subject_id),
                              belief_count=len(beliefs))  # fmt: skip
        self.done.update(group)
        await self.write(inputs, canonical)
        for concept_id in group.values():
            if concept_id != canonical:
                await self.alias(concept_id, canonical)
        for member in self.split_out:
            if member not in self.done:
                await self.subject(member)

    async def split(self, subject_id: str, mine: Concept, peers: list[str]) -> str | None:
        """Split a concept whose subjects are no longer all one (a ``same_as`` that made them one
        ended): every subject it gathered gets a new concept (``derived_from`` names the old one,
        the owner's first, so it is canonical of whatever group remains), and the old concept
        ends (``valid_to``, ``deprecated``).  The new id of ``subject_id``, or None (no split)."""
        members = synth.subjects_of(mine)
        gone = [m for m in members if m != subject_id and m not in peers]
        if not gone or mine.valid_to is not None:
            return None
        for member in [subject_id, *[m for m in members if m != subject_id]]:
            new_id = self.work.ctx.ids.new("concept")
            self.batch.ops.append(self.work.tables.concept_subjects.put_op(member, new_id))
            self.ids[member] = new_id
            self.derived[new_id] = [mine.id]
        self.split_out.extend(m for m in gone if m not in self.split_out)
        self.put(synth.retired(mine, self.now), mine, True)
        return self.ids[subject_id]

    async def write(self, inputs: synth.Inputs, concept_id: str) -> None:
        previous = await self.current(concept_id)
        concept, new = synth.synthesize(inputs, previous, concept_id=concept_id, scope=self.work.scope,
                                        now=self.now, settings=settings(self.work.config))  # fmt: skip
        if previous is None and concept_id in self.derived:
            concept = attrs.evolve(concept, derived_from=list(self.derived[concept_id]))
        self.put(concept, previous, new or (self.force and previous is not None and previous.canonical_id is None))

    async def alias(self, concept_id: str, canonical: str) -> None:
        previous = await self.current(concept_id)
        if previous is None or previous.canonical_id == canonical:
            return
        self.put(synth.merged_alias(previous, canonical, self.now), previous, True)

    def put(self, concept: Concept, previous: Concept | None, new: bool) -> None:
        """Write ``concept``: one commit is one version, however often the batch rewrites it.
        A batch that rewrites history (a cancel) changes the concept in place: no version is
        closed, and the commit leaves it one version (``Partition.rewrite_history``)."""
        tables, ops = self.work.tables, self.batch.ops
        base = self.bases.setdefault(concept.id, previous)
        if self.batch.rewriting:
            if base is not None:
                concept = attrs.evolve(concept, version=base.version, previous_version=base.previous_version,
                                       recorded_from=base.recorded_from)  # fmt: skip
            ops.append(tables.concepts.put_op(concept.id, concept))
            self.written[concept.id] = concept
            return
        if new and concept.id not in self.changed and base is not None:
            self.closing.append(base)  # its row is written against the batch's last version: ``close``
        if new:
            self.changed.add(concept.id)
        if concept.id in self.changed and base is not None:
            concept = attrs.evolve(concept, version=base.version + 1, previous_version=synth.version_ref(base))
        ops.append(tables.concepts.put_op(concept.id, concept))
        self.written[concept.id] = concept


    async def close(self) -> None:
        """Write the rows of the versions the batch closed (``CV``), each compact against the
        version that replaces it: the one the batch wrote last; keyed past the concept's last
        row whatever the clock did (``ConceptVersions.key_moment``)."""
        chain, versions = self.work.config.understanding_version_chain, self.work.tables.concept_versions
        for base in self.closing:
            key = await versions.key_moment(base.id, self.now)
            self.batch.ops.append(versions.put_op(base.id, key, synth.closed(base, self.now),
                                                  self.written[base.id], chain))  # fmt: skip
        self.closing = []


def _name(subject_id: str, facts: list[Fact], beliefs: list[Belief]) -> str:
    for fact in facts:
        if fact.subject.id == subject_id and fact.subject.name:
            return fact.subject.name
    for belief in beliefs:
        subject = belief.claim["subject"]
        if subject.get("id") == subject_id and subject.get("name"):
            return subject["name"]
    return subject_id


async def synthesize(work: StageContext, batch: Any, subject_ids: list[str],
                     tenant: str | None) -> dict[str, Concept]:  # fmt: skip
    """Re-synthesize the concepts of ``subject_ids`` in ``batch``; the concepts written, by id."""
    if not work.config.understanding_enabled or not subject_ids:
        return {}
    relations = await work.ctx.vocabularies.relations(tenant) if tenant is not None else {}
    synthesis = Synthesis(work, batch, relations)
    for subject_id in sorted(set(subject_ids)):
        if subject_id not in synthesis.done:
            await synthesis.subject(subject_id)
    await synthesis.close()
    return dict(synthesis.written)


async def tenant_of(work: StageContext, event_ids: list[str]) -> str | None:
    """The tenant of the scope (whose relation vocabularies label edges), as its events say."""
    for event_id in event_ids:
        event = await work.tables.events.get(event_id)
        if event is not None:
            return event.tenant_id
    async for _, event in work.tables.events.scan(limit=1):
        return event.tenant_id
    return None


async def refresh(work: StageContext, batch: Any, subject_ids: list[str], tenant: str | None) -> None:
    """Re-synthesize the concepts of ``subject_ids`` in ``batch`` and (un)index them: what a
    cancel withdrew leaves the concepts that cited it (``control.cancel``)."""
    written = await synthesize(work, batch, subject_ids, tenant)
    for concept in written.values():
        if concept.stance == "deprecated":
            work.index.unindex(batch.ops, concept.id)
    live = {c.id: concept_text(c) for c in written.values() if c.stance != "deprecated"}
    await work.index.index_documents(batch.ops, live)


async def subjects(work: StageContext) -> list[str]:
    """Every subject entity with facts in the scope, in id order."""
    out: list[str] = []
    async for parts, _ in work.tables.fact_index.items():
        if not out or out[-1] != parts[0]:
            out.append(parts[0])
    return out


async def score(work: StageContext, batch: StageBatch) -> dict[str, Any]:
    """Coverage, staleness and support loss of every concept of the scope (the scoring job):
    a concept whose scores change is refreshed in place; one whose support loss passes the
    invalidation threshold is deprecated (a new version)."""
    tables, now = work.tables, batch.stamp(work.ctx.clock)
    threshold = work.config.understanding_invalidation_threshold
    facts = {f.id: f async for _, f in tables.facts.scan()}
    beliefs = {b.id: b async for _, b in tables.beliefs.scan()}
    present = set(facts) | set(beliefs)
    counts = {"concepts": 0, "stale": 0, "deprecated": 0}
    async for _, concept in tables.concepts.scan():
        counts["concepts"] += 1
        cited = [facts[i] for i in concept.supported_by.get("facts", ()) if i in facts]
        cited += [beliefs[i] for i in concept.supported_by.get("beliefs", ()) if i in beliefs]
        times = [_changed(r) for r in cited]
        stale, reason = synth.staleness(concept, times)
        loss = synth.support_loss(concept, present)
        updated = concept.staleness_score != stale or concept.support_loss_fraction != loss
        if loss > threshold and concept.stance != "deprecated":
            closed = synth.closed(concept, now)
            concept = _deprecated(concept, loss, now)
            key = await tables.concept_versions.key_moment(concept.id, now)  # past its last row
            batch.ops.append(tables.concept_versions.put_op(concept.id, key, closed, concept,
                                                            work.config.understanding_version_chain))  # fmt: skip
            counts["deprecated"] += 1
        elif updated:
            concept.staleness_score, concept.staleness_reason, concept.support_loss_fraction = stale, reason, loss
        else:
            continue
        counts["stale"] += 1 if stale else 0
        batch.ops.append(tables.concepts.put_op(concept.id, concept))
    return counts


CHUNK_SUBJECTS = 64  # subjects re-synthesized per commit by the job


async def resynthesize(work: StageContext, tenant: str, topics: tuple[str, ...], force: bool) -> dict[str, Any]:
    """The ``synthesize`` job's work in one scope: re-synthesize the concepts of every subject
    (those whose concept names one of ``topics``, when given), then score every concept."""
    todo = await subjects(work)
    if topics:
        keys = {synth.term_key(t) for t in topics}
        wanted = []
        for subject_id in todo:
            concept_id = await work.tables.concept_subjects.get(subject_id)
            concept = await work.tables.concepts.get(concept_id) if concept_id else None
            names = [synth.term_key(t) for t in (concept.synthesis_inputs.get("filters", {}).get("topics", ())
                                                 if concept else ())]  # fmt: skip
            if concept is not None and (keys & set(names) or any(k in synth.term_key(concept.name) for k in keys)):
                wanted.append(subject_id)
        todo = wanted
    relations = await work.ctx.vocabularies.relations(tenant)
    written: set[str] = set()
    for start in range(0, len(todo), CHUNK_SUBJECTS):
        batch = StageBatch()
        synthesis = Synthesis(work, batch, relations)
        synthesis.force = force
        for subject_id in todo[start : start + CHUNK_SUBJECTS]:
            if subject_id not in synthesis.done:
                await synthesis.subject(subject_id)
        await synthesis.close()
        documents = {c.id: concept_text(c) for c in synthesis.written.values() if c.stance != "deprecated"}
        for concept in synthesis.written.values():
            if concept.stance == "deprecated":
                work.index.unindex(batch.ops, concept.id)
        await work.index.index_documents(batch.ops, documents)
        await work.commit(batch)
        written.update(c for c in synthesis.changed)
    batch = StageBatch()
    scores = await score(work, batch)
    await work.commit(batch)
    return {"subjects": len(todo), "concepts_versioned": len(written), **scores}


def _changed(record: Fact | Belief) -> dt.datetime:
    return record.recorded_from


def _deprecated(concept: Concept, loss: float, now: dt.datetime) -> Concept:
    return attrs.evolve(concept, stance="deprecated", support_loss_fraction=loss, version=concept.version + 1,
                        previous_version=synth.version_ref(concept), recorded_from=now,
                        staleness_reason="support_lost")  # fmt: skip
