"""Closing versions as derivation changes records (docs/time.md; what changes a version is
``derive.versions``'s table).

One commit is one moment (``StageBatch.stamp``).  Before a stage changes what a record says, it
keeps the version the record is — once per commit: a record already recorded at this moment is
changed in place — and the commit writes that version, closed at the moment, beside the record
(now ``version + 1``, recorded from the moment).  A forget (``Writes``) does not version what it
changes: it rewrites the history of the records it touches (``Partition.rewrite_history``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...derive.versions import belief_revised, compact_episode, full_episode, snapshot_fact
from ...model import Belief, Episode, Fact
from ...temporal import format_ts
from .common import StageContext


def close_fact(work: StageContext, fact: Fact, now: dt.datetime) -> None:
    """``fact`` is about to change what it says (at ``now``): keep the version it is."""
    if fact.recorded_from < now and fact.recorded_to is None:
        work.state.closing[fact.id] = snapshot_fact(fact)
        fact.recorded_from = now
        fact.version += 1


def fact_version_ops(work: StageContext, fact: Fact) -> list[Any]:
    """The row of the version of ``fact`` its change closed, if it closed one."""
    old = work.state.closing.pop(fact.id, None)
    if old is None:
        return []
    old.recorded_to = fact.recorded_from
    return [work.tables.fact_versions.put_op(fact.id, fact.recorded_from, old)]


def close_belief(work: StageContext, batch: Any, before: Belief | None, after: Belief,
                 now: dt.datetime) -> None:  # fmt: skip
    """A belief's revision (``before`` -> ``after``, a revised copy) closes ``before`` when it
    says something else and was recorded before this moment."""
    if before is None or batch.rewriting or before.recorded_from >= now:
        return
    if not belief_revised(before, after):
        return
    closed = before.copy()
    closed.recorded_to = now
    batch.ops.append(work.tables.belief_versions.put_op(before.id, now, closed))
    after.recorded_from, after.version = now, before.version + 1


def keep_deleted_belief(work: StageContext, batch: Any, belief: Belief, now: dt.datetime) -> None:
    """A belief deleted by revision (below the floor, no evidence left) was held until now: its
    last version stays readable as of earlier moments."""
    if batch.rewriting or belief.recorded_from >= now:
        return
    closed = belief.copy()
    closed.recorded_to = now
    batch.ops.append(work.tables.belief_versions.put_op(belief.id, now, closed))


def episode_snapshot(episode: Episode | None, now: dt.datetime, *, whole: bool = False) -> dict | None:
    """The version ``episode`` is, before a change at ``now`` (None when it was recorded at
    ``now``: it changes in place).  ``whole`` for a change that is not an append."""
    if episode is None or episode.recorded_from >= now:
        return None
    return full_episode(episode) if whole else compact_episode(episode)


def close_episode(work: StageContext, batch: Any, episode: Episode, snapshot: dict | None,
                  now: dt.datetime) -> None:  # fmt: skip
    """Write the version ``snapshot`` of ``episode`` closed at ``now``; the episode becomes the
    next version (call before its row is written)."""
    if snapshot is None or batch.rewriting:
        return
    snapshot["recorded_to"] = format_ts(now)
    batch.ops.append(work.tables.episode_versions.put_op(episode.id, now, snapshot))
    episode.recorded_from = now
    episode.version += 1
