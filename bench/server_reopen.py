"""Is the soak server's memory growth kept per record or left by its history?  Reopen and compare.

    python bench/server_reopen.py [--checkpoints 6000,24000] [--writes-per-s 50] [--recall-every 10]
                                  [--subscribers 50] [--scopes 5] [--probe 30] [--tracemalloc FRAMES]

bench/server_memory.py's load (the soak's writes over ``--scopes`` user scopes, a recall every
``--recall-every`` writes, ``--subscribers`` SSE streams) drives one data dir to each checkpoint.
There the loaded server is settled and measured as bench/server_memory.py does ("loaded" rows),
then stopped; its data dir is copied, and a new server carries the load on to the next checkpoint
from the same dir.  Then each copy is reopened by a fresh server, which gets the same ``--probe``
writes and recalls (a recall and a write per scope in turn, so every scope is open and its indexes
restored) with the same subscribers, is settled, collected, trimmed and measured ("reopened"
rows).  If the reopened server at the last checkpoint sits near the reopened one at the first,
what the loaded server grew is its history (caches, fragmentation, what was in flight); if it
sits near the loaded one, the growth is kept per record.

Each row: RSS, anonymous RSS, glibc's malloc, pymalloc's arenas and live bytes (bench/server_settle.py)
and anonymous memory by mapping.  ``--tracemalloc FRAMES`` reopens each copy a second time under
tracemalloc and prints the allocation sites that differ most between the reopened servers (the
snapshots are taken at the settled point; tracemalloc's own memory makes those servers larger,
so their RSS is not printed).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import shutil
import sys
import tempfile
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, ROOT)

import trio  # noqa: E402

from cortexdb.server import auth  # noqa: E402

_spec = importlib.util.spec_from_file_location("server_memory", os.path.join(HERE, "server_memory.py"))
server_memory = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(server_memory)  # type: ignore[union-attr]
soak = server_memory.soak
server_memory.print_row = lambda row, before: None  # this bench prints its own rows

COLUMNS = ("rss", "anon", "inuse", "free", "mmapped", "pyarenas", "pylive")


def phase(args: argparse.Namespace, root: str, keys: str, token: str, start: int, until: int,
          *, probe: bool, dump: str | None = None) -> dict:  # fmt: skip
    """One server on ``root``/data: writes ``start`` + 1 .. ``until``, settled and measured."""
    answers = os.path.join(root, f"settled-{start}-{until}-{os.getpid()}-{bool(dump)}.txt")
    launcher = (["-X", f"tracemalloc={args.tracemalloc}"] if dump else []) + \
        [os.path.join(HERE, "server_settle.py"), answers]
    os.environ["SETTLE_SMAPS"] = "1"  # read by bench/server_settle.py in the server
    if dump:
        os.environ["SETTLE_DUMP"] = dump
    else:
        os.environ.pop("SETTLE_DUMP", None)
    server_args = argparse.Namespace(backend="leveldb", preset=args.preset, http_server="cortex",
                                     tracemalloc=None, probe=None)  # fmt: skip
    run_args = copy.copy(args)
    run_args.start, run_args.checkpoints, run_args.py_spy = start, [until], None
    if probe:  # a recall with each write, slowly: every scope opened, nothing queued
        run_args.writes_per_s, run_args.recall_every, run_args.writers = 10.0, 1, 2
    server = soak.Server(server_args, root, keys, launcher=launcher)
    try:
        async def bounded() -> list:
            with trio.fail_after(args.phase_timeout):  # a server that stops answering: its log, not a hang
                return await server_memory.run(run_args, server, token, answers)

        rows = trio.run(bounded)
    except BaseException:
        sys.stderr.write("".join(list(server.log)[-30:]))
        raise
    finally:
        server.stop()
    return rows[-1]


def show(label: str, row: dict) -> None:
    print(f"{label:>22} " + " ".join(f"{row.get(c, float('nan')):8.1f}" for c in COLUMNS) +
          f"  {row['writes']:6d} writes {row['recalls']:5d} recalls  load {row['load']:.1f}", flush=True)  # fmt: skip
    for line in row["traced"]:
        if line.startswith("  anon by mapping"):
            print(" " * 23 + line.strip(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", default="6000,24000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--writes-per-s", type=float, default=50.0)
    parser.add_argument("--recall-every", type=int, default=10)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--scopes", type=int, default=5)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--preset", default="on_prem_enterprise")
    parser.add_argument("--probe", type=int, default=30, help="writes (each with a recall) made on a reopened dir")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="also reopen each copy under tracemalloc and diff the reopened servers' sites")
    parser.add_argument("--settle-timeout", type=float, default=900.0)
    parser.add_argument("--phase-timeout", type=float, default=3600.0, help="seconds one server's phase may take")
    parser.add_argument("--keep", metavar="DIR", help="keep the data dirs under DIR (default: a temporary dir, removed)")
    args = parser.parse_args()
    if not args.checkpoints or any(b <= a for a, b in zip([0, *args.checkpoints[:-1]], args.checkpoints, strict=True)):
        parser.error("--checkpoints must be increasing write counts above 0")
    if args.subscribers < 1:
        parser.error("--subscribers must be at least 1 (the firehose subscriber tells when derivation settled)")
    args.types = args.bytes = False
    root = args.keep or tempfile.mkdtemp(prefix="cortex-server-reopen-")
    os.makedirs(root, exist_ok=True)
    try:
        keys = os.path.join(root, "issuer")
        auth.keygen(keys)
        token = auth.mint(keys, sub=soak.ACTOR, tenant=soak.TENANT, ttl=24 * 3600)
        live = os.path.join(root, "live")
        os.makedirs(live)
        print(f"server reopened: {args.subscribers} SSE subscribers, {args.scopes} scopes, {args.writes_per_s:g} "
              f"writes/s, a recall every {args.recall_every} writes; {args.probe} probe writes and recalls on reopen")  # fmt: skip
        print(f"{'':>22} " + " ".join(f"{c:>8}" for c in COLUMNS) + "  (MB)", flush=True)
        done, copies = 0, []
        for checkpoint in args.checkpoints:
            show(f"loaded {checkpoint}", phase(args, live, keys, token, done, checkpoint, probe=False))
            copied = os.path.join(root, f"at-{checkpoint}")
            shutil.copytree(os.path.join(live, "data"), os.path.join(copied, "data"))
            copies.append((checkpoint, copied))
            done = checkpoint
        reopened = {}
        for checkpoint, copied in copies:
            work = os.path.join(root, f"reopen-{checkpoint}")
            shutil.copytree(copied, work)
            row = phase(args, work, keys, token, checkpoint, checkpoint + args.probe, probe=True)
            reopened[checkpoint] = row
            show(f"reopened {checkpoint}", row)
        first, last = args.checkpoints[0], args.checkpoints[-1]
        if len(args.checkpoints) > 1:
            grown = reopened[last]["anon"] - reopened[first]["anon"]
            print(f"reopened servers' anonymous RSS from {first} to {last} writes: {reopened[first]['anon']:.1f} -> "
                  f"{reopened[last]['anon']:.1f} MB ({grown / reopened[first]['anon'] * 100:+.1f} %, "
                  f"{grown * 1024 / (last - first):.2f} KB a write)")  # fmt: skip
        if args.tracemalloc:
            snapshots = {}
            for checkpoint, copied in copies:
                work = os.path.join(root, f"traced-{checkpoint}")
                shutil.copytree(copied, work)
                prefix = os.path.join(root, f"snapshot-{checkpoint}")
                phase(args, work, keys, token, checkpoint, checkpoint + args.probe, probe=True, dump=prefix)
                snapshots[checkpoint] = tracemalloc.Snapshot.load(prefix + ".1")
            a, b = snapshots[first], snapshots[last]
            print(f"traced Python memory of the reopened servers: {sum(s.size for s in a.statistics('filename')) / 1e6:.1f} "
                  f"-> {sum(s.size for s in b.statistics('filename')) / 1e6:.1f} MB; the sites that differ most:")  # fmt: skip
            for stat in b.compare_to(a, "traceback")[:20]:
                print(f"  {stat.size_diff / 1e6:+8.2f} MB {stat.count_diff:+8d} blocks (now {stat.size / 1e6:.1f} MB)")
                for line in stat.traceback.format()[-8:]:
                    print("        " + line)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
