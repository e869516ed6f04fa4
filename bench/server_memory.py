"""The server's memory per write, settled: bench/soak.py's load in phases, measured at rest.

    python bench/server_memory.py [--checkpoints 3000,9000,15000,21000] [--writes-per-s 40]
                                  [--recall-every 10] [--subscribers 50] [--scopes 5]
                                  [--tracemalloc FRAMES] [--http-server cortex|hypercorn]
                                  [--py-spy PREFIX]   (a profile per phase; each row gives its CPU ms a write)

bench/soak.py measures the server's RSS while it runs at a fixed rate, so what it sees mixes what
the server keeps with what it has not finished yet (the derivation backlog, buffers in flight)
and with the machine's other work.  This bench runs the same server (`cortexdb serve`, LevelDB,
the soak's preset, token and writes over ``--scopes`` user scopes, a recall every
``--recall-every`` writes, ``--subscribers`` SSE lifecycle streams open throughout) in phases.
After each phase it waits until the firehose subscriber has seen every acknowledged write
consolidated, then asks the server (SIGUSR2, handled by bench/server_settle.py) for a full
garbage collection and ``malloc_trim(0)`` and reads its memory: RSS, anonymous RSS, glibc's
malloc (in use, free inside its heap, its own mappings) and pymalloc's blocks and arenas (the
1 MiB mappings it makes itself, outside glibc's counters) against the bytes of its live blocks.  The growth
between checkpoints, per write, is what the server keeps per write once it is idle, whatever the
rate: the figure bench/engine_memory.py gives for the engine alone, here with HTTP, policy,
audit and the SSE fan-out on top.

``--tracemalloc FRAMES`` runs the server under tracemalloc and prints, at each checkpoint after
the first, the allocation sites that grew most since the previous one; ``--types`` the object
types whose count grew and what holds them (bench/server_settle.py is the server's entry point).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, ROOT)

import trio  # noqa: E402

from cortexdb.server import auth  # noqa: E402

_spec = importlib.util.spec_from_file_location("soak", os.path.join(HERE, "soak.py"))
soak = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(soak)  # type: ignore[union-attr]

ANSWER_TIMEOUT = 300.0  # seconds the server gets to settle and answer one measurement


def parse(line: str) -> dict[str, float]:
    return {k: float(v) for k, v in (part.split("=") for part in line.split())}


async def measure(server: Any, path: str, asked: int) -> tuple[dict[str, float], list[str]]:
    """Signal the server, wait for its answer (the ``asked``-th block of ``path``)."""
    os.kill(server.pid, signal.SIGUSR2)
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while True:  # the answer is a file another process appends to: polled, with a deadline
        await trio.sleep(0.2)
        if server.process.poll() is not None:
            raise SystemExit(f"the server exited ({server.process.returncode}) before it answered")
        if time.monotonic() > deadline:
            raise SystemExit(f"the server did not answer within {ANSWER_TIMEOUT:.0f} s")
        if os.path.exists(path):
            with open(path) as f:
                blocks = f.read().split("\n.\n")
            if len(blocks) > asked:  # the last element is what follows the newest "."
                lines = blocks[asked - 1].strip("\n").split("\n")
                return parse(lines[0]), lines[1:]


async def run(args: argparse.Namespace, server: Any, token: str, answers: str) -> list[dict[str, Any]]:
    url = server.url
    headers = {"Authorization": f"Bearer {token}", "X-Cortex-Actor": soak.ACTOR}
    kinds = [None, soak.ROOT_SCOPE, "user"]
    subscribers = []
    for n in range(args.subscribers):
        kind = kinds[n % 3]
        scope = soak.scope_of((n // 3) % args.scopes) if kind == "user" else kind
        subscribers.append(soak.Subscriber(n, scope, verify=(n == 0)))
    rows: list[dict[str, Any]] = []
    writes, recalls = soak.Load(), soak.Load()
    async with trio.open_nursery() as streams:
        for sub in subscribers:
            streams.start_soon(sub.run, url, headers, False)
        while not all(s.open for s in subscribers):  # as bench/soak.py: polled, the streams set a flag
            await trio.sleep(0.05)
        verifier = subscribers[0] if subscribers else None
        done, started = getattr(args, "start", 0), time.monotonic()  # a later run's writes follow an earlier one's
        cpu0 = server.cpu_seconds()
        for checkpoint in args.checkpoints:
            count, offset = checkpoint - done, done

            def make_write(conn: Any, i: int, offset: int = offset) -> bytes:
                return conn.encode("POST", "/v1/experience",
                                   soak.json.dumps(soak.write_body(offset + i + 1, args.scopes)).encode(), headers)  # fmt: skip

            def make_recall(conn: Any, i: int, offset: int = offset) -> bytes:
                k = offset // args.recall_every + i
                request = {"scope": soak.scope_of(k % args.scopes), "query": soak.QUERIES[k % len(soak.QUERIES)]}
                return conn.encode("POST", "/v1/recall", soak.json.dumps(request).encode(), headers)

            profiler = None
            if args.py_spy:  # this phase's samples, to its settled end (SIGINT makes py-spy write them)
                profiler = subprocess.Popen(
                    [shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy"), "record",
                     "--pid", str(server.pid), "--format", "raw", "-o", f"{args.py_spy}.{checkpoint}.txt",
                     "--rate", "50", "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            phase_cpu = server.cpu_seconds()
            until = trio.current_time() + count / args.writes_per_s
            async with trio.open_nursery() as load:
                load.start_soon(soak.fixed_rate, url, args.writes_per_s, until, args.writers, make_write, 202, writes, True)
                if args.recall_every:
                    load.start_soon(soak.fixed_rate, url, args.writes_per_s / args.recall_every, until, 2,
                                    make_recall, 200, recalls)  # fmt: skip
            done = checkpoint
            waited = time.monotonic()
            if verifier is not None:  # settled: every acknowledged write seen consolidated
                ids = [w.encode() for w in writes.ids]
                # polled (the subscriber only counts; a poll costs a pass over the ids) with a deadline
                while any(b"consolidated" not in verifier.stages.get(w, ()) for w in ids):
                    await trio.sleep(0.5)
                    if time.monotonic() - waited > args.settle_timeout:
                        raise SystemExit(f"derivation did not settle within {args.settle_timeout:.0f} s")
            phase_cpu = server.cpu_seconds() - phase_cpu
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait()
            figures, traced = await measure(server, answers, len(rows) + 1)
            rows.append({"writes": len(writes.ids), "acknowledged": len(writes.latencies), "errors": sum(writes.errors.values()),
                         "recalls": len(recalls.latencies), "recall_errors": sum(recalls.errors.values()),
                         "elapsed": time.monotonic() - started, "settle": time.monotonic() - waited,
                         "cpu": server.cpu_seconds() - cpu0, "phase_cpu": phase_cpu, "phase_writes": count,
                         "load": soak.load_average(),
                         "lagging": sum(s.laggings for s in subscribers), **figures, "traced": traced})  # fmt: skip
            print_row(rows[-1], rows[-2] if len(rows) > 1 else None)
        streams.cancel_scope.cancel()
    return rows


HEADER = ("  writes  recalls   RSS MB  anon MB  malloc in use  free  own maps  pymalloc blocks  "
          "arenas MB  live MB  KB/write (anon)  cpu s  ms/write  settle s  lagging  load")


def print_row(row: dict[str, Any], before: dict[str, Any] | None) -> None:
    per = "" if before is None else f"{(row['anon'] - before['anon']) * 1024 / (row['writes'] - before['writes']):+.2f}"
    print(f"  {row['writes']:6d}  {row['recalls']:7d}  {row['rss']:7.1f}  {row['anon']:7.1f}  {row['inuse']:13.1f}  "
          f"{row['free']:4.1f}  {row['mmapped']:8.1f}  {row['blocks']:15.0f}  "
          f"{row.get('pyarenas', 0):9.1f}  {row.get('pylive', 0):7.1f}  {per:>15}  {row['cpu']:5.0f}  "
          f"{row['phase_cpu'] * 1000 / row['phase_writes']:8.2f}  "
          f"{row['settle']:8.1f}  {row['lagging']:7d}  {row['load']:4.1f}", flush=True)  # fmt: skip
    for line in row["traced"]:
        print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", default="3000,9000,15000,21000",
                        type=lambda s: [int(x) for x in s.split(",")], help="writes at which to measure")  # fmt: skip
    parser.add_argument("--writes-per-s", type=float, default=40.0, help="the phases' write rate")
    parser.add_argument("--recall-every", type=int, default=10, help="a recall per N writes (0: none)")
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--scopes", type=int, default=5)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--preset", default="on_prem_enterprise")
    parser.add_argument("--http-server", default="cortex", choices=("cortex", "hypercorn"))
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="trace the server's allocations (FRAMES deep) and diff them between checkpoints")
    parser.add_argument("--types", action="store_true",
                        help="at each checkpoint after the first, the object types that grew and what holds them")
    parser.add_argument("--bytes", action="store_true",
                        help="name the holders of the large bytes objects (16 KiB or more) at each checkpoint")
    parser.add_argument("--py-spy", metavar="PREFIX", help="profile the server through each phase (its load and "
                        "settling) with py-spy: raw collapsed stacks in PREFIX.<checkpoint>.txt")
    parser.add_argument("--settle-timeout", type=float, default=900.0)
    args = parser.parse_args()
    if not args.checkpoints or any(b <= a for a, b in zip([0, *args.checkpoints[:-1]], args.checkpoints, strict=True)):
        parser.error("--checkpoints must be increasing write counts above 0")
    if args.subscribers < 1:
        parser.error("--subscribers must be at least 1 (the firehose subscriber tells when derivation settled)")
    root = tempfile.mkdtemp(prefix="cortex-server-memory-")
    try:
        keys = os.path.join(root, "issuer")
        auth.keygen(keys)
        token = auth.mint(keys, sub=soak.ACTOR, tenant=soak.TENANT, ttl=24 * 3600)
        answers = os.path.join(root, "settled.txt")
        launcher = (["-X", f"tracemalloc={args.tracemalloc}"] if args.tracemalloc else []) + \
            [os.path.join(HERE, "server_settle.py"), answers]
        server_args = argparse.Namespace(backend="leveldb", preset=args.preset, http_server=args.http_server,
                                         tracemalloc=None, probe=None)  # fmt: skip
        if args.types:
            os.environ["SETTLE_TYPES"] = "1"  # read by bench/server_settle.py in the server
        if args.bytes:
            os.environ["SETTLE_BYTES"] = "1"
        server = soak.Server(server_args, root, keys, launcher=launcher)
        print(f"server memory, settled: {args.subscribers} SSE subscribers, {args.scopes} scopes, "
              f"{args.writes_per_s:g} writes/s in phases, a recall every {args.recall_every} writes, "
              f"{args.http_server} HTTP server, tracemalloc {args.tracemalloc or 'off'}", flush=True)
        print(HEADER, flush=True)
        try:
            rows = trio.run(run, args, server, token, answers)
        except BaseException:
            sys.stderr.write("".join(list(server.log)[-30:]))
            raise
        finally:
            server.stop()
        if len(rows) >= 2:
            first, last = rows[1] if len(rows) > 2 else rows[0], rows[-1]
            grown = last["anon"] - first["anon"]
            print(f"anonymous RSS from {first['writes']} to {last['writes']} writes: {first['anon']:.1f} -> "
                  f"{last['anon']:.1f} MB ({grown / first['anon'] * 100:+.1f} %, "
                  f"{grown * 1024 / (last['writes'] - first['writes']):.2f} KB a write)")  # fmt: skip
        errors = sum(r["errors"] for r in rows[-1:]) + sum(r["recall_errors"] for r in rows[-1:])
        print(f"errors: {errors}; subscribers that got lagging: {rows[-1]['lagging'] if rows else 0}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
