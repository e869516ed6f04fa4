"""Re-segmenting a scope's episodes from its WAL (a scope's segment strategy changed).

Run in the scope's derivation lane, after every queued event is derived, at one moment ``now``:

1. **retire** every current episode: it was held until ``now`` (``recorded_to``), so reads as of
   an earlier moment still see the episodes as they were, and it leaves the recall indexes;
2. **window again** every event that had joined an episode (not cancelled, not suppressed by a
   forget), in WAL order, with the scope's segmentation as it is now: the same steps as live
   derivation (``compress``), the new episodes recorded from ``now``; the last window stays open.

Every event keeps its retired episode among its ``derives`` (a forget of the event still finds
and deletes it) and names its new one in ``episode_id``.  ``progress(done, total)`` is awaited
after every chunk.  Running it again (a resumed job) retires what the interrupted run made and
windows again: the outcome is the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ...model import Episode
from ...model.text import content_text, episode_text
from ...stages import Stage
from ..state import EPISODE_WINDOW
from . import compress, suppress
from .common import StageBatch, StageContext

CHUNK = 256  # events windowed per commit (and per progress tick)

Progress = Callable[[int, int], Awaitable[None]]


async def resegment(work: StageContext, progress: Progress) -> dict[str, Any]:
    """Retire the scope's episodes and window its events again: ``{retired, episodes, events,
    strategy}``."""
    state, ctx = work.state, work.ctx
    state.segmentation = None  # the setting just stored is read afresh
    segmentation = await state.segments(ctx, work.scope)
    now = ctx.clock.now()
    retired = await _retire(work, now)
    members = await _members(work)
    created: set[str] = set()
    await progress(0, len(members))
    for start in range(0, len(members), CHUNK):
        batch = StageBatch()
        batch.now = now
        dirty: dict[str, Episode] = {}
        for event_id in members[start : start + CHUNK]:
            await _rejoin(work, batch, event_id, now, dirty)
        for episode in dirty.values():
            batch.ops += await work.tables.episodes.whole_ops(episode)
        created.update(dirty)
        await work.index.index_documents(batch.ops, {e.id: episode_text(e) for e in dirty.values()})
        await work.commit(batch)
        await progress(min(start + CHUNK, len(members)), len(members))
    return {"retired": retired, "episodes": len(created), "events": len(members), "strategy": segmentation.strategy}


async def _retire(work: StageContext, now: Any) -> int:
    tables, state = work.tables, work.state
    ops: list[Any] = [tables.open_episodes.delete_op(EPISODE_WINDOW)]
    retired = 0
    async for _, episode in tables.episodes.scan():
        if episode.recorded_to is not None or episode.excluded_from_recall:
            continue
        episode.recorded_to = now
        ops += await tables.episodes.whole_ops(episode)
        work.index.unindex(ops, episode.id)
        retired += 1
        if len(ops) >= CHUNK:
            await tables.write(ops)
            ops = []
    await tables.write(ops)
    state.episode, state.episode_loaded, state.last_sealed = None, True, None
    return retired


async def _members(work: StageContext) -> list[str]:
    """The events that joined an episode, in WAL order (ids only: the scan stays streaming)."""
    out = []
    async for event_id, _ in work.tables.events.scan():
        event_state = await work.read_state(event_id)
        if event_state is None or event_state.cancelled or not event_state.episode_id:
            continue
        if await suppress.episode_suppressed(work, event_id):
            continue
        out.append(event_id)
    return out


async def _rejoin(work: StageContext, batch: StageBatch, event_id: str, now: Any,
                  dirty: dict[str, Episode]) -> None:  # fmt: skip
    event = await work.state.event(event_id)
    event_state = await work.read_state(event_id)
    if event is None or event_state is None:
        return
    text = compress.clip(content_text(event.content), work.config.passage_max_chars)
    episode = await compress.window(work, batch, event, text, now, dirty)
    compress.join(episode, event, event_state, text)
    dirty[episode.id] = episode
    event_state.episode_id = episode.id
    event_state.set_stage_derives(Stage.EPISODE_JOINED.value, [episode.id])
    if episode.id not in event_state.derives:
        event_state.derives.append(episode.id)
    batch.ops.append(work.state_op(event_id, event_state))
