"""LoCoMo evidence recall through CortexDB (protocol: ../shared/bench-data/README.md).

    python bench/locomo.py [--data ../shared/bench-data/locomo-dev.json] [--embedder best|hash|minilm]
                           [--arms hybrid,bm25,vector] [--samples N] [--questions N]
                           [--http] [--single] [--paths bulk,single,http] [--no-session]
                           [--turn-context pooled|joint|none] [--ingest-only] [--turns N]
                           [--vector-cache PATH] [--set NAME=VALUE ...]

Write paths (``--paths``; ``--http`` is ``--paths bulk,http`` and ``--single`` adds ``single``):
``bulk`` (the default) ingests with the embedded bulk API and ``flush(seal=True)``; ``single``
writes turn by turn with the embedded ``experience(wait="indexed")``; ``http`` starts a real
``cortexdb serve`` (memory backend, a fresh data dir, 127.0.0.1:0, ``dev_local`` preset), writes
each turn with ``POST /v1/experience?wait=indexed`` and recalls with ``POST /v1/recall``.  Each
path reports its own figures, then a side-by-side table of recall@10 per category.  The HTTP path
runs the hybrid arm only (the arm is an engine setting, not a request field).  ``--no-session``
writes the turns without ``observed_actor.session`` (a caller who names none);
``--turn-context`` sets ``EngineConfig.turn_context`` of the embedded paths; ``--ingest-only``
reports ingest (turns/s and CPU ms per turn) without recall.  ``--vector-cache PATH`` keeps every
text's vector in a file (bench/vector_cache.py: the same vectors, each text encoded once across
runs), so a run after the first costs derivation and recall only; ``--set NAME=VALUE`` (repeatable)
sets an ``EngineConfig`` field of the embedded paths (a recall setting under test).

1. One scope per conversation; each turn is one event (observed_at = the session's date plus the
   turn's position in seconds; observed_actor = the speaker, session = the session number;
   ``dia_id`` kept in ``context.labels``).  Ingested with the bulk API in strict temporal order;
   the pipeline derives its layers.
2. Each question is recalled with its raw text in that conversation's scope (``include: events``,
   so every ranked item is one turn and composite items cannot inflate recall).
3. Returned items map back to turns in rank order until k turns are filled.
4. Evidence recall@{5,10,25,50} per category and over categories 1-4, per arm (BM25 only, vector
   only, hybrid), p50/p95 recall latency, and ingest throughput (capture + full derivation).
Published reference (full LoCoMo, turn-level): DRAGON dense retriever 58.8 @5, 67.5 @10, 79.9 @25,
84.8 @50; plain BM25 about 45.9 @5, 53.8 @10.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import trio

# bench/http.py would shadow the stdlib package `http` for a script run from this directory
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
ROOT = os.path.abspath(os.path.join(_HERE, ".."))
sys.path.insert(0, ROOT)

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

KS = (5, 10, 20, 25, 50)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEFAULT_DATA = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "bench-data", "locomo-dev.json"
)
_DIA = re.compile(r"^D(\d+):(\d+)$")


def parse_session_date(text: str) -> dt.datetime:
    """'1:56 pm on 8 May, 2023' -> aware UTC datetime."""
    return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def clean_evidence(evidence: list[str]) -> list[str]:
    """Split on ';' and spaces, fix 'D:', strip leading zeros, drop what remains invalid."""
    out = []
    for entry in evidence or []:
        for piece in re.split(r"[;\s]+", str(entry)):
            piece = piece.strip().replace("D:", "D")
            match = _DIA.match(piece)
            if match:
                out.append(f"D{int(match[1])}:{int(match[2])}")
    return list(dict.fromkeys(out))


def turns_of(sample: dict) -> list[dict]:
    conversation = sample["conversation"]
    turns = []
    session = 1
    while f"session_{session}" in conversation:
        start = parse_session_date(conversation[f"session_{session}_date_time"])
        for position, turn in enumerate(conversation[f"session_{session}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo of {turn['blip_caption']}]"
            speaker = re.sub(r"[^a-z0-9_]+", "_", turn["speaker"].lower()).strip("_") or "speaker"
            turns.append({
                "dia_id": turn["dia_id"], "speaker": speaker, "session": str(session), "text": text,
                "observed_at": (start + dt.timedelta(seconds=position)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            })  # fmt: skip
        session += 1
    return turns[:TURNS] if TURNS else turns


NAME_SESSIONS = True  # --no-session: write turns as a caller who does not name sessions
TURNS = 0  # --turns: only the first N turns of each conversation (a smoke run)


def envelope(scope: str, turn: dict) -> dict:
    """One turn as an experience (the protocol's step 1)."""
    actor = {"id": f"user:{turn['speaker']}", "session": turn["session"]}
    if not NAME_SESSIONS:
        del actor["session"]
    return {
        "scope": scope,
        "observed_actor": actor,
        "modality": "conversation",
        "content": {"kind": "message", "role": "user", "text": turn["text"]},
        "context": {"observed_at": turn["observed_at"], "labels": [f"dia_id:{turn['dia_id']}"]},
        "idempotency_key": f"{scope}:{turn['dia_id']}",
    }  # fmt: skip


async def ingest(engine, scope: str, turns: list[dict]) -> None:
    """The bulk path: one strict-temporal bulk call per session (at most 1000 turns each), then
    ``flush(seal=True)``."""
    by_session: dict[str, list[dict]] = {}
    for turn in turns:
        by_session.setdefault(turn["session"], []).append(turn)
    for items in by_session.values():
        for start in range(0, len(items), 1000):
            chunk = items[start : start + 1000]
            await engine.experience_bulk({
                "scope": scope, "ordering": "strict_temporal",
                "items": [{k: v for k, v in envelope(scope, t).items() if k != "scope"} for t in chunk],
            })  # fmt: skip
    await engine.flush(scope, seal=True)


async def ingest_single(engine, scope: str, turns: list[dict]) -> None:
    """The single-write path: each turn alone, ``wait="indexed"``, no flush."""
    for turn in turns:
        await engine.experience(envelope(scope, turn), wait="indexed")


def turns_in_rank_order(pack: dict) -> list[str]:
    """Map ranked items back to dia_ids, in rank order (events carry their dia_id label)."""
    items = sorted(
        (i for layer in pack["layers"].values() for i in layer), key=lambda i: -i["score"]
    )
    out: list[str] = []
    for item in items:
        for label in item.get("context", {}).get("labels", []):
            if label.startswith("dia_id:") and label[7:] not in out:
                out.append(label[7:])
    return out


def scope_of(sample: dict) -> str:
    return f"project:locomo-{re.sub(r'[^A-Za-z0-9_-]', '_', sample['sample_id'])}"


def recall_request(scope: str, question: str) -> dict:
    return {
        "scope": scope, "view": "granular", "traversal": "local", "query": question,
        "include": ["events"], "budgets": {"per_layer_limits": {"events": max(KS)}},
        "diagnostics": "none", "citation_mode": "none",
    }  # fmt: skip


def new_result() -> dict:
    return {"recalls": {k: {c: [] for c in CATEGORIES} for k in KS}, "latencies": [], "ranked": {}}


def questions_of(args, sample: dict):
    """(question index, qa, cleaned evidence) of every question with evidence."""
    questions = sample["qa"][: args.questions] if args.questions else sample["qa"]
    for number, qa in enumerate(questions):
        evidence = clean_evidence(qa.get("evidence"))
        if evidence:
            yield number, qa, evidence


def score(result: dict, key: tuple, qa: dict, evidence: list[str], ranked: list[str], ms: float) -> None:
    result["latencies"].append(ms)
    result["ranked"][key] = ranked[: max(KS)]
    for k in KS:
        top = set(ranked[:k])
        result["recalls"][k][qa["category"]].append(sum(1 for e in evidence if e in top) / len(evidence))


async def run(args, arms: list[str], samples: list[dict], embedder, path: str) -> dict[str, dict]:
    """Ingest every conversation once (``path``: bulk or single), then recall every question under
    each arm."""

    config = EngineConfig(recall_candidates=100, idle_timeout=3600,
                          **({"turn_context": args.turn_context} if args.turn_context else {}),
                          **settings(args.set))
    results = {arm: new_result() for arm in arms}
    ingest_events, ingest_seconds, ingest_cpu = 0, 0.0, 0.0
    write = ingest if path == "bulk" else ingest_single
    async with cortexdb.open_engine("memory", config=config, embedder=embedder) as engine:
        scopes = []
        for sample in samples:
            scope = scope_of(sample)
            turns = turns_of(sample)
            started, cpu = time.perf_counter(), time.process_time()
            await write(engine, scope, turns)
            ingest_seconds += time.perf_counter() - started
            ingest_cpu += time.process_time() - cpu  # every thread's (the embedder's too)
            ingest_events += len(turns)
            scopes.append((scope, sample))
        for arm in arms if not args.ingest_only else ():
            engine.set_recall_mode(arm)  # the arm under test
            for scope, sample in scopes:
                for number, qa, evidence in questions_of(args, sample):
                    started = time.perf_counter()
                    pack = await engine.recall(recall_request(scope, qa["question"]))
                    ms = (time.perf_counter() - started) * 1000
                    score(results[arm], (scope, number), qa, evidence, turns_in_rank_order(pack), ms)
    for arm in arms:
        results[arm]["ingest_rate"] = ingest_events / ingest_seconds
        results[arm]["ingest_events"] = ingest_events
        results[arm]["ingest_cpu_ms"] = 1000 * ingest_cpu / ingest_events
    return results


def run_http(args, samples: list[dict], embedder_name: str) -> dict:
    """The user's path: a real ``cortexdb serve`` (memory backend, fresh data dir), one
    ``POST /v1/experience?wait=indexed`` per turn, ``POST /v1/recall`` per question."""
    import httpx

    result = new_result()
    root = tempfile.mkdtemp(prefix="cortex-locomo-")
    command = [sys.executable, "-m", "cortexdb.cli", "serve", "--data", os.path.join(root, "data"),
               "--backend", "memory", "--bind", "127.0.0.1:0", "--preset", "dev_local",
               "--embedder", embedder_name, "--access-log", "off"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    log: list[str] = []
    try:
        assert process.stderr is not None
        url = ""
        for line in process.stderr:
            log.append(line)
            match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
            if match:
                url = match.group(1)
                break
        if not url:
            raise SystemExit("the server did not start:\n" + "".join(log[-30:]))
        threading.Thread(target=lambda: [log.append(x) for x in process.stderr], daemon=True).start()
        headers = {"X-Cortex-Actor": "user:locomo"}
        # the client's request head and body leave in two sends: without TCP_NODELAY each write
        # would wait ~40 ms for the server's delayed ACK
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        with httpx.Client(base_url=url, headers=headers, timeout=120, transport=transport) as client:
            ingest_events, ingest_seconds = 0, 0.0
            for sample in samples:
                scope = scope_of(sample)
                started = time.perf_counter()
                for turn in turns_of(sample):
                    reply = client.post("/v1/experience", params={"wait": "indexed"}, json=envelope(scope, turn))
                    if reply.status_code != 200:
                        raise SystemExit(f"write failed: {reply.status_code} {reply.text}")
                    ingest_events += 1
                ingest_seconds += time.perf_counter() - started
            for sample in samples:
                scope = scope_of(sample)
                for number, qa, evidence in questions_of(args, sample):
                    started = time.perf_counter()
                    reply = client.post("/v1/recall", json=recall_request(scope, qa["question"]))
                    ms = (time.perf_counter() - started) * 1000
                    if reply.status_code != 200:
                        raise SystemExit(f"recall failed: {reply.status_code} {reply.text}")
                    score(result, (scope, number), qa, evidence, turns_in_rank_order(reply.json()), ms)
        result["ingest_rate"] = ingest_events / ingest_seconds
        result["ingest_events"] = ingest_events
        return result
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


def mean(values: list[float]) -> float:
    return 100.0 * sum(values) / len(values) if values else float("nan")


def report(arm: str, result: dict) -> None:
    recalls = result["recalls"]
    print(f"\n[{arm}] evidence recall@k (%), questions per category in brackets")
    header = "category".ljust(24) + "".join(f"@{k}".rjust(8) for k in KS)
    print(header)
    for category, name in CATEGORIES.items():
        count = len(recalls[KS[0]][category])
        if count:
            row = f"{category} {name} [{count}]".ljust(24)
            print(row + "".join(f"{mean(recalls[k][category]):8.1f}" for k in KS))
    pooled = {k: [v for c in (1, 2, 3, 4) for v in recalls[k][c]] for k in KS}
    print(f"1-4 [{len(pooled[KS[0]])}]".ljust(24) + "".join(f"{mean(pooled[k]):8.1f}" for k in KS))
    latencies = result["latencies"]
    print(f"recall latency p50 {statistics.median(latencies):.1f} ms, p95 {sorted(latencies)[int(0.95 * len(latencies))]:.1f} ms; "
          f"ingest {result['ingest_rate']:,.1f} turns/s captured and derived ({result['ingest_events']} turns)"
          + (f", {result['ingest_cpu_ms']:.1f} ms CPU per turn" if "ingest_cpu_ms" in result else ""))  # fmt: skip


def side_by_side(results: dict[str, dict]) -> None:
    """Recall@10 per category, one column per write path (hybrid arm), and how many questions'
    top 10 differ from the first path's."""
    names = list(results)
    print("\nrecall@10 (%) by write path, hybrid arm")
    print("category".ljust(24) + "".join(name.rjust(10) for name in names))
    for category, label in CATEGORIES.items():
        values = [results[n]["recalls"][10][category] for n in names]
        if values[0]:
            print(f"{category} {label}".ljust(24) + "".join(f"{mean(v):10.1f}" for v in values))
    pooled = [[v for c in (1, 2, 3, 4) for v in results[n]["recalls"][10][c]] for n in names]
    print("1-4".ljust(24) + "".join(f"{mean(v):10.1f}" for v in pooled))
    print("ingest turns/s".ljust(24) + "".join(f"{results[n]['ingest_rate']:10.1f}" for n in names))
    first = results[names[0]]["ranked"]
    for name in names[1:]:
        other = results[name]["ranked"]
        differ = sum(1 for key in first if set(first[key][:10]) != set(other.get(key, [])[:10]))
        print(f"questions whose top-10 turns differ, {names[0]} vs {name}: {differ} of {len(first)}")


def settings(pairs: list[str]) -> dict:
    """``--set NAME=VALUE`` pairs as EngineConfig fields (the value read as JSON, else a string)."""
    out = {}
    for pair in pairs or ():
        name, _, value = pair.partition("=")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def samples_and_embedder(args: argparse.Namespace) -> tuple[list, object]:
    """The first ``--samples`` conversations of ``--data`` and the ``--embedder``, through
    ``--vector-cache`` when one is given (also bench/locomo_ab.py's)."""
    with open(args.data) as handle:
        samples = json.load(handle)
    if args.samples:
        samples = samples[: args.samples]
    from cortexdb.engine.retrieve.embedders import by_name

    embedder = by_name(args.embedder)
    if args.vector_cache:
        import importlib.util

        spec = importlib.util.spec_from_file_location("vector_cache", os.path.join(_HERE, "vector_cache.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        embedder = module.CachedEmbedder(embedder, args.vector_cache)
    return samples, embedder


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--embedder", default="best", choices=["best", "hash", "minilm"])
    parser.add_argument("--arms", default="hybrid,bm25,vector")
    parser.add_argument("--samples", type=int, default=0, help="use only the first N conversations")
    parser.add_argument(
        "--questions", type=int, default=0, help="use only the first N questions of each"
    )
    parser.add_argument("--paths", default="bulk", help="write paths: bulk, single, http (comma-separated)")
    parser.add_argument("--http", action="store_true", help="also the HTTP path (--paths bulk,http)")
    parser.add_argument("--single", action="store_true", help="also embedded single writes")
    parser.add_argument("--turn-context", choices=["pooled", "joint", "none"],
                        help="EngineConfig.turn_context of the embedded paths (default: its default)")
    parser.add_argument("--turns", type=int, default=0, help="use only the first N turns of each")
    parser.add_argument("--ingest-only", action="store_true", help="embedded paths: ingest, no recall")
    parser.add_argument("--no-session", action="store_true",
                        help="write turns without observed_actor.session (a caller who names none)")
    parser.add_argument("--vector-cache", default="", help="a .npz file of vectors reused across runs")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an EngineConfig field of the embedded paths (repeatable)")
    args = parser.parse_args()
    global NAME_SESSIONS, TURNS
    NAME_SESSIONS, TURNS = not args.no_session, args.turns
    paths = args.paths.split(",")
    for flag, name in ((args.single, "single"), (args.http, "http")):
        if flag and name not in paths:
            paths.append(name)
    unknown = set(paths) - {"bulk", "single", "http"}
    if unknown:
        parser.error(f"unknown write path(s): {sorted(unknown)}")
    samples, embedder = samples_and_embedder(args)
    print(f"LoCoMo dev: {len(samples)} conversations, embedder {embedder.name}, "
          f"cpu_count={os.cpu_count()}, load average {load_average()}")  # fmt: skip
    arms = args.arms.split(",")
    hybrid: dict[str, dict] = {}
    for path in paths:
        if path == "http":
            hybrid[path] = run_http(args, samples, args.embedder)
            report("hybrid, http", hybrid[path])
        else:
            results = trio.run(run, args, arms, samples, embedder, path)
            if args.ingest_only:
                result = results[arms[0]]
                print(f"[{path}] ingest {result['ingest_rate']:.1f} turns/s captured and derived, "
                      f"{result['ingest_cpu_ms']:.1f} ms CPU per turn ({result['ingest_events']} turns)")  # fmt: skip
                continue
            for arm in arms:
                report(arm if path == "bulk" else f"{arm}, {path}", results[arm])
            if "hybrid" in results:
                hybrid[path] = results["hybrid"]
        print(f"(load average after the {path} path: {load_average()})")
    if len(hybrid) > 1:
        side_by_side(hybrid)
    if args.vector_cache:
        embedder.save()
        print(f"vector cache {args.vector_cache}: {embedder.hits} hits, {embedder.misses} texts encoded")


if __name__ == "__main__":
    main()
