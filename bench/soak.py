"""A soak run: writes, recalls and lifecycle SSE subscribers against one server for a duration.

    python bench/soak.py [--duration 600] [--writes-per-s 50] [--recalls-per-s 5]
                         [--subscribers 50] [--backend leveldb|memory] [--sample-every 30]
                         [--scopes 5] [--http-server cortex|hypercorn] [--py-spy FILE]
                         [--gc-stats FILE]   (the server's collector and malloc_trim CPU, per sample)

It starts `cortexdb serve` as a separate process (a fresh data dir, a fresh reference issuer,
127.0.0.1:0; the same way as bench/http.py) and drives it from this one process with Trio tasks
over loopback (raw sockets, bench/loadgen.py; a signed PASETO token on every request):
- writers: single ``POST /v1/experience`` at a fixed rate (open loop: latency is measured from the
  moment a write was due, so a stalled server cannot hide behind a slowed client), spread over
  ``--scopes`` user scopes, texts that produce facts;
- recallers: ``POST /v1/recall`` at ``--recalls-per-s``;
- subscribers: ``GET /v1/lifecycle/stream``, a third of them firehose (no scope), a third on
  ``org:soak`` (every user scope below it), a third on one user scope each.  Each counts the
  records it receives (strictly increasing ids: a duplicate or an out-of-order id is counted
  apart) and a ``lagging`` close.  One firehose subscriber also records the stages each write
  went through.
Every ``--sample-every`` seconds it samples the *server's* RSS (/proc/PID/status VmRSS) and CPU,
this client's CPU, and the write latency of the interval.  At the end (writers stopped, derivation
flushed) it reads the published history (``GET /v1/lifecycle``, the ground truth) and prints, per
subscriber, the records it should have received (matching its scope, published after the start
anchor) against the ones it did: lost = expected - received.
Goals (issue 10, part 8): 50 subscribers at 50 writes/s, none lagging, 0 lost; RSS flat after
warm-up (< 10 % growth between minute 2 and minute 10).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any
from urllib.parse import quote, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# bench/http.py is named like the stdlib package: keep this directory off the import path and load
# bench/loadgen.py by its file name
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, ROOT)

import importlib.util  # noqa: E402

import trio  # noqa: E402

from cortexdb.server import auth  # noqa: E402

_spec = importlib.util.spec_from_file_location("loadgen", os.path.join(HERE, "loadgen.py"))
loadgen = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(loadgen)  # type: ignore[union-attr]

ACTOR = "user:alice"
TENANT = "soak"
ROOT_SCOPE = "org:soak"
STAGES = ("captured", "extracted", "indexed", "consolidated")
MASK = (1 << 64) - 1
CITIES = ["Lisbon", "Porto", "Madrid", "Paris", "Berlin", "Oslo", "Rome", "Vienna", "Prague", "Dublin"]
COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Industries", "Wayne Enterprises"]
COLORS = ["green", "blue", "red", "yellow", "purple", "orange"]
HOBBIES = ["hiking in the mountains", "sailing", "chess", "running", "painting", "climbing"]
TOPICS = ["quarterly", "hiring", "pricing", "security", "migration"]
QUERIES = ["where does the user live", "favorite color", "which company", "hobbies", "roadmap", "seats"]


def scope_of(k: int) -> str:
    return f"{ROOT_SCOPE}/user:u{k}"


def text(i: int) -> str:
    pick = (i * 7919) // 3
    kind = i % 6
    if kind == 0:
        return f"I live in {CITIES[pick % len(CITIES)]} and I work at {COMPANIES[pick % len(COMPANIES)]}."
    if kind == 1:
        return f"My favorite color is {COLORS[pick % len(COLORS)]}."
    if kind == 2:
        return f"I really love {HOBBIES[pick % len(HOBBIES)]}."
    if kind == 3:
        return f"{COMPANIES[pick % len(COMPANIES)]} moved to {50 + pick % 400} seats after the pilot."
    if kind == 4:
        return f"We talked about the {TOPICS[pick % len(TOPICS)]} roadmap for a while (note {i})."
    return f"The meeting with {COMPANIES[pick % len(COMPANIES)]} ran long but it went well (note {i})."


def write_body(i: int, scopes: int) -> dict[str, Any]:
    observed = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_780_000_000 + i))
    return {"scope": scope_of(i % scopes), "modality": "conversation",
            "content": {"kind": "message", "role": "user", "text": text(i)},
            "context": {"observed_at": observed}, "idempotency_key": f"soak-{i}"}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def load_average() -> float:
    """The machine's 1-minute load average: other work competing for the same cores."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def in_scope(record_scope: str | None, scope: str | None) -> bool:
    """The bus's scope filter: the scope and everything below it."""
    if scope is None:
        return True
    found = record_scope or ""
    return found == scope or found.startswith(scope + "/")


