"""A process that uploads blobs to a FileBlobStore in a loop and prints each committed digest.

Used by tests/test_blobs_store.py, which SIGKILLs it mid-upload.  Usage: blob_crash_writer.py ROOT
"""

import random
import sys

import trio

from cortexdb.backends.filesystem import FileBlobStore


async def main(root: str) -> None:
    store = FileBlobStore(root)
    rng = random.Random(7)
    for index in range(1_000_000):
        upload = await store.begin()
        size = rng.randrange(500_000, 3_000_000)
        block = index.to_bytes(4, "big") * 16_384  # 64 KiB, distinct per blob
        for start in range(0, size, len(block)):
            await upload.write(block[: size - start])
        digest, _ = await upload.commit()
        print(digest, flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
