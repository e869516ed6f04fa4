"""What LevelDB's block size costs a read: point reads and a whole scan of the same data in tables
of different block sizes, alternated in one process.

    python bench/leveldb_blocks.py DIR [DIR ...] [--gets 20000] [--rounds 3] [--seed 7]
    python bench/leveldb_blocks.py --rewrite SRC DST BLOCK_SIZE

``--rewrite`` makes such a DIR: a copy of data dir SRC (its folders: blobs, segment files) whose
LevelDB is written key by key into a fresh DB with ``block_size`` BLOCK_SIZE, so that every table
has it (a compaction would not rewrite tables already at the deepest level).  SRC is read on a
copy (an open replays LevelDB's log).

Each DIR is a LevelDB directory (or a data dir holding one): the same keys written with another
``block_size`` (e.g. a soak data dir rewritten key by key into a fresh DB).  Every round opens each
DIR in turn (the store's options: 8 MB block cache, Bloom filter), reads ``--gets`` keys drawn
at random (the same seeded keys for every DIR; keys of the first DIR) one by one, then scans every
key and value, and closes it; CPU time of this thread (``thread_time``) per get and per scanned
MB.  The last column is the median over the rounds against the first DIR's.  The DIRs are opened
on copies (a read may compact).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import plyvel

OPTIONS = {"write_buffer_size": 16 << 20, "lru_cache_size": 8 << 20, "bloom_filter_bits": 10,
           "max_file_size": 16 << 20}  # fmt: skip


def table_dir(path: str) -> str:
    return os.path.join(path, "data") if os.path.isdir(os.path.join(path, "data")) else path


def one(path: str, keys: list[bytes]) -> tuple[float, float]:
    db = plyvel.DB(path, **OPTIONS)
    try:
        start = time.thread_time()
        for key in keys:
            db.get(key)
        gets = (time.thread_time() - start) / len(keys) * 1e6
        start, size = time.thread_time(), 0
        for key, value in db.iterator():
            size += len(key) + len(value)
        scan = (time.thread_time() - start) / (size / 2**20) * 1e3
    finally:
        db.close()
    return gets, scan


def rewrite(src: str, dst: str, block_size: int) -> None:
    src = table_dir(src)
    work = tempfile.mkdtemp(prefix="cortex-leveldb-rewrite-")
    try:
        copy = os.path.join(work, "db")
        shutil.copytree(src, copy)
        os.makedirs(dst)
        for name in os.listdir(src):
            if os.path.isdir(os.path.join(src, name)):
                shutil.copytree(os.path.join(src, name), os.path.join(dst, name))
        old = plyvel.DB(copy, **OPTIONS)
        new = plyvel.DB(dst, create_if_missing=True, block_size=block_size, **OPTIONS)
        count, batch = 0, new.write_batch()
        for key, value in old.iterator(fill_cache=False):
            batch.put(key, value)
            count += 1
            if count % 5000 == 0:
                batch.write()
                batch = new.write_batch()
        batch.write()
        old.close()
        new.close()
        tables = [name for name in os.listdir(dst) if name.endswith(".ldb")]
        size = sum(os.path.getsize(os.path.join(dst, name)) for name in tables)
        print(f"{dst}: {count} keys, {len(tables)} tables, {size / 2**20:.0f} MB with {block_size}-byte blocks")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    if sys.argv[1:2] == ["--rewrite"]:
        src, dst, size = sys.argv[2:5]
        rewrite(src, dst, int(size))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--gets", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cortex-leveldb-blocks-")
    try:
        copies = []
        for i, path in enumerate(args.dirs):
            copy = os.path.join(work, str(i))
            shutil.copytree(table_dir(path), copy, ignore=shutil.ignore_patterns("blobs", "*-segments"))
            copies.append(copy)
        db = plyvel.DB(copies[0], **OPTIONS)
        every = list(db.iterator(include_value=False))
        db.close()
        keys = random.Random(args.seed).sample(every, min(args.gets, len(every)))
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        print(f"{len(keys)} random gets of {len(every)} keys, then a scan; {args.rounds} rounds; load {load}")
        found: dict[str, list[tuple[float, float]]] = {path: [] for path in args.dirs}
        for round_ in range(args.rounds):
            for path, copy in zip(args.dirs, copies, strict=True):
                found[path].append(one(copy, keys))
                gets, scan = found[path][-1]
                print(f"  round {round_ + 1}: {path}: {gets:.2f} µs a get, {scan:.2f} ms a scanned MB", flush=True)
        first = args.dirs[0]
        ref_gets = statistics.median(g for g, _ in found[first])
        ref_scan = statistics.median(s for _, s in found[first])
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        print(f"medians (load {load}):")
        for path in args.dirs:
            gets = statistics.median(g for g, _ in found[path])
            scan = statistics.median(s for _, s in found[path])
            print(f"  {path}: {gets:.2f} µs a get ({gets / ref_gets:.2f}), {scan:.2f} ms a scanned MB ({scan / ref_scan:.2f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