# -- the server process ------------------------------------------------------------------------
class Server:
    def __init__(self, args: argparse.Namespace, root: str, keys: str, launcher: list[str] | None = None) -> None:
        """``launcher``: the interpreter arguments before ``serve`` (default: the CLI module, or
        the probe / tracemalloc entry points the options name)."""
        if launcher is None and args.gc_stats:  # the server accounts its collector's CPU into this file
            launcher = ["-c", GC_STATS.format(path=args.gc_stats, every=args.sample_every)]
        elif launcher is None and args.tracemalloc:  # the server diffs tracemalloc snapshots into this file
            launcher = ["-X", "tracemalloc=3", "-c", TRACED.format(path=args.tracemalloc, every=args.sample_every)]
        elif launcher is None and args.probe:  # the server appends where its memory is (bench/soak_probe.py)
            launcher = [os.path.join(HERE, "soak_probe.py"), args.probe, str(args.sample_every)]
        elif launcher is None:
            launcher = ["-m", "cortexdb.cli"]
        command = [sys.executable, *launcher, "serve", "--data", os.path.join(root, "data"),
                   "--backend", args.backend, "--bind", "127.0.0.1:0", "--preset", args.preset,
                   "--issuer-keys", keys, "--tenant", TENANT, "--operator", ACTOR, "--embedder", "hash",
                   "--http-server", args.http_server]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.log: collections.deque[str] = collections.deque(maxlen=200)
        self.url = ""
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
            if match:
                self.url = match.group(1)
                break
        if not self.url:
            raise SystemExit("the server did not start:\n" + "".join(self.log))
        # keep draining its log: a full pipe would block the server
        threading.Thread(target=self._drain, daemon=True).start()
        self.pid = self.process.pid
        self.ticks = os.sysconf("SC_CLK_TCK")

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)

    def rss_mb(self, field: str = "VmRSS") -> float:
        """VmRSS, or RssAnon (anonymous) / RssFile (file-backed: memory-mapped index segments,
        LevelDB's tables; pages the kernel can reclaim)."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self, thread: bool = False) -> float:
        """CPU seconds of the whole process, or of its main thread (the event loop) alone."""
        path = f"/proc/{self.pid}/task/{self.pid}/stat" if thread else f"/proc/{self.pid}/stat"
        with open(path) as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / self.ticks  # utime + stime

    def run_delay(self) -> float:
        """Seconds the server's main thread (the event loop) spent runnable but waiting for a
        core: how much the machine's other work held it back (/proc/PID/schedstat)."""
        try:
            with open(f"/proc/{self.pid}/schedstat") as stat:
                return int(stat.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return float("nan")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return -9


# -- subscribers ---------------------------------------------------------------------------------
class Subscriber:
    """One SSE lifecycle stream over a raw socket: de-chunks, splits frames, counts records."""

    def __init__(self, number: int, scope: str | None, verify: bool) -> None:
        self.number = number
        self.scope = scope
        self.floor = b""  # records up to this id belong to the warm-up anchor
        self.cutoff: bytes | None = None  # records after this id arrived after the history was read
        self.count = 0
        self.chunks = 0  # body chunks received (the server's sends)
        self.fingerprint = 0
        self.last = b""
        self.disordered = 0
        self.laggings = 0
        self.connects = 0
        self.other: collections.Counter[bytes] = collections.Counter()
        self.ends: collections.Counter[str] = collections.Counter()  # how each connection ended
        self.stages: dict[bytes, set[bytes]] | None = {} if verify else None
        self.consolidated = 0  # with verify: how many writes' `consolidated` records arrived
        self.failure: str | None = None
        self.open = False

    def path(self) -> str:
        return "/v1/lifecycle/stream" + (f"?scope={quote(self.scope)}" if self.scope else "")

    async def run(self, url: str, headers: dict[str, str], resume: bool) -> None:
        parts = urlsplit(url)
        while True:
            self.connects += 1
            stream = await trio.open_tcp_stream(parts.hostname, parts.port)
            try:
                lines = [f"GET {self.path()} HTTP/1.1", f"Host: {parts.netloc}", "Accept: text/event-stream"]
                lines += [f"{k}: {v}" for k, v in headers.items()]
                if self.last:
                    lines.append(f"Last-Event-ID: {self.last.decode()}")
                await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
                outcome = await self._consume(stream)
            finally:
                self.open = False
                with trio.CancelScope(shield=True):
                    await stream.aclose()
            self.ends[outcome] += 1
            if outcome != "lagging" or not resume:
                return

    async def _consume(self, stream: trio.SocketStream) -> str:
        raw = b""
        while b"\r\n\r\n" not in raw:
            data = await stream.receive_some(65536)
            if not data:
                self.failure = "closed before the response head"
                return "eof"
            raw += data
        head, _, raw = raw.partition(b"\r\n\r\n")
        if head[9:12] != b"200":
            self.failure = head.split(b"\r\n")[0].decode() + " " + raw[:200].decode(errors="replace")
            return "error"
        self.open = True
        pending: list[bytes] = []  # SSE bytes not yet split into frames
        while True:
            position = 0
            while True:  # whole chunks in ``raw``
                eol = raw.find(b"\r\n", position)
                if eol < 0:
                    break
                size = int(raw[position:eol].split(b";")[0], 16)
                if size == 0:
                    return self._frames(pending, final=True) or "end"
                if len(raw) < eol + 2 + size + 2:
                    break
                pending.append(raw[eol + 2 : eol + 2 + size])
                self.chunks += 1
                position = eol + 2 + size + 2
            raw = raw[position:]
            if pending and self._frames(pending) == "lagging":
                return "lagging"
            data = await stream.receive_some(65536)
            if not data:
                return "eof"
            raw += data

    def _frames(self, pending: list[bytes], final: bool = False) -> str | None:
        text_ = b"".join(pending)
        frames = text_.split(b"\n\n")
        pending[:] = [frames.pop()] if frames[-1] else []
        outcome = None
        for frame in frames:
            if not frame or frame[0] == 58:  # ":" a keep-alive comment
                continue
            if frame.startswith(b"id: "):
                eol = frame.index(b"\n")
                self._record(frame[4:eol], frame[eol + 1 :])
                continue
            name = frame[7 : frame.index(b"\n")] if frame.startswith(b"event: ") else frame[:20]
            if name == b"lagging":
                self.laggings += 1
                outcome = "lagging"
            else:
                self.other[name] += 1
        return outcome

    def _record(self, lce: bytes, rest: bytes) -> None:
        if lce <= self.floor or (self.cutoff is not None and lce > self.cutoff):
            return
        if lce <= self.last:
            self.disordered += 1
            return
        self.last = lce
        self.count += 1
        self.fingerprint = (self.fingerprint + hash(lce)) & MASK
        if self.stages is not None:
            stage = rest[7 : rest.index(b"\n")]  # "event: NAME"
            at = rest.find(b'"event_id":"')
            if at >= 0:
                event_id = rest[at + 12 : rest.index(b'"', at + 12)]
                self.stages.setdefault(event_id, set()).add(stage)
                self.consolidated += stage == b"consolidated"

    def reset(self, floor: bytes) -> None:
        self.floor = floor
        self.count = 0
        self.fingerprint = 0
        if self.stages is not None:
            self.stages.clear()
            self.consolidated = 0


# -- load ----------------------------------------------------------------------------------------
class Load:
    def __init__(self) -> None:
        self.latencies: list[tuple[float, float]] = []  # (completed at, ms)
        self.errors: collections.Counter[int] = collections.Counter()
        self.ids: list[str] = []
        self.behind = 0  # most requests waiting for a free connection at once


async def fixed_rate(url: str, rate: float, until: float, connections: int, make, expect: int,
                     load: Load, keep_id: bool = False) -> None:  # fmt: skip
    """Requests at ``rate``/s until ``until`` (trio time) over ``connections`` keep-alive
    connections; latency counts from when a request was due (queueing included)."""
    if rate <= 0:
        return
    send, receive = trio.open_memory_channel[tuple[int, float]](1_000_000)

    async def worker() -> None:
        conn = await loadgen.Connection.open(url)
        try:
            async for i, due in receive:
                status, payload = await conn.request(make(conn, i))
                done = trio.current_time()
                load.latencies.append((done, (done - due) * 1000))
                if status != expect:
                    load.errors[status] += 1
                elif keep_id:
                    load.ids.append(json.loads(payload)["event_id"])
        finally:
            await conn.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(worker)
        started = trio.current_time()
        i = 0
        while True:
            due = started + i / rate
            if due >= until:
                break
            await trio.sleep_until(due)
            send.send_nowait((i, due))
            load.behind = max(load.behind, receive.statistics().current_buffer_used)
            i += 1
        await send.aclose()


async def http_json(url: str, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    conn = await loadgen.Connection.open(url)
    try:
        raw = b"" if body is None else json.dumps(body).encode()
        status, payload = await conn.request(conn.encode(method, path, raw, headers))
        return status, (json.loads(payload) if payload else None)
    finally:
        await conn.aclose()


async def history(url: str, headers: dict[str, str], after: str) -> list[tuple[bytes, str | None, str | None, str]]:
    """Every published lifecycle record after ``after``: (id, scope, event_id, stage)."""
    out = []
    conn = await loadgen.Connection.open(url)
    try:
        cursor = None
        while True:
            query = f"limit=1000&cursor={cursor}" if cursor else f"limit=1000&since_lifecycle_id={after}"
            status, payload = await conn.request(conn.encode("GET", f"/v1/lifecycle?{query}", b"", headers))
            if status != 200:
                raise SystemExit(f"GET /v1/lifecycle: HTTP {status} {payload[:300]!r}")
            page = json.loads(payload)
            out += [(r["lifecycle_id"].encode(), r["scope"], r["event_id"], r["stage"]) for r in page["items"]]
            if not page["has_more"]:
                return out
            cursor = page["next_cursor"]
    finally:
        await conn.aclose()


# -- the run -------------------------------------------------------------------------------------
async def soak(args: argparse.Namespace, server: Server, token: str) -> dict[str, Any]:
    url = server.url
    headers = {"Authorization": f"Bearer {token}", "X-Cortex-Actor": ACTOR}
    kinds = [None, ROOT_SCOPE, "user"]
    subscribers = []
    for n in range(args.subscribers):
        kind = kinds[n % 3]
        scope = scope_of((n // 3) % args.scopes) if kind == "user" else kind
        subscribers.append(Subscriber(n, scope, verify=(n == 0)))
    samples: list[dict[str, Any]] = []
    writes, recalls = Load(), Load()
    result: dict[str, Any] = {"samples": samples, "writes": writes, "recalls": recalls, "subscribers": subscribers}

    async with trio.open_nursery() as streams:
        for sub in subscribers:
            streams.start_soon(sub.run, url, headers, args.resume)
        # warm-up anchor: one write per scope, until every subscriber has seen a record; the
        # records counted afterwards are the ones after the newest record seen here
        while not all(s.open for s in subscribers):
            await trio.sleep(0.05)
        for k in range(args.scopes):
            anchor = {**write_body(0, args.scopes), "scope": scope_of(k), "idempotency_key": f"anchor-{k}"}
            status, _ = await http_json(url, "POST", "/v1/experience", headers, anchor)
            assert status == 202, status
        with trio.move_on_after(60):
            while not all(s.count for s in subscribers):
                await trio.sleep(0.05)
        failed = [s for s in subscribers if s.failure or not s.count]
        if failed:
            raise SystemExit(f"subscriber {failed[0].number} did not start: {failed[0].failure}")
        floor = max((s.last for s in subscribers), default=b"")
        for sub in subscribers:
            sub.reset(floor)
        result["floor"] = floor.decode()

        started = trio.current_time()
        until = started + args.duration
        client_cpu0, server_cpu0, delay0 = time.process_time(), server.cpu_seconds(), server.run_delay()
        loop_cpu0 = server.cpu_seconds(thread=True)
        profiler = None
        if args.py_spy:
            profiler = subprocess.Popen(
                [shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--pid", str(server.pid), "--format", "raw", "-o", args.py_spy,
                 "--duration", str(int(args.duration)), "--rate", "50", "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

        def behind() -> int:
            """Acknowledged writes the firehose subscriber has not yet seen consolidated: the
            derivation backlog (events held until derived), as the client sees it."""
            verifier = subscribers[0] if subscribers else None
            if verifier is None or verifier.stages is None:
                return -1
            return len(writes.ids) - verifier.consolidated

        async def sampler() -> None:
            last_t, last_client, last_server, last_delay = started, client_cpu0, server_cpu0, server.run_delay()
            last_received = 0
            while True:
                await trio.sleep_until(min(last_t + args.sample_every, until))
                now = trio.current_time()
                client, srv, delay = time.process_time(), server.cpu_seconds(), server.run_delay()
                window = [ms for at, ms in writes.latencies if last_t < at <= now]
                received = sum(s.count for s in subscribers)
                samples.append({"t": now - started, "rss": server.rss_mb(), "anon": server.rss_mb("RssAnon"),
                                "server_cpu": (srv - last_server) / (now - last_t) * 100,
                                "waiting": (delay - last_delay) / (now - last_t) * 100,
                                "client_cpu": (client - last_client) / (now - last_t) * 100,
                                "writes": len(writes.latencies), "p50": pct(window, 0.5), "p99": pct(window, 0.99),
                                "delivered": (received - last_received) / (now - last_t),
                                "lagging": sum(s.laggings for s in subscribers),
                                "open": sum(s.open for s in subscribers), "load": load_average(),
                                "behind": behind()})  # fmt: skip
                print("  " + row(samples[-1]), flush=True)
                last_t, last_client, last_server, last_received, last_delay = now, client, srv, received, delay
                if now >= until:
                    return

        print(f"soak: {args.duration:.0f} s, {args.writes_per_s:g} writes/s, {args.recalls_per_s:g} recalls/s, "
              f"{args.subscribers} SSE subscribers, {args.backend}, {args.http_server} HTTP server", flush=True)  # fmt: skip
        print("  " + HEADER, flush=True)

        def make_write(conn: loadgen.Connection, i: int) -> bytes:
            return conn.encode("POST", "/v1/experience", json.dumps(write_body(i + 1, args.scopes)).encode(), headers)

        def make_recall(conn: loadgen.Connection, i: int) -> bytes:
            request = {"scope": scope_of(i % args.scopes), "query": QUERIES[i % len(QUERIES)]}
            return conn.encode("POST", "/v1/recall", json.dumps(request).encode(), headers)

        async with trio.open_nursery() as load:
            load.start_soon(sampler)
            load.start_soon(fixed_rate, url, args.writes_per_s, until, args.writers, make_write, 202, writes, True)
            load.start_soon(fixed_rate, url, args.recalls_per_s, until, 2, make_recall, 200, recalls)
        result["client_cpu"] = time.process_time() - client_cpu0
        result["server_waiting"] = server.run_delay() - delay0
        result["loop_cpu"] = server.cpu_seconds(thread=True) - loop_cpu0
        result["server_cpu"] = server.cpu_seconds() - server_cpu0
        result["elapsed"] = trio.current_time() - started
        if profiler is not None:
            profiler.wait()

        # derivation catches up, then the history is the ground truth
        flush_started = trio.current_time()
        status, _ = await http_json(url, "POST", "/v1/admin/flush-views", headers, {})
        assert status == 200, status
        result["catch_up"] = trio.current_time() - flush_started
        published = await history(url, headers, floor.decode())
        cutoff = published[-1][0] if published else floor
        for sub in subscribers:
            sub.cutoff = cutoff
        expected = {}
        for sub in subscribers:
            ids = [lce for lce, scope, _, _ in published if in_scope(scope, sub.scope)]
            fingerprint = 0
            for lce in ids:
                fingerprint = (fingerprint + hash(lce)) & MASK
            expected[sub.number] = (len(ids), fingerprint)
        # the subscribers drain what is still in flight (or give up after --drain seconds)
        with trio.move_on_after(args.drain):
            while any(s.open and s.count < expected[s.number][0] for s in subscribers):
                await trio.sleep(0.1)
        result["published"] = published
        result["expected"] = expected
        result["rss_end"] = server.rss_mb()
        streams.cancel_scope.cancel()
    return result


# the server's entry point under --tracemalloc: a thread appends the biggest growth since the
# previous snapshot (by allocating line) every --sample-every seconds
TRACED = """
import sys, threading, time, tracemalloc
def watch(path={path!r}, every={every!r}):
    previous = tracemalloc.take_snapshot()
    started = time.monotonic()
    while True:
        time.sleep(every)
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        with open(path, 'a') as out:
            total = sum(s.size for s in snapshot.statistics('filename'))
            out.write(f'--- t={{time.monotonic() - started:.0f}} s traced {{total / 1e6:.1f}} MB\\n')
            for stat in snapshot.compare_to(previous, 'traceback')[:12]:
                out.write(f'{{stat.size_diff / 1e6:+8.2f}} MB {{stat.count_diff:+8d}} blocks (now {{stat.size / 1e6:.1f}} MB)\\n')
                for line in stat.traceback.format()[-8:]:
                    out.write('      ' + line + '\\n')
        previous = snapshot
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = 'cortexdb'
from cortexdb.cli import main
sys.exit(main())
"""

# the server's entry point under --gc-stats: the cyclic collector's CPU (the collecting thread's
# CPU time between the start and stop callbacks), per generation, and malloc_trim's calls and CPU
# (memtrim.release_free_memory wrapped; the total so far), appended every sample with the
# objects the collector tracks (gc.get_count is only the young counts: the total is
# len(gc.get_objects()), walked once a sample, a few ms)
GC_STATS = """
import gc, sys, threading, time
spent, runs, started_at = [0.0, 0.0, 0.0], [0, 0, 0], [0.0]
def timed(phase, info):
    if phase == 'start':
        started_at[0] = time.thread_time()
    else:
        spent[info['generation']] += time.thread_time() - started_at[0]
        runs[info['generation']] += 1
gc.callbacks.append(timed)
from cortexdb.engine import memtrim
trims = [0, 0.0]  # malloc_trim calls and their CPU (each in a worker thread: that thread's CPU)
def trim(release=memtrim.release_free_memory):
    began = time.thread_time()
    try:
        return release()
    finally:
        trims[0] += 1
        trims[1] += time.thread_time() - began
memtrim.release_free_memory = trim
def watch(path={path!r}, every={every!r}):
    started = time.monotonic()
    last = [0.0, 0.0, 0.0]
    while True:
        time.sleep(every)
        now = list(spent)
        with open(path, 'a') as out:
            out.write(f'{{time.monotonic() - started:.0f}} s: collector CPU s per generation '
                      + ' '.join(f'{{b - a:.3f}}' for a, b in zip(last, now, strict=True))
                      + f' runs {{runs}} tracked {{len(gc.get_objects())}} frozen {{gc.get_freeze_count()}}'
                      + f' trims {{trims[0]}} trim CPU s {{trims[1]:.3f}}\\n')
        last = now
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = 'cortexdb'
from cortexdb.cli import main
sys.exit(main())
"""

# behind: acknowledged writes whose `consolidated` record the firehose subscriber has not seen yet
# (the derivation backlog; -1 without subscribers; slightly negative when records of writes whose
# responses are still on their way have already arrived).
# srv wait %: the share of time the server's event loop was ready to run but had no core (other
# processes on the machine); load: the machine's 1-minute load average.

HEADER = ("   t s   RSS MB  anon MB   srv CPU %  srv wait %  cli CPU %   writes   w p50 ms   w p99 ms   frames/s  lagging  open  load"
          "  behind")


def row(s: dict[str, Any]) -> str:
    return (f"{s['t']:6.0f}  {s['rss']:7.1f}  {s['anon']:7.1f}  {s['server_cpu']:9.0f}  {s['waiting']:10.0f}  {s['client_cpu']:9.0f}  {s['writes']:7d}"
            f"  {s['p50']:9.1f}  {s['p99']:9.1f}  {s['delivered']:9.0f}  {s['lagging']:7d}  {s['open']:4d}  {s['load']:4.1f}"
            f"  {s.get('behind', -1):6d}")  # fmt: skip


def smoothed(samples: list[dict[str, Any]], warm_at: float) -> None:
    """The same growth with less weight on one sample: the median of the samples within 30 s of
    the warm-up point against the median of the last three (a single sample can fall in a dip
    of the heap; the target line above stays the plain one)."""
    import statistics

    around = [s for s in samples if abs(s["t"] - warm_at) <= 30 + 1e-6]
    last = samples[-3:]
    if len(around) < 2 or len(last) < 3 or last[0]["t"] <= warm_at + 30:
        return
    for key, name in (("rss", "RSS"), ("anon", "anonymous RSS")):
        a, b = statistics.median(s[key] for s in around), statistics.median(s[key] for s in last)
        print(f"{name}, medians (samples t={around[0]['t']:.0f}-{around[-1]['t']:.0f} s -> the last three): "
              f"{a:.1f} -> {b:.1f} MB: growth {(b - a) / a * 100:+.1f} %")  # fmt: skip


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    samples, writes, recalls = result["samples"], result["writes"], result["recalls"]
    subscribers: list[Subscriber] = result["subscribers"]
    elapsed = result["elapsed"]
    print()
    warm_at = 120.0 if args.duration >= 180 else args.duration / 2
    warm = next((s for s in samples if s["t"] >= warm_at - 1e-6), None)
    end_rss = samples[-1]["rss"] if samples else float("nan")
    if warm is not None and samples:
        growth = (end_rss - warm["rss"]) / warm["rss"] * 100
        label = "minute 2" if args.duration >= 180 else f"t={warm['t']:.0f} s (run too short for minute 2)"
        print(f"RSS: {warm['rss']:.1f} MB at {label} -> {end_rss:.1f} MB at t={samples[-1]['t']:.0f} s: "
              f"growth {growth:+.1f} %  (first sample {samples[0]['rss']:.1f} MB; after the drain {result['rss_end']:.1f} MB)")  # fmt: skip
        anon = (samples[-1]["anon"] - warm["anon"]) / warm["anon"] * 100
        print(f"anonymous RSS (RssAnon): {warm['anon']:.1f} MB at {label.split(' (')[0]} -> {samples[-1]['anon']:.1f} MB: "
              f"growth {anon:+.1f} %")  # fmt: skip
        written = samples[-1]["writes"] - warm["writes"]
        if written > 0:
            print(f"RSS growth per write after {label.split(' (')[0]}: {(end_rss - warm['rss']) * 1024 / written:.1f} KB "
                  f"({written} writes)")  # fmt: skip
        smoothed(samples, warm_at)
        if args.duration >= 180:
            print(f"target RSS growth < 10 % between minute 2 and the end: {'met' if growth < 10 else 'NOT met'}")
    lat = [ms for _, ms in writes.latencies]
    print(f"writes:  {len(lat)} acknowledged in {elapsed:.0f} s ({len(lat) / elapsed:.1f}/s), errors {dict(writes.errors) or 0}, "
          f"p50 {pct(lat, 0.5):.1f} ms  p99 {pct(lat, 0.99):.1f} ms  (from when due; most queued at once {writes.behind})")  # fmt: skip
    lat = [ms for _, ms in recalls.latencies]
    if lat:
        print(f"recalls: {len(lat)} in {elapsed:.0f} s, errors {dict(recalls.errors) or 0}, "
              f"p50 {pct(lat, 0.5):.1f} ms  p99 {pct(lat, 0.99):.1f} ms")
    print(f"derivation caught up {result['catch_up']:.2f} s after the last write (POST /v1/admin/flush-views)")
    published = result["published"]
    stages = collections.Counter(stage for _, _, _, stage in published)
    print(f"lifecycle: {len(published)} records published after the anchor ({dict(stages)})")
    print("  sub  scope                     expected  received     lost  laggings  connects  disordered  other")
    lost_total = 0
    mismatched = 0
    for sub in subscribers:
        want, fingerprint = result["expected"][sub.number]
        lost = want - sub.count
        lost_total += max(lost, 0)
        same = sub.count == want and sub.fingerprint == fingerprint
        if sub.count == want and not same:
            mismatched += 1
        other = ",".join([f"{k.decode()}:{v}" for k, v in sub.other.items()]
                         + [f"ended {k}:{v}" for k, v in sub.ends.items()]) or "-"
        if sub.failure:
            other += f" ({sub.failure})"
        print(f"  {sub.number:3d}  {(sub.scope or '(firehose)'):24s}  {want:8d}  {sub.count:8d}  {lost:7d}  "
              f"{sub.laggings:8d}  {sub.connects:8d}  {sub.disordered:10d}  {other}")  # fmt: skip
    laggings = sum(s.laggings for s in subscribers)
    print(f"lost in total: {lost_total}; subscribers that got lagging: {sum(1 for s in subscribers if s.laggings)}; "
          f"same ids as published: {'yes' if not mismatched else f'NO ({mismatched} differ)'}")  # fmt: skip
    verifier = subscribers[0] if subscribers else None
    if verifier is not None and verifier.stages is not None:
        acknowledged = [w.encode() for w in writes.ids]
        seen = {stage: sum(1 for w in acknowledged if stage.encode() in verifier.stages.get(w, ())) for stage in STAGES}
        print(f"stages seen by the firehose subscriber for the {len(acknowledged)} acknowledged writes: "
              + ", ".join(f"{k} {v}" for k, v in seen.items()))
    chunks = sum(s.chunks for s in subscribers)
    print(f"SSE: {sum(s.count for s in subscribers)} records in {chunks} chunks "
          f"({sum(s.count for s in subscribers) / max(chunks, 1):.1f} records a chunk)")
    writes_done = max(len(writes.latencies), 1)
    print(f"server CPU per write (everything it did, fan-out included): {result['server_cpu'] / writes_done * 1000:.2f} ms")
    print(f"client CPU: {result['client_cpu']:.1f} s over {elapsed:.0f} s ({result['client_cpu'] / elapsed * 100:.0f} % of a core); "
          f"server CPU: {result['server_cpu']:.1f} s ({result['server_cpu'] / elapsed * 100:.0f} % of a core; the event loop's "
          f"thread {result['loop_cpu']:.1f} s, the other threads (LevelDB compaction, workers) the rest); "
          f"the server's event loop waited {result['server_waiting']:.1f} s for a core")  # fmt: skip
    print(f"target 0 lost and none lagging: {'met' if lost_total == 0 and laggings == 0 and not mismatched else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument("--writes-per-s", type=float, default=50.0)
    parser.add_argument("--recalls-per-s", type=float, default=5.0)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--backend", default="leveldb", choices=("leveldb", "memory"))
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--scopes", type=int, default=5, help="user scopes the writes spread over")
    parser.add_argument("--writers", type=int, default=8, help="keep-alive connections for the writes")
    parser.add_argument("--preset", default="on_prem_enterprise")
    parser.add_argument("--http-server", default="cortex", choices=("cortex", "hypercorn"))
    parser.add_argument("--resume", action="store_true", help="a subscriber that gets lagging reconnects with Last-Event-ID")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds the subscribers get to catch up at the end")
    parser.add_argument("--py-spy", metavar="FILE", help="profile the server with py-spy (raw collapsed stacks)")
    parser.add_argument("--probe", metavar="FILE", help="the server appends where its memory is to FILE "
                        "(mappings, malloc, bounded structures, lifecycle records by age, growing object types "
                        "and their holders: bench/soak_probe.py; it stops the server while it walks the heap)")
    parser.add_argument("--gc-stats", metavar="FILE", help="the server appends its cyclic collector's CPU per "
                        "generation and the objects it tracks to FILE every --sample-every seconds")
    parser.add_argument("--tracemalloc", metavar="FILE",
                        help="run the server under tracemalloc; it appends snapshot diffs to FILE")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="cortex-soak-")
    try:
        keys = os.path.join(root, "issuer")
        auth.keygen(keys)
        token = auth.mint(keys, sub=ACTOR, tenant=TENANT, ttl=24 * 3600)
        server = Server(args, root, keys)
        try:
            result = trio.run(soak, args, server, token)
        except BaseException:
            sys.stderr.write("".join(list(server.log)[-30:]))
            raise
        finally:
            code = server.stop()
        report(args, result)
        print(f"server exit status {code}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
