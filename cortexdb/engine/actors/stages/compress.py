"""The episode step (``Stage.EPISODE_JOINED``) and ``compressed``: each event joins the scope's
open episode window; a window closes (time gap, session change, size) and is sealed, which is
what the ``compressed`` lifecycle record announces.  An idle window seals after
``episode_gap_seconds``; a cancelled event leaves its episode (``leave_episode``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...derive import episodes as episode_rules
from ...model import CausalLink, Episode, Event, EventState
from ...model.text import content_text, episode_text
from ...stages import EPISODE_SEALED, Stage
from ...temporal import format_ts, parse_rfc3339
from ..state import EPISODE_WINDOW
from . import suppress
from .common import StageBatch, StageContext
from .versioning import close_episode, episode_snapshot


def clip(text: str, max_chars: int) -> str:
    """``text``, or its first ``max_chars`` characters cut at a word and marked: what an episode
    keeps of a long event (its opening, closing and title need the beginning, not the book)."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    cut = head.rfind(" ")
    return (head[:cut] if cut > max_chars // 2 else head).rstrip() + " …"


async def run(work: StageContext, events: list[Event], states: dict[str, EventState],
              started: float, batch: StageBatch) -> None:  # fmt: skip
    opened = await work.state.load_episode()
    dirty: dict[str, Episode] = {}
    now = batch.stamp(work.ctx.clock)
    snapshot = episode_snapshot(opened, now)  # the version the open window is, before it grows
    for event in events:
        state = states[event.id]
        if await suppress.episode_suppressed(work, event.id):  # its episode was forgotten
            state.set_stage_derives(Stage.EPISODE_JOINED.value, [])
            work.finish_stage(batch, event, state, Stage.EPISODE_JOINED, started, None)
            batch.ops.append(work.tables.pending.delete_op(event.id))
            continue
        text = clip(content_text(event.content), work.config.passage_max_chars)
        episode = await window(work, batch, event, text, now, dirty)
        join(episode, event, state, text)
        dirty[episode.id] = episode
        state.episode_id = episode.id
        state.set_stage_derives(Stage.EPISODE_JOINED.value, [episode.id])
        if episode.id not in state.derives:
            state.derives.append(episode.id)
        work.finish_stage(batch, event, state, Stage.EPISODE_JOINED, started, None)
        batch.ops.append(work.tables.pending.delete_op(event.id))
    work.state.last_activity = now
    if opened is not None and opened.id in dirty:
        close_episode(work, batch, opened, snapshot, now)
    for episode in dirty.values():  # an open one as a header and its new members' rows
        write = work.tables.episodes.whole_ops if episode.status == EPISODE_SEALED else work.tables.episodes.open_ops
        batch.ops += await write(episode)
    await work.index.index_documents(batch.ops, {e.id: episode_text(e) for e in dirty.values()})
    work.state_ops(batch, events, states)
    await work.commit(batch)


async def closes(work: StageContext, segmentation: Any, episode: Episode, event: Event) -> bool:
    """Whether ``event`` closes the open window ``episode`` (its scope's segment strategy)."""
    last = None
    if segmentation.strategy in ("thread", "turn_pair") and episode.events:
        last = await work.state.event(episode.events[-1])
    return episode_rules.closes_window(
        strategy=segmentation.strategy, gap=segmentation.gap, max_events=segmentation.max_events,
        episode_events=len(episode.events), episode_started_at=episode.started_at,
        episode_ended_at=episode.ended_at, episode_session=episode.session,
        observed_at=parse_rfc3339(event.context["observed_at"]), session=event.observed_actor.get("session"),
        last_role=(last.content.get("role") if last is not None else None), role=event.content.get("role"),
        last_thread=(last.context.get("thread") if last is not None else None), thread=event.context.get("thread"),
    )  # fmt: skip


async def window(work: StageContext, batch: StageBatch, event: Event, text: str,
                  now: dt.datetime, dirty: dict[str, Episode]) -> Episode:  # fmt: skip
    """The episode the event joins: the open window, or a new one when there is none or the
    event closes it (the closed window is sealed)."""
    segmentation = await work.state.segments(work.ctx, work.scope)
    observed = parse_rfc3339(event.context["observed_at"])
    session = event.observed_actor.get("session")
    episode = work.state.episode
    if episode is not None and await closes(work, segmentation, episode, event):
        seal(work, batch, episode, now)
        dirty[episode.id] = episode
        predecessor = episode.id
        episode = None
    else:
        predecessor = episode.causal_predecessor if episode else None
    if episode is None:
        episode = Episode(
            id=work.ctx.ids.new("ep"), scope=work.scope,
            name=episode_rules.title(text, event.context.get("intent"), f"{event.modality} episode"),
            summary="", events=[], supports=[], started_at=observed, ended_at=observed,
            valid_from=observed, recorded_from=now, strategy=segmentation.strategy,
            session=session, causal_predecessor=predecessor or work.state.last_sealed,
            opening=text or None, partial=True, partial_reason="episode_open",
        )  # fmt: skip
        batch.ops.append(work.tables.open_episodes.put_op(EPISODE_WINDOW, episode.id))
    work.state.episode = episode
    return episode


def join(episode: Episode, event: Event, state: EventState, text: str) -> None:
    observed = parse_rfc3339(event.context["observed_at"])
    episode.events.append(event.id)
    episode.supports.append(event.id)
    episode.started_at = min(episode.started_at, observed)
    episode.valid_from = episode.started_at
    episode.ended_at = max(episode.ended_at, observed)
    if event.actor not in episode.actors_involved:
        episode.actors_involved.append(event.actor)
    if any(d.startswith("fact_") for d in state.derives):
        episode.informative_events += 1
    if text:
        episode.closing = text
    role = episode_rules.role_of(text, len(episode.events) - 1, len(episode.events), sealed=False)
    episode.causal_chain.append(CausalLink(event=event.id, role=role))
    describe(episode)


def describe(episode: Episode) -> None:
    count = len(episode.events)
    episode.centrality_score = round(episode.informative_events / count, 4) if count else 0.0
    episode.summary = episode_rules.summary(
        count, episode.opening, episode.closing, episode.actors_involved,
        format_ts(episode.started_at), format_ts(episode.ended_at),
    )  # fmt: skip


def seal(work: StageContext, batch: StageBatch, episode: Episode, now: dt.datetime) -> None:
    episode.status = EPISODE_SEALED
    episode.sealed_at = now
    episode.partial, episode.partial_reason = False, None
    if len(episode.causal_chain) > 1:
        episode.causal_chain[-1].role = "outcome"
    describe(episode)
    batch.ops.append(work.tables.open_episodes.delete_op(EPISODE_WINDOW))
    record = work.ctx.bus.reserve(
        Stage.COMPRESSED, scope=work.scope, event_id=episode.events[-1],
        payload={"episode_id": episode.id, "understanding_ids": [], "event_count": len(episode.events)},
    )  # fmt: skip
    batch.records.append(record)
    work.state.last_sealed = episode.id
    if work.state.episode is episode:
        work.state.episode = None


async def seal_open_episode(work: StageContext) -> str | None:
    episode = await work.state.load_episode()
    if episode is None:
        return None
    batch = StageBatch()
    now = batch.stamp(work.ctx.clock)
    snapshot = episode_snapshot(episode, now)
    seal(work, batch, episode, now)
    close_episode(work, batch, episode, snapshot, now)
    batch.ops += await work.tables.episodes.whole_ops(episode)
    await work.commit(batch)
    return episode.id


async def seal_if_idle(work: StageContext) -> None:
    state = work.state
    if state.episode is None or state.last_activity is None:
        return
    now = work.ctx.clock.now()
    segmentation = await state.segments(work.ctx, work.scope)
    if episode_rules.idle_seals(segmentation, state.episode.started_at, now - state.last_activity, now):
        await seal_open_episode(work)


async def leave_episode(work: StageContext, batch: StageBatch, state: EventState,
                        event_id: str) -> None:  # fmt: skip
    """Take a cancelled event out of its episode and describe the episode again from the
    events that remain; an episode left without events is excluded from recall."""
    episode_id = state.episode_id
    if not episode_id:
        return
    episode = await work.state.load_episode()
    if episode is None or episode.id != episode_id:
        episode = await work.tables.episodes.get(episode_id)
        if episode is None:
            return
    if event_id not in episode.events:
        return
    now = batch.stamp(work.ctx.clock)
    snapshot = episode_snapshot(episode, now, whole=True)  # not an append: kept whole
    episode.events = [e for e in episode.events if e != event_id]
    episode.supports = [e for e in episode.supports if e != event_id]
    members, informative = await episode_members(work, episode)
    if not members:
        _empty(work, batch, episode)
    else:
        redescribe(work, episode, members, informative)
        await work.index.index_documents(batch.ops, {episode.id: episode_text(episode)})
    close_episode(work, batch, episode, snapshot, now)
    batch.ops += await work.tables.episodes.whole_ops(episode)


async def episode_members(work: StageContext, episode: Episode) -> tuple[list[Event], int]:
    members: list[Event] = []
    informative = 0
    for member_id in episode.events:
        event = await work.state.event(member_id)
        if event is None:
            continue
        members.append(event)
        member_state = await work.read_state(member_id)
        member_derives = member_state.derives if member_state is not None else ()
        informative += any(d.startswith("fact_") for d in member_derives)
    return members, informative


def _empty(work: StageContext, batch: StageBatch, episode: Episode) -> None:
    episode.excluded_from_recall = True
    episode.opening = episode.closing = None
    episode.actors_involved, episode.causal_chain = [], []
    episode.informative_events = 0
    episode.summary = ""
    if work.state.episode is episode:  # the next event opens a new episode
        work.state.episode = None
        episode.status, episode.sealed_at = EPISODE_SEALED, batch.stamp(work.ctx.clock)
        episode.partial, episode.partial_reason = False, None
        batch.ops.append(work.tables.open_episodes.delete_op(EPISODE_WINDOW))
    work.index.unindex(batch.ops, episode.id)


def redescribe(work: StageContext, episode: Episode, members: list[Event], informative: int) -> None:
    max_chars = work.config.passage_max_chars
    texts = [clip(content_text(e.content), max_chars) for e in members]
    first = members[0]
    episode.name = episode_rules.title(texts[0], first.context.get("intent"), f"{first.modality} episode")
    observed = [parse_rfc3339(e.context["observed_at"]) for e in members]
    episode.started_at = episode.valid_from = min(observed)
    episode.ended_at = max(observed)
    episode.actors_involved = list(dict.fromkeys(e.actor for e in members))
    episode.informative_events = informative
    episode.opening = texts[0] or None
    episode.closing = next((t for t in reversed(texts) if t), None)
    count = len(members)
    roles = [episode_rules.role_of(text, i, count, sealed=False) for i, text in enumerate(texts)]
    episode.causal_chain = [CausalLink(event=e.id, role=role) for e, role in zip(members, roles, strict=True)]
    if episode.status == EPISODE_SEALED and count > 1:
        episode.causal_chain[-1].role = "outcome"
    describe(episode)
