"""Durability of files on disk: ``fsync_path`` makes what a file or a folder (its names: a file
created, renamed or deleted in it) holds durable.  A leaf: the blob store, the kept vector
segments and the import's sort runs each need it after a write."""

from __future__ import annotations

import os


def fsync_path(path: str) -> None:
    """``fsync`` a file's or a folder's contents by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
