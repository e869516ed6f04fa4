"""The one-shot reply slot every request to a scope actor carries (``messages``)."""

from __future__ import annotations

from typing import Any

import trio


class ReplySlot:
    """A one-shot reply: the requester awaits ``wait()``; the actor calls ``set`` or ``fail``.

    Built on ``wait_task_rescheduled`` rather than ``trio.Event``: one reply per capture makes
    the lighter primitive worth it (see bench/capture.py).
    """

    __slots__ = ("_done", "_error", "_task", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._task = None

    @property
    def answered(self) -> bool:
        return self._done

    def _wake(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def set(self, value: Any) -> None:
        if not self._done:
            self._done, self._value = True, value
            self._wake()

    def fail(self, error: BaseException) -> None:
        if not self._done:
            self._done, self._error = True, error
            self._wake()

    async def wait(self) -> Any:
        if self._done:
            await trio.lowlevel.checkpoint()
        else:
            self._task = trio.lowlevel.current_task()

            def abort(_raise_cancel):
                self._task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        if self._error is not None:
            raise self._error
        return self._value
