"""Other clients' latency while one maximum-size experience consolidates.

    python bench/stall.py [--chars 1000000] [--clients 4] [--baseline 5] [--think-ms 50]
                          [--workers process|thread] [--embedded]

By default it starts `cortexdb serve` as a separate process (LevelDB data dir in a temp directory,
hash embedder, on_prem_enterprise with a signed PASETO token, the built-in HTTP server; as
bench/http.py does) and drives it over keep-alive connections (bench/loadgen.py).  ``--embedded``
runs the same load against an engine in this process instead (memory backend).
1. before: ``--clients`` clients, each in its own scope, alternate a small write
   (``POST /v1/experience``) and a recall (``POST /v1/recall``), ``--think-ms`` apart, for
   ``--baseline`` seconds;
2. during: one more client writes a ``--chars``-character document with ``wait=consolidated``
   (default 1,000,000 ASCII characters: the envelope's largest text, under the default
   ``max_event_text_bytes`` of 1 MiB) while the others go on; the phase ends when it answers.
   The document is paragraphs of sentences, many of them facts about distinct names (far more
   than ``max_derived_per_event``), with one planted sentence;
3. a recall with a 500-token budget asks for the planted sentence.
Printed: the other clients' p50 / p99 / max latency before and during (and for writes and recalls
apart), their ratios, the consolidation time, the RSS of the server and its derivation workers,
and what the budgeted recall returned.  Over HTTP, from the server's own log: the same requests'
p50 / p99 as the server timed them (its access log), and the task steps that held its event loop
``--slow-step-ms`` or more (``CORTEX_LOOP_SLOW_STEP_MS``, server/loopwatch.py) per phase, with
the longest: a loop held by one step shows there, while latency from sharing the cores does not.  Goal: p99 during < 100 ms.  ``--workers thread`` runs
derivation's CPU work in threads instead of worker processes (EngineConfig.derivation_workers);
to measure another checkout, run the script with that checkout as the working directory and
PYTHONPATH (the server starts with ``python -m``, which imports from the working directory).
The client and the server share the machine's cores; the VM is noisy, so compare a few runs.
"""

from __future__ import annotations

import os
import sys
import threading

# bench/http.py is named like the stdlib package `http`: drop this directory from the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import trio  # noqa: E402

sys.path.insert(0, os.path.join(_HERE, ".."))
import cortexdb  # noqa: E402

sys.path.insert(0, _HERE)  # bench/loadgen.py
import loadgen  # noqa: E402

del sys.path[0]
from cortexdb import EngineConfig  # noqa: E402
from cortexdb.server import auth  # noqa: E402

DOC_SCOPE = "org:stall/user:alice"
PLANTED = "The vault access code for the Zephyr project is 7421."
QUERY = "Zephyr project vault access code"
NAMES = ["Amber", "Basil", "Cedar", "Delta", "Ember", "Flint", "Grove", "Hazel", "Iris", "Jade",
         "Kestrel", "Linden", "Maple", "Nova", "Onyx", "Pine", "Quill", "Raven", "Sage", "Thorn"]  # fmt: skip


