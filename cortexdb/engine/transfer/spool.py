"""Where import sources are spooled and export files are written: ``<transfer dir>/<job id>``.

An upload is written to its file as it arrives (never held whole in memory), up to
``import_max_bytes`` (413 beyond, and the partial file is removed)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterable
from typing import Any

import trio

from ...errors import PayloadTooLarge


def transfer_dir(ctx: Any) -> str:
    """``EngineConfig.transfer_dir``, else ``<data dir>/transfer``, else a temporary directory
    (a memory engine: it cannot resume a job after a restart anyway), one for the engine's
    lifetime, made on first use and removed with what is in it when the engine closes
    (``context.close_context``)."""
    chosen = ctx.config.transfer_dir
    if chosen is None:
        data_dir = getattr(ctx.store, "path", None)
        if data_dir:
            chosen = os.path.join(data_dir, "transfer")
        else:
            if ctx.transfer_tmp is None:
                ctx.transfer_tmp = tempfile.mkdtemp(prefix="cortexdb-transfer-")
            chosen = ctx.transfer_tmp
    os.makedirs(chosen, exist_ok=True)
    return chosen


def existing_transfer_dir(ctx: Any) -> str | None:
    """The transfer dir of an engine on a data dir (or configured), if it exists; never made."""
    chosen = ctx.config.transfer_dir or (os.path.join(ctx.store.path, "transfer")
                                         if getattr(ctx.store, "path", None) else None)  # fmt: skip
    return chosen if chosen is not None and os.path.isdir(chosen) else None


async def spool(data: bytes | AsyncIterable[bytes], path: str, limit: int) -> tuple[int, int]:
    """Write ``data`` to ``path``: (bytes, newlines)."""
    size = lines = 0
    try:
        async with await trio.open_file(path, "wb") as out:
            if isinstance(data, bytes | bytearray | memoryview):
                data = _once(bytes(data))
            async for chunk in data:
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge("source", limit, size, message=f"the import source is larger than {limit} bytes "
                                          "(the import size limit: --max-import-bytes)")  # fmt: skip
                lines += chunk.count(b"\n")
                await out.write(chunk)
    except BaseException:
        with trio.CancelScope(shield=True):
            remove(path)
        raise
    return size, lines


async def _once(data: bytes):
    yield data


def remove(path: str | None) -> None:
    if path:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
