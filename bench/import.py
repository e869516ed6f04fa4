"""Import throughput and memory (reference §8.11), on LevelDB, against the bulk write in the same run.

    python bench/import.py [--items 100000] [--small 10000] [--users 1] [--derive] [--http] [--formats jsonl,mem0]

It writes two synthetic source files of ``--items`` records each: CortexDB JSONL (one envelope a
line) and a Mem0 ``get_all`` document (``mem0_results``: ``{"results": [...]}``, read with ijson).
Each is imported through the embedded engine (``Engine.imports``: spooled, parsed incrementally,
written through ``experience_bulk``) in both orderings — ``strict_temporal`` (the whole file sorted
by scope and ``observed_at`` on disk, runs of ``import_window``, 10,000 records, merged as they are
written) and ``batch_throughput`` (file order, requests of ``bulk_max_items``, 1,000).  The baseline is bench/capture.py's path: the same
envelopes written by ``Engine.experience_bulk`` calls of 1,000 (generated lazily), measured in the
same run, once more just before each import row (the load of a shared machine moves within a
run), to which that row's rate is compared; the ratio of their rates per CPU-second of the
process (``time.process_time``, every thread) is printed too, and the load average.  For Mem0,
whose records are larger (every source field kept in labels), the same records as the importer
maps them, bulk-written, are a second baseline.

Every measurement runs in a fresh process on a fresh data dir, so its peak RSS (``ru_maxrss``)
is its own.  Each is repeated on a ``--small`` file: an import's memory is bounded by its window,
not the file, so its peak RSS should move with the file size only as much as the baseline's does
(what grows is the engine's and LevelDB's, and on a loaded machine that is noisy).  The
importers' reading alone (no engine: parse, window, sort, drop) is measured the same way: its
peak RSS is the import's own memory, and should not move with the file size.  The derivation pipeline is parked by
default, as in capture.py's backlog runs (``--derive`` lets it run during the writes: slower,
noisier).  ``--http`` also imports the JSONL file through ``cortexdb serve`` (the SDK's streamed
upload), with bulk POSTs of 1,000 as its baseline and the server's peak RSS (VmHWM); the
pipeline runs there.  ``--formats mem0`` runs only the Mem0 rows (and their baselines).  No figure is asserted; this machine is a noisy 2-core VM.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# bench/http.py is named like the stdlib package `http`: drop this directory from the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import orjson  # noqa: E402

ROOT = os.path.dirname(_HERE)
ACTOR = "user:bench"
TEXTS = [
    "I live in Lisbon and I work at Acme Corp.", "My favorite color is green.",
    "We talked about the quarterly roadmap for a while.", "I really love hiking in the mountains.",
    "Acme moved to 200 seats after the pilot.", "Can you remind me what we decided yesterday?",
    "I'm 34 years old.", "The meeting ran long but it went well.",
]  # fmt: skip
ORDERINGS = ("strict_temporal", "batch_throughput")
TEMPLATES = {"jsonl": "org:bench", "mem0": "org:bench/user:{user_id}"}


# -- the synthetic sources ---------------------------------------------------------------------------
def user_id(i: int, users: int) -> str:
    return "bench" if users == 1 else f"u{i % users}"


def scope(i: int, users: int) -> str:
    return f"org:bench/user:{user_id(i, users)}"  # a Mem0 record's too (TEMPLATES["mem0"])


def when(i: int) -> str:
    """Nearly in time order: every seventh record steps back a little (strict_temporal sorts)."""
    t = 1_767_225_600 + i * 5 - (i % 7) * 11  # from 2026-01-01
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def envelope(i: int, users: int) -> dict:
    return {"scope": scope(i, users), "modality": "conversation", "idempotency_key": f"bench-{i}",
            "content": {"kind": "message", "role": "user", "text": f"{TEXTS[i % len(TEXTS)]} (note {i})"},
            "context": {"observed_at": when(i)}}  # fmt: skip


def write_jsonl(path: str, n: int, users: int) -> None:
    with open(path, "wb") as out:
        for i in range(n):
            out.write(orjson.dumps(envelope(i, users)) + b"\n")


def write_mem0(path: str, n: int, users: int) -> None:
    """Mem0 OSS ``get_all``: ``{"results": [memory, ...]}`` (tests/data/import/mem0/oss_v2_get_all.json)."""
    with open(path, "wb") as out:
        out.write(b'{"results": [\n')
        for i in range(n):
            text = f"{TEXTS[i % len(TEXTS)]} (note {i})"  # Mem0's hash is the md5 of its text
            memory = {"id": f"9d1c{i:08d}-0000-4000-8000-000000000000", "memory": text,
                      "hash": hashlib.md5(text.encode()).hexdigest(), "metadata": None,
                      "created_at": when(i).replace("Z", "+00:00"), "updated_at": None, "user_id": user_id(i, users)}  # fmt: skip
            out.write((b",\n" if i else b"") + orjson.dumps(memory))
        out.write(b"\n]}\n")


# -- one measurement, in a child process -----------------------------------------------------------------
def parse_only(spec: dict) -> dict:
    """The importer's own reading, no engine: in batch_throughput the source parsed a request at a
    time, each dropped before the next; in strict_temporal, as the job sorts: encoded, sorted and
    spilled in runs of ``import_window`` records to a temporary directory, then merged and decoded
    a request at a time."""
    import itertools

    from cortexdb.engine.config import EngineConfig
    from cortexdb.engine.transfer import extsort
    from cortexdb.engine.transfer.imports import SOURCES
    from cortexdb.engine.transfer.window import prepare

    config, module = EngineConfig(), SOURCES[spec["format"]]
    strict = spec["ordering"] == "strict_temporal"
    options = {"ordering": spec["ordering"], "template": TEMPLATES[spec["format"]], "imported_at": when(0)}
    started, cpu, count = time.perf_counter(), time.process_time(), 0
    spill = tempfile.mkdtemp(prefix="bench-import-runs-")
    try:
        with open(spec["file"], "rb") as fh:
            records = module.read(fh, module.sniff(spec["file"]), options)
            if not strict:
                while chunk := [prepare(item, False) for item in itertools.islice(records, config.bulk_max_items)]:
                    count += len(chunk)
            else:
                runs, named, scopes = extsort.Runs(spill, config.import_sort_max_bytes, config.import_sort_fan_in), [], {}
                ordinal = 0
                while True:  # as the job reads: each record encoded as it is mapped, the mapped one dropped
                    chunk = extsort.Chunk()
                    for item in itertools.islice(records, config.import_window):
                        chunk.add(*extsort.encode(item, ordinal, scopes))
                        ordinal += 1
                    if not chunk:
                        break
                    named.append(runs.spill(f"run-{len(named):06d}", chunk, named))
                shared: dict = {}  # the repeated strings, one object each, as the job's merge decodes
                for _, payload in runs.merged(named):
                    extsort.decode(payload, shared)
                    count += 1
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "rate": count / seconds, "cpu_rate": count / cpu, "peak_rss_mb": peak,
            "counts": {"read": count}}  # fmt: skip


async def child(spec: dict) -> dict:
    import cortexdb
    from cortexdb import EngineConfig

    path = tempfile.mkdtemp(prefix="bench-import-")
    try:
        config = EngineConfig(embedder="hash", idle_timeout=3600)
        async with cortexdb.open_engine("leveldb", path=path, config=config) as engine:
            for name in sorted({scope(i, spec["users"]) for i in range(spec["users"])}):
                await engine.ping(name)
                if not spec["derive"]:
                    await engine.pause_derivation(name)
            mapped = mapped_file(spec) if spec["kind"] == "bulk_mapped" else None  # not timed
            started, cpu = time.perf_counter(), time.process_time()
            if spec["kind"] == "bulk":
                counts = await bulk(engine, spec["items"], spec["users"])
            elif mapped is not None:
                counts = await bulk_mapped(engine, mapped)
                os.remove(mapped)
            else:
                counts = await import_file(engine, spec)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        shutil.rmtree(path, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"seconds": seconds, "rate": spec["items"] / seconds, "cpu_rate": spec["items"] / cpu, "peak_rss_mb": peak,
            "counts": counts}  # fmt: skip


async def bulk(engine, n: int, users: int) -> dict:
    """capture.py's bulk path: ``experience_bulk`` of 1,000 envelopes of one scope per call."""
    written = 0
    for start in range(0, n, 1000):
        by_scope: dict[str, list] = {}
        for i in range(start, min(n, start + 1000)):
            env = envelope(i, users)
            by_scope.setdefault(env.pop("scope"), []).append(env)
        for name, items in by_scope.items():
            written += (await engine.experience_bulk({"scope": name, "items": items})).accepted
    return {"written": written}


