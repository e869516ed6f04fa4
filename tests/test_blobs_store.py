"""The blob stores: both built-in ones against the shipped conformance suite, and the
filesystem store's crash safety (a process killed mid-upload leaves no partial blob)."""

import hashlib
import os
import signal
import sys

import pytest
import trio

from cortexdb.backends import open_blob_store
from cortexdb.backends.filesystem import FileBlobStore
from cortexdb.backends.leveldb import LevelDBStore
from cortexdb.backends.memory import MemoryStore
from cortexdb.backends.memory.blobs import MemoryBlobStore
from cortexdb.testing.blob_conformance import *  # noqa: F401,F403
from cortexdb.testing.factories import FileBlobFactory, MemoryBlobFactory

HELPER = os.path.join(os.path.dirname(__file__), "helpers", "blob_crash_writer.py")


@pytest.fixture(params=["memory", "filesystem"])
def blob_factory(request, tmp_path):
    if request.param == "memory":
        return MemoryBlobFactory()
    return FileBlobFactory(str(tmp_path / "blobs"))


async def test_each_kv_backend_gets_its_default_blob_store(tmp_path):
    assert isinstance(open_blob_store(MemoryStore()), MemoryBlobStore)
    store = await LevelDBStore.open(str(tmp_path / "data"))
    try:
        blobs = open_blob_store(store)
        assert isinstance(blobs, FileBlobStore) and blobs.root == str(tmp_path / "data" / "blobs")
    finally:
        await store.close()
    own = MemoryBlobStore()
    carrier = MemoryStore()
    carrier.blob_store = own  # a third-party backend brings its own blob store
    assert open_blob_store(carrier) is own


async def test_staging_files_left_by_a_crash_are_deleted_on_open(tmp_path):
    root = str(tmp_path / "blobs")
    first = FileBlobStore(root)
    upload = await first.begin()
    await upload.write(b"x" * 3_000_000)  # written to staging, never committed
    assert os.listdir(first.staging)
    reopened = FileBlobStore(root)
    assert os.listdir(reopened.staging) == []
    assert [d async for d in reopened.digests()] == []


async def test_sigkill_mid_upload_leaves_only_whole_blobs(tmp_path):
    """A writer process commits blobs of 0.5-3 MB in a loop; SIGKILL it while it writes.  After
    a reopen every committed digest it printed is there, every visible file holds exactly the
    bytes its name says, and staging is empty."""
    root = str(tmp_path / "blobs")
    committed: list[str] = []
    process = await trio.lowlevel.open_process([sys.executable, HELPER, root], stdout=-1)
    try:
        buffer = b""
        while len(committed) < 6:
            chunk = await process.stdout.receive_some(65536)
            assert chunk, "the writer exited early"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            committed += [line.decode() for line in lines]
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == -signal.SIGKILL
    store = FileBlobStore(root)
    visible = [d async for d in store.digests()]
    assert set(committed) <= set(visible)
    for digest in visible:
        data = b"".join([chunk async for chunk in store.read(digest)])
        assert hashlib.sha256(data).hexdigest() == digest
    assert os.listdir(store.staging) == []
