"""Durability of files on disk: ``fsync_path`` makes what a file or a folder (its names: a file
created, renamed or deleted in it) holds durable.  A leaf: the blob store, the kept vector
segments and the import's sort runs each need it after a write.  The kept vector and text
segments also share how a manifest is written (``replace_json``: whole or not at all) and read
(``read_json``), and a kept file's digest (``file_digest``)."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any


def fsync_path(path: str) -> None:
    """``fsync`` a file's or a folder's contents by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_digest(path: str) -> str:
    """A file's BLAKE2b digest, in hex (what a manifest records of each kept file)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "blake2b").hexdigest()


def replace_json(folder: str, name: str, body: Any) -> None:
    """Write ``body`` as ``folder/name`` atomically and durably: a temporary file written and
    ``fsync``-ed, renamed over the old one, the folder ``fsync``-ed (a crash leaves the old or the
    new file, whole; a temporary file it leaves is the reader's to delete)."""
    temporary = os.path.join(folder, f"{name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w") as handle:
        json.dump(body, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, os.path.join(folder, name))
    fsync_path(folder)


def read_json(path: str) -> tuple[Any, str | None]:
    """A JSON file's value, or None: with None as the reason when there is no such file, else why
    it could not be read."""
    try:
        with open(path) as handle:
            return json.load(handle), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as error:
        return None, f"manifest unreadable: {error}"