def mapped_file(spec: dict) -> str:
    """The envelopes the importer maps the file to, one a line, in a file beside it: the
    bulk-write baseline for the *same* records (Mem0's carry every source field in labels)."""
    from cortexdb.engine.transfer.imports import SOURCES

    module = SOURCES[spec["format"]]
    options = {"ordering": "batch_throughput", "template": TEMPLATES[spec["format"]], "imported_at": when(0)}
    path = spec["file"] + ".mapped"
    with open(spec["file"], "rb") as fh, open(path, "wb") as out:
        for item in module.read(fh, module.sniff(spec["file"]), options):
            out.write(orjson.dumps(item.envelope) + b"\n")
    return path


async def bulk_mapped(engine, path: str) -> dict:
    """``mapped_file``'s envelopes read back lazily (like ``bulk``'s, generated as they are
    written: a list of them all would tax every garbage collection), in bulk requests of 1,000
    of one scope."""
    written, batch, name = 0, [], None
    with open(path, "rb") as lines:
        for line in lines:
            env = orjson.loads(line)
            if batch and (env["scope"] != name or len(batch) == 1000):
                written += (await engine.experience_bulk({"scope": name, "items": batch})).accepted
                batch = []
            name = env.pop("scope")
            batch.append(env)
    if batch:
        written += (await engine.experience_bulk({"scope": name, "items": batch})).accepted
    return {"written": written}


