"""Running one piece of forget work (``forget``'s table) in the lane: the lane's ``ForgetItem``
handler calls ``run``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import forget_drop, forget_events, forget_records, forget_select
from .common import StageContext
from .forget import (
    DeleteEvents,
    DeleteRecords,
    DropSupports,
    ReplaceDerives,
    Select,
    Tidy,
    Writes,
    forget_caches,
    new_result,
    replace_derives,
    tidy,
)


async def run(work: StageContext, item: Any, unqueue: Callable[[Any], None],
              enqueue: Callable[[Any], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Do one piece of work; the answer is its counts (``follow_ups`` as work, by scope).
    ``unqueue`` drops events from the lane's queue, ``enqueue`` queues one for derivation."""
    if isinstance(item, Select):
        return await forget_select.select(work, item)
    if isinstance(item, Tidy):
        await tidy(work)
        return {}
    out, result = Writes(work), new_result()
    try:
        if isinstance(item, DeleteRecords):
            await forget_records.delete(work, out, item, result)
        elif isinstance(item, DeleteEvents):
            unqueue(item.event_ids)
            await forget_events.delete_events(work, out, item.event_ids, result)
        elif isinstance(item, forget_drop.DropScope):  # an erasure taking the scope whole
            assert enqueue is not None
            await forget_drop.drop_scope(work, out, item, result, enqueue)
        elif isinstance(item, forget_drop.DropEvents):
            unqueue(item.event_ids)
            await forget_drop.drop_events(work, out, item, result)
        elif isinstance(item, ReplaceDerives):
            for event_id, pairs in item.mapping:
                await replace_derives(work, out, [event_id], dict(pairs), result)
        else:
            await forget_events.HANDLERS[type(item)](work, out, item, result)
        await out.flush()
    except Exception:
        forget_caches(work)  # what was changed in memory may not be stored: reload it
        raise
    finally:  # beliefs changed here (deleted, demoted, redacted): their subjects' summaries reload
        work.state.subject_beliefs.clear()
    follow = {scope: [ReplaceDerives(tuple((e, tuple(m.items())) for e, m in owed.items()))]
              for scope, owed in result.pop("follow_ups").items()}  # fmt: skip
    for scope, supports in result.pop("drop_supports", {}).items():
        follow.setdefault(scope, []).append(DropSupports(tuple(supports.items())))
    result["evidence"] = sorted(result["evidence"])
    return {**result, "follow_ups": follow}