def document(chars: int) -> str:
    """Paragraphs of sentences, most of them facts about distinct people, the planted one at 60%."""
    parts, size, i = [], 0, 0
    planted = False
    while size < chars:
        a, b = NAMES[i % 20], NAMES[(i // 20) % 20]
        sentence = (f"{a} {b} {NAMES[(i // 400) % 20]} lives in {NAMES[(i * 7) % 20]} Town. "
                    f"The {a.lower()} report number {i} talks about the {b.lower()} garden. ")  # fmt: skip
        if not planted and size >= 0.6 * chars:
            sentence += PLANTED + " "
            planted = True
        if i % 6 == 5:
            sentence += "\n\n"
        parts.append(sentence)
        size += len(sentence)
        i += 1
    text = "".join(parts)[:chars]
    return text if planted else PLANTED + " " + text[: chars - len(PLANTED) - 1]


TURNS = ["We talked about the {w} roadmap for a while.", "The {w} meeting ran long but it went well.",
         "Can you remind me what we decided about the {w} budget?", "I finished reading the {w} report today.",
         "Let's move the {w} review to next week.", "My favorite {w} dish is the one with lentils."]  # fmt: skip


def small(client: int, i: int) -> dict:
    """A short conversation turn; a few of them state facts."""
    text = TURNS[(i // 2) % len(TURNS)].format(w=NAMES[(i // 12) % 20].lower())
    return {"scope": f"org:stall{client}/user:alice", "modality": "conversation",
            "content": {"kind": "message", "role": "user", "text": text},
            "context": {"observed_at": f"2026-05-01T{(i // 60) % 24:02d}:{i % 60:02d}:00Z"}}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Load:
    """Latencies of the other clients, tagged with the phase their request started in."""

    def __init__(self) -> None:
        self.phase = "before"
        self.latencies: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        self.by_kind: dict[tuple[str, str], list[float]] = {}  # (phase, write|recall) -> ms
        self.stop = False
        self.marks: dict[str, float] = {}  # phase -> when it began (time.time(), for the server's log)

    async def client(self, call, client: int, think: float) -> None:
        i = 0
        while not self.stop:
            phase = self.phase
            started = time.perf_counter()
            await call(client, i)
            elapsed = (time.perf_counter() - started) * 1000
            self.latencies[phase].append(elapsed)
            self.by_kind.setdefault((phase, "recall" if i % 2 else "write"), []).append(elapsed)
            i += 1
            await trio.sleep(think)


def rss_mb(pid: int) -> float:
    """Resident set size of a process and its children (Linux: the derivation worker processes
    count too), in MB; NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as status:
            total = next(int(e.split()[1]) for e in status if e.startswith("VmRSS:")) / 1024
        kids = []
        for task in os.listdir(f"/proc/{pid}/task"):  # a child belongs to the thread that forked it
            with open(f"/proc/{pid}/task/{task}/children") as children:
                kids += [int(child) for child in children.read().split()]
    except (OSError, StopIteration):
        return float("nan")
    return total + sum(rss_mb(kid) for kid in kids if kid)


async def run(load: Load, args, call, write_document, recall_budgeted, pid: int) -> dict:
    text = document(args.chars)
    async with trio.open_nursery() as nursery:
        for client in range(args.clients):
            nursery.start_soon(load.client, call, client, args.think_ms / 1000)
        await trio.sleep(args.baseline)
        rss_before = rss_mb(pid)
        load.marks["during"] = time.time()
        load.phase = "during"
        started = time.perf_counter()
        await write_document(text)
        consolidation = time.perf_counter() - started
        load.marks["after"] = time.time()
        load.phase = "after"
        load.stop = True
    rss_after = rss_mb(pid)
    found = await recall_budgeted()
    return {"consolidation": consolidation, "found": found, "bytes": len(text.encode()),
            "rss": (rss_before, rss_after)}  # fmt: skip


def budgeted_answer(pack: dict) -> dict:
    items = pack["layers"]["events"]
    knapsack = next(p for p in pack["provenance"]["trail"] if p["phase"] == "knapsack")
    hit = next((i for i in items if PLANTED in i.get("content", {}).get("text", "")), None)
    return {"found": hit is not None, "passage": hit.get("passage") if hit else None,
            "tokens": knapsack["tokens_used"], "items": sum(len(v) for v in pack["layers"].values())}  # fmt: skip


async def over_http(url: str, token: str, pid: int, args) -> tuple[Load, dict]:
    headers = {"Authorization": f"Bearer {token}", "X-Cortex-Actor": "user:alice"}
    connections = [await loadgen.Connection.open(url) for _ in range(args.clients)]
    load = Load()

    async def call(client: int, i: int) -> None:
        conn = connections[client]
        if i % 2 == 0:
            raw = conn.encode(
                "POST", "/v1/experience", json.dumps(small(client, i)).encode(), headers
            )
            expect = 202
        else:
            query = {
                "scope": f"org:stall{client}/user:alice",
                "query": "what did we decide about the budget",
            }
            raw = conn.encode("POST", "/v1/recall", json.dumps(query).encode(), headers)
            expect = 200
        status, body = await conn.request(raw)
        if status != expect:
            raise SystemExit(f"HTTP {status}: {body[:300]!r}")

    async def write_document(text: str) -> None:
        conn = await loadgen.Connection.open(url)
        body = {"scope": DOC_SCOPE, "modality": "document", "content": {"kind": "text", "text": text},
                "context": {"observed_at": "2026-05-01T12:00:00Z"}}  # fmt: skip
        status, answer = await conn.request(
            conn.encode(
                "POST", "/v1/experience?wait=consolidated", json.dumps(body).encode(), headers
            )
        )
        await conn.aclose()
        if status != 200:
            raise SystemExit(f"the document write answered HTTP {status}: {answer[:300]!r}")

    async def recall_budgeted() -> dict:
        conn = await loadgen.Connection.open(url)
        request = {"scope": DOC_SCOPE, "query": QUERY, "budgets": {"max_tokens": 500}}
        status, answer = await conn.request(
            conn.encode("POST", "/v1/recall", json.dumps(request).encode(), headers)
        )
        await conn.aclose()
        return budgeted_answer(json.loads(answer)) | {"pack_bytes": len(answer)}

    try:
        result = await run(load, args, call, write_document, recall_budgeted, pid)
    finally:
        for conn in connections:
            await conn.aclose()
    return load, result


async def embedded(args) -> tuple[Load, dict]:
    load = Load()
    config = EngineConfig(default_caller="user:alice", derivation_workers=args.workers)
    async with cortexdb.open_engine("memory", config=config) as engine:

        async def call(client: int, i: int) -> None:
            if i % 2 == 0:
                await engine.experience(small(client, i))
            else:
                await engine.recall(
                    {
                        "scope": f"org:stall{client}/user:alice",
                        "query": "what did we decide about the budget",
                    }
                )

        async def write_document(text: str) -> None:
            await engine.experience({"scope": DOC_SCOPE, "modality": "document", "content": {"kind": "text", "text": text},
                                     "context": {"observed_at": "2026-05-01T12:00:00Z"}}, wait="consolidated")  # fmt: skip

        async def recall_budgeted() -> dict:
            pack = await engine.recall(
                {"scope": DOC_SCOPE, "query": QUERY, "budgets": {"max_tokens": 500}}
            )
            return budgeted_answer(pack) | {"pack_bytes": len(json.dumps(pack))}

        result = await run(load, args, call, write_document, recall_budgeted, os.getpid())
    return load, result


SERVER_LOG: list[str] = []  # the server's log lines after "serving on"


def _drain(stream) -> None:
    """Keep reading the server's log (a full pipe would block it)."""
    for text in stream:
        SERVER_LOG.append(text)


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_STEP = re.compile(r"a step of task (\S+) held the event loop for ([\d.]+) ms \(([\d.]+) ms of CPU\)")


def _phase(when: float, marks: dict[str, float]) -> str:
    return "before" if when < marks.get("during", float("inf")) else "during" if when < marks.get("after", float("inf")) else "after"


def server_view(lines: list[str], marks: dict[str, float]) -> tuple[dict, dict]:
    """From the server's log: the other clients' requests as the server timed them (ms by phase
    their request began in; the document's own write, the one answered 200, left out), and the
    steps that held its loop (by phase: (ms, task, ms of CPU))."""
    timed: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    steps: dict[str, list[tuple[float, str, float]]] = {"before": [], "during": [], "after": []}
    for text in lines:
        stamp = _STAMP.match(text)
        if not stamp:
            continue
        when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        step = _STEP.search(text)
        if step:
            held = float(step.group(2))
            steps[_phase(when - held / 1000, marks)].append((held, step.group(1), float(step.group(3))))
        elif "cortexdb.access" in text and "{" in text:
            entry = json.loads(text[text.index("{"):])
            if entry.get("path") in ("/v1/experience", "/v1/recall") and entry.get("status") in (201, 202, 200):
                if entry["path"] == "/v1/experience" and entry["status"] == 200:
                    continue  # the document (wait=consolidated answers 200; the clients' writes 202)
                timed[_phase(when - entry["ms"] / 1000, marks)].append(entry["ms"])
    return timed, steps


def start_server(data: str, keys: str, workers: str, slow_step_ms: float) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "cortexdb.cli", "serve", "--data", data, "--bind", "127.0.0.1:0",
         "--preset", "on_prem_enterprise", "--issuer-keys", keys, "--tenant", "bench", "--operator", "user:alice",
         "--embedder", "hash"],
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "CORTEX_DERIVATION_WORKERS": workers,
             "CORTEX_LOOP_SLOW_STEP_MS": str(slow_step_ms)},
    )  # fmt: skip
    for line in process.stderr:
        match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if match:  # then keep draining its log (access lines): a full pipe would block the server
            threading.Thread(target=_drain, args=(process.stderr,), daemon=True).start()
            return process, match.group(1)
    raise SystemExit("the server did not start")


def line(name: str, values: list[float]) -> str:
    return (f"  {name}: {len(values):6d} requests   p50 {pct(values, 0.5):8.2f} ms   p99 {pct(values, 0.99):8.2f} ms   "
            f"max {max(values, default=float('nan')):8.2f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000, help="characters of the document")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--baseline", type=float, default=5.0, help="seconds of load before the document"
    )
    parser.add_argument(
        "--think-ms", type=float, default=50.0, help="pause between a client's requests"
    )
    parser.add_argument(
        "--embedded", action="store_true", help="an engine in this process, not the HTTP server"
    )
    parser.add_argument(
        "--workers",
        default="process",
        choices=("process", "thread"),
        help="where derivation's CPU work runs (EngineConfig.derivation_workers)",
    )
    parser.add_argument(
        "--slow-step-ms",
        type=float,
        default=20.0,
        help="over HTTP: report the server's task steps that held its loop this long (0: off)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]  # other work on the machine skews every figure here
    if args.embedded:
        load, result = trio.run(embedded, args)
        mode = "embedded engine (memory backend)"
    else:
        root = tempfile.mkdtemp(prefix="cortex-stall-bench-")
        try:
            keys = os.path.join(root, "issuer")
            auth.keygen(keys)
            token = auth.mint(keys, sub="user:alice", tenant="bench", ttl=3600)
            process, url = start_server(os.path.join(root, "data"), keys, args.workers, args.slow_step_ms)
            try:
                load, result = trio.run(over_http, url, token, process.pid, args)
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        mode = "HTTP (built-in server, LevelDB, separate process)"
    before, during = load.latencies["before"], load.latencies["during"]
    print(
        f"stall: {mode}, derivation in worker {args.workers}{'es' if args.workers == 'process' else 's'}, {args.clients} clients alternating a write and a recall, {args.think_ms:g} ms apart "
        f"(load average {load_before:.2f} on {os.cpu_count()} CPUs before the run)"
    )
    print(
        f"  document: {args.chars:,} characters ({result['bytes']:,} bytes), written with wait=consolidated"
    )
    print(line("before", before))
    print(line("during", during))
    for kind in ("write", "recall"):
        b, d = load.by_kind.get(("before", kind), []), load.by_kind.get(("during", kind), [])
        print(
            f"    {kind + 's:':8} p50 {pct(b, 0.5):.2f} -> {pct(d, 0.5):.2f} ms   p99 {pct(b, 0.99):.2f} -> {pct(d, 0.99):.2f} ms"
        )
    print(
        f"  ratio during/before: p50 x{pct(during, 0.5) / pct(before, 0.5):.2f}   "
        f"p99 x{pct(during, 0.99) / pct(before, 0.99):.2f}"
    )
    print(
        f"  consolidation: {result['consolidation']:.2f} s from the document's POST to its answer; "
        f"RSS {result['rss'][0]:.0f} -> {result['rss'][1]:.0f} MB (with worker processes)"
    )
    found = result["found"]
    where = (
        f"passage {found['passage']['index']} of {found['passage']['count']}"
        if found["passage"]
        else "no passage"
    )
    print(
        f"  recall with a 500-token budget: planted sentence {'found' if found['found'] else 'NOT found'} "
        f"({where}, {found['tokens']} tokens used, {found['items']} items, pack {result['found']['pack_bytes']:,} bytes)"
    )
    if not args.embedded:
        timed, steps = server_view(SERVER_LOG, load.marks)
        print(f"  as the server timed them (its access log): p50 {pct(timed['before'], 0.5):.2f} -> "
              f"{pct(timed['during'], 0.5):.2f} ms   p99 {pct(timed['before'], 0.99):.2f} -> {pct(timed['during'], 0.99):.2f} ms "
              f"({len(timed['before'])} and {len(timed['during'])} requests)")  # fmt: skip
        if args.slow_step_ms > 0:
            for phase in ("before", "during"):
                held = steps[phase]
                longest = max(held, default=(0.0, "-", 0.0))
                print(f"  event loop {phase}: {len(held)} task steps held it >= {args.slow_step_ms:g} ms, "
                      f"{sum(h for h, _, _ in held):.0f} ms in all ({sum(c for _, _, c in held):.0f} ms of its CPU); "
                      f"longest {longest[0]:.1f} ms ({longest[2]:.1f} of CPU; {longest[1]})")  # fmt: skip
    p99 = pct(during, 0.99)
    print(f"goal p99 during < 100 ms: {'met' if p99 < 100 else 'NOT met'} ({p99:.2f} ms)")


if __name__ == "__main__":
    main()