async def import_file(engine, spec: dict) -> dict:
    import trio

    async def chunks():
        async with await trio.open_file(spec["file"], "rb") as source:
            while chunk := await source.read(1 << 20):
                yield chunk

    request = {"scope_template": TEMPLATES[spec["format"]], "options": {"ordering": spec["ordering"]}}
    started = await engine.imports.start(spec["format"], chunks(), request)
    status = await engine.imports.wait(started["import_id"])
    if status["status"] != "completed" or status["items"]["failed"]:
        raise SystemExit(f"the import did not complete cleanly: {status}")
    return status["items"]


def measure(spec: dict, tree: str = ROOT) -> dict:
    """Run ``spec`` in a fresh interpreter (its own peak RSS), with the code of ``tree`` (a
    checkout of this repository: its own bench/import.py runs the child); its figures."""
    env = {**os.environ, "PYTHONPATH": tree}
    result = subprocess.run([sys.executable, os.path.join(tree, "bench", "import.py"), "--child", json.dumps(spec)],
                            capture_output=True, text=True, env=env, cwd=tree)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"the measurement {spec} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- through the HTTP server -----------------------------------------------------------------------------
def serve(data: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": ROOT}
    process = subprocess.Popen([sys.executable, "-m", "cortexdb.cli", "serve", "--data", data, "--bind", "127.0.0.1:0",
                                "--preset", "dev_local", "--embedder", "hash", "--access-log", "off",
                                "--tenant-admin", ACTOR],
                               stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)  # fmt: skip
    for line in process.stderr:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if found:  # keep draining its log: a full pipe would block the server
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    raise SystemExit("the server did not start")


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def over_http(kind: str, path: str, n: int, users: int) -> dict:
    from cortexdb.client import CortexClient

    data = tempfile.mkdtemp(prefix="bench-import-http-")
    process, url = serve(data)
    try:
        with CortexClient(url, actor=ACTOR, timeout=600) as client:
            started = time.perf_counter()
            if kind == "bulk":
                for start in range(0, n, 1000):
                    batch = [envelope(i, users) for i in range(start, min(n, start + 1000))]
                    for name in sorted({env["scope"] for env in batch}):
                        client.experience_bulk([{k: v for k, v in env.items() if k != "scope"} for env in batch
                                                 if env["scope"] == name], scope=name)  # fmt: skip
            else:
                job = client.import_file("jsonl", path, scope_template=TEMPLATES["jsonl"], ordering=kind)
                final = client.wait_import(job.import_id, poll_interval=0.05, max_poll_interval=0.2)
                if final.status != "completed" or final.items["failed"]:
                    raise SystemExit(f"the import did not complete cleanly: {final.raw}")
            seconds = time.perf_counter() - started
        peak = peak_rss_mb(process.pid)
    finally:
        process.send_signal(signal.SIGKILL)  # its pipeline's backlog is of no interest
        process.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)
    return {"rate": n / seconds, "seconds": seconds, "peak_rss_mb": peak}


