"""What ``store.py`` knows of LevelDB's files and options: the options a store opens with, the
files it deletes on a reopen (``rotate``), the keys a compaction writes for itself, and opening
a directory with clear errors."""

from __future__ import annotations

import plyvel

from ...errors import DataDirLocked, WalUnavailable
from .mmap_reads import disable_mmap_reads

# A 4 MB memtable (LevelDB's default) fills in under a second at capture rates, and level-0
# files then pile up faster than compaction drains them, which makes LevelDB throttle writers.
# Measured in bench/capture.py (docs/decisions.md): larger buffers and a Bloom filter for the
# point look-ups on absent keys (idempotency keys, entity aliases).  16 MB + 8 MB captured as
# fast as 64 MB + 64 MB, which took minutes to fill and kept RSS growing that long (decisions.md,
# "Index memory"); LevelDB holds up to two memtables (one being flushed) plus the cache.
DEFAULT_OPTIONS = {
    "write_buffer_size": 16 << 20,
    "lru_cache_size": 8 << 20,
    "bloom_filter_bits": 10,
    "max_file_size": 16 << 20,
    # LevelDB's default, 4 KiB (EngineConfig.leveldb_block_size).  Every open table keeps its
    # index block (an entry per data block) outside the block cache, so that memory grows with
    # the data; 16 KiB blocks hold a quarter of it and make tables about a third smaller, but
    # double a point read's CPU when it misses the cache.  Measured (decisions.md, "LevelDB
    # blocks of 16 KiB" and "The block size's default stays 4 KiB").
    "block_size": 4 << 10,
    # not a plyvel option: False reads tables with pread into the block cache above, not through
    # memory maps whose touched pages stay resident (mmap_reads.py; decisions.md, "LevelDB tables
    # read with pread").  Process-wide, settled by the process's first open of a DB
    "mmap_reads": False,
}
INFO_LOGS = ("LOG", "LOG.old")  # LevelDB's info log: manual compactions quote their keys
FLUSH_KEY = b"\xff" * 17  # above every key: compacting [it, it] only flushes the memtable
# the sentinels a compaction has written (``compact``): a crash leaves them, the next open deletes them
SENTINELS = b"\xff\xfe" + b"cortexdb:compaction-sentinels"


def below(key: bytes) -> bytes:
    """A key just below ``key`` that no record uses (UTF-8 text never holds the byte 0xff)."""
    if key[-1]:
        return key[:-1] + bytes([key[-1] - 1]) + b"\xff" * 16
    return key[:-1]


def pack(keys: list[bytes]) -> bytes:
    return b"".join(len(key).to_bytes(2, "big") + key for key in keys)


def unpack(value: bytes) -> list[bytes]:
    keys, position = [], 0
    while position < len(value):
        size = int.from_bytes(value[position : position + 2], "big")
        keys.append(value[position + 2 : position + 2 + size])
        position += 2 + size
    return keys


def open_db(path: str, settings: dict) -> plyvel.DB:
    options = dict(settings)
    if not options.pop("mmap_reads", True):
        disable_mmap_reads()
    try:
        return plyvel.DB(path, create_if_missing=True, **options)
    except plyvel.IOError as exc:
        if "lock" in str(exc).lower():
            raise DataDirLocked(
                f"data directory {path} is already open in another process or engine",
                details={"path": path},
            ) from None
        raise WalUnavailable(f"cannot open LevelDB at {path}: {exc}", details={"path": path}) from exc
    except plyvel.Error as exc:
        raise WalUnavailable(f"cannot open LevelDB at {path}: {exc}", details={"path": path}) from exc