# -- the report ---------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000, help="records per source file (default 100,000)")
    parser.add_argument("--small", type=int, default=10_000, help="the smaller file of the memory comparison")
    parser.add_argument("--users", type=int, default=1, help="scopes the records spread over (default 1)")
    parser.add_argument("--derive", action="store_true", help="let the derivation pipeline run during the writes")
    parser.add_argument("--http", action="store_true", help="also import the JSONL file through `cortexdb serve`")
    parser.add_argument("--memory", help="only peak RSS and rates: the bulk write and each import, interleaved, at "
                                         "each of these comma-separated file sizes (e.g. 20000,100000,200000)")
    parser.add_argument("--against", help="with --memory: each import arm also run, next to this tree's, with the "
                                          "code of this other checkout (e.g. a `git archive` of main)")
    parser.add_argument("--formats", default="jsonl,mem0", help="the sources measured, comma-separated (default "
                                                                 "jsonl,mem0; e.g. mem0: its rows and baselines only)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.formats = [f for f in ("jsonl", "mem0") if f in args.formats.split(",")] or ["jsonl", "mem0"]
    if args.child:
        import trio

        spec = json.loads(args.child)
        print(json.dumps(parse_only(spec) if spec["kind"] == "parse" else trio.run(child, spec)))
        return
    sizes = sorted({args.items, min(args.small, args.items)})
    work = tempfile.mkdtemp(prefix="bench-import-src-")
    try:
        if args.memory:
            memory_report(args, sorted({int(n) for n in args.memory.split(",")}), work)
        else:
            report(args, sizes, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def memory_report(args, sizes: list[int], work: str) -> None:
    """Peak RSS by file size: at each size the bulk write, then each import (and, with
    ``--against``, the same import with the other tree's code right after it), then the bulk write
    again, one after another (interleaved), each in a fresh process; "over bulk" is against the
    mean of the size's two bulk writes, "cpu ratio" the rate per CPU-second against theirs. What an
    import holds beyond the bulk write should not grow with the file."""
    common = {"users": args.users, "derive": args.derive}
    trees = [("", ROOT)] + ([("main ", os.path.abspath(args.against))] if args.against else [])
    print(f"peak RSS by file size, leveldb, embedder hash, derivation {'running' if args.derive else 'parked'}")
    print(f"{'items':>8s} {'arm':30s} {'peak RSS':>8s} {'over bulk':>9s} {'items/s':>8s} {'per CPU-s':>9s}"
          f" {'cpu ratio':>9s} {'load':>5s}")  # fmt: skip
    for n in sizes:
        files = {}
        for fmt, write in (("jsonl", write_jsonl), ("mem0", write_mem0)):
            files[fmt] = os.path.join(work, f"{fmt}-{n}.json")
            write(files[fmt], n, args.users)
        arms = [(f"{label}{fmt} {ordering}", tree, {**common, "kind": "import", "format": fmt, "ordering": ordering,
                                                    "items": n, "file": files[fmt]})
                for fmt in args.formats for ordering in ORDERINGS for label, tree in trees]  # fmt: skip
        bulk_spec = {**common, "kind": "bulk", "items": n}
        results = [("bulk write", measure(bulk_spec), os.getloadavg()[0])]
        results += [(name, measure(spec, tree), os.getloadavg()[0]) for name, tree, spec in arms]
        results.append(("bulk write (again)", measure(bulk_spec), os.getloadavg()[0]))
        bulks = [results[0][1], results[-1][1]]
        base_rss = sum(b["peak_rss_mb"] for b in bulks) / 2
        base_cpu = sum(b["cpu_rate"] for b in bulks) / 2
        for name, run, load in results:
            print(f"{n:>8,} {name:30s} {run['peak_rss_mb']:>6.0f} MB {run['peak_rss_mb'] - base_rss:>+6.0f} MB"
                  f" {run['rate']:>8,.0f} {run['cpu_rate']:>9,.0f} {run['cpu_rate'] / base_cpu:>9.2f} {load:>5.1f}",
                  flush=True)  # fmt: skip
        for path in files.values():
            os.remove(path)


def report(args, sizes: list[int], work: str) -> None:
    files = {}
    for n in sizes:
        for fmt, write in (("jsonl", write_jsonl), ("mem0", write_mem0)):
            files[fmt, n] = os.path.join(work, f"{fmt}-{n}.json")
            write(files[fmt, n], n, args.users)
    big = args.items
    print(f"items={big:,} users={args.users} leveldb, embedder hash, derivation "
          f"{'running' if args.derive else 'parked'}, cpu_count={os.cpu_count()}")
    print(f"source files: jsonl {os.path.getsize(files['jsonl', big]) / 1e6:.1f} MB, "
          f"mem0 {os.path.getsize(files['mem0', big]) / 1e6:.1f} MB")
    common = {"users": args.users, "derive": args.derive}
    base = {n: measure({**common, "kind": "bulk", "items": n}) for n in sizes}
    rss = " ".join(f"{n:,}: {base[n]['peak_rss_mb']:.0f} MB" for n in sizes)
    print(f"baseline bulk write (experience_bulk of 1,000, capture.py's path): {base[big]['rate']:>9,.0f} items/s"
          f" ({base[big]['cpu_rate']:,.0f} per CPU-second)   peak RSS {rss}")
    print("each import row: a baseline bulk write measured just before it (the machine's load moves), the import's "
          "rate and its ratio to that baseline, the same per CPU-second of the process, the load average")
    print(f"{'source':6s} {'ordering':17s} {'bulk/s':>7s} {'items/s':>8s} {'ratio':>5s} {'cpu ratio':>9s} {'load':>5s}"
          "   peak RSS by file size (and over the baseline's)")
    same = None
    for fmt in args.formats:
        for ordering in ORDERINGS:
            load = os.getloadavg()[0]
            near = measure({**common, "kind": "bulk", "items": big})
            if fmt == "mem0" and same is None:
                same = measure({**common, "kind": "bulk_mapped", "format": "mem0", "items": big,
                                "file": files["mem0", big]})  # fmt: skip
            runs = {n: measure({**common, "kind": "import", "format": fmt, "ordering": ordering, "items": n,
                                "file": files[fmt, n]}) for n in sizes}  # fmt: skip
            load = (load + os.getloadavg()[0]) / 2
            rss = "  ".join(f"{n:,}: {runs[n]['peak_rss_mb']:.0f} MB ({runs[n]['peak_rss_mb'] - base[n]['peak_rss_mb']:+.0f})"
                            for n in sizes)  # fmt: skip
            run = runs[big]
            print(f"{fmt:6s} {ordering:17s} {near['rate']:>7,.0f} {run['rate']:>8,.0f} {run['rate'] / near['rate']:>5.2f}"
                  f" {run['cpu_rate'] / near['cpu_rate']:>9.2f} {load:>5.1f}   {rss}")  # fmt: skip
    if same is not None:
        print(f"baseline for mem0: the same records as the importer maps them, bulk-written (read back lazily from a "
              f"file of envelopes), measured before the first mem0 row: {same['rate']:,.0f} items/s "
              f"({same['cpu_rate']:,.0f} per CPU-second), peak RSS {same['peak_rss_mb']:.0f} MB")
    print("the importers' reading alone (no engine; batch_throughput a request at a time, strict_temporal sorted "
          "into runs on disk and merged, as the job reads):")
    for fmt in args.formats:
        for ordering in ORDERINGS:
            runs = {n: measure({"kind": "parse", "format": fmt, "ordering": ordering, "items": n,
                                "file": files[fmt, n]}) for n in sizes}  # fmt: skip
            rss = "  ".join(f"{n:,}: {runs[n]['peak_rss_mb']:.0f} MB" for n in sizes)
            print(f"{fmt:6s} {ordering:17s} {runs[big]['rate']:>9,.0f} records/s parsed   peak RSS {rss}")
    if len(sizes) == 2:
        small = sizes[0]
        print(f"(an import holds, in batch_throughput, a request of records and a piece of the next; in "
              f"strict_temporal, a run of 10,000 encoded records while sorting, then a frame per run and two requests "
              f"while writing; not the file: compare its gain from {small:,} to {big:,} records with the baseline's)")
    if args.http:
        http_base = over_http("bulk", "", big, args.users)
        print(f"http   bulk POSTs of 1,000 (baseline)  {http_base['rate']:>9,.0f} items/s"
              f"   server peak RSS {http_base['peak_rss_mb']:.0f} MB")
        for ordering in ORDERINGS:
            run = over_http(ordering, files["jsonl", big], big, args.users)
            print(f"http   jsonl {ordering:17s} {run['rate']:>9,.0f} items/s   ratio {run['rate'] / http_base['rate']:.2f}"
                  f"   server peak RSS {run['peak_rss_mb']:.0f} MB (pipeline running)")  # fmt: skip


if __name__ == "__main__":
    main()
