"""LoCoMo evidence recall through CortexDB (protocol: ../shared/bench-data/README.md).

    python bench/locomo.py [--data ../shared/bench-data/locomo-dev.json] [--embedder best|hash|minilm]
                           [--arms hybrid,bm25,vector] [--samples N] [--questions N]

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
import statistics
import sys
import time

import trio

# bench/http.py would shadow the stdlib package `http` for a script run from this directory
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

KS = (5, 10, 25, 50)
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
    return turns


async def ingest(engine, scope: str, turns: list[dict]) -> None:
    by_session: dict[str, list[dict]] = {}
    for turn in turns:
        by_session.setdefault(turn["session"], []).append(turn)
    for session, items in by_session.items():
        for start in range(0, len(items), 1000):
            chunk = items[start : start + 1000]
            await engine.experience_bulk({
                "scope": scope,
                "ordering": "strict_temporal",
                "items": [{
                    "observed_actor": {"id": f"user:{t['speaker']}", "session": session},
                    "modality": "conversation",
                    "content": {"kind": "message", "role": "user", "text": t["text"]},
                    "context": {"observed_at": t["observed_at"], "labels": [f"dia_id:{t['dia_id']}"]},
                    "idempotency_key": f"{scope}:{t['dia_id']}",
                } for t in chunk],
            })  # fmt: skip
    await engine.flush(scope, seal=True)


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


async def run(args, arms: list[str], samples: list[dict], embedder) -> dict[str, dict]:
    """Ingest every conversation once, then recall every question under each arm."""

    config = EngineConfig(recall_candidates=100, idle_timeout=3600)
    results = {
        arm: {"recalls": {k: {c: [] for c in CATEGORIES} for k in KS}, "latencies": []}
        for arm in arms
    }
    ingest_events, ingest_seconds = 0, 0.0
    async with cortexdb.open_engine("memory", config=config, embedder=embedder) as engine:
        scopes = []
        for sample in samples:
            scope = f"bench:{re.sub(r'[^A-Za-z0-9_-]', '_', sample['sample_id'])}"
            turns = turns_of(sample)
            started = time.perf_counter()
            await ingest(engine, scope, turns)
            ingest_seconds += time.perf_counter() - started
            ingest_events += len(turns)
            scopes.append((scope, sample))
        for arm in arms:
            engine.set_recall_mode(arm)  # the arm under test
            recalls, latencies = results[arm]["recalls"], results[arm]["latencies"]
            for scope, sample in scopes:
                questions = sample["qa"][: args.questions] if args.questions else sample["qa"]
                for qa in questions:
                    evidence = clean_evidence(qa.get("evidence"))
                    if not evidence:
                        continue
                    request = {
                        "scope": scope, "view": "granular", "traversal": "local", "query": qa["question"],
                        "include": ["events"], "budgets": {"per_layer_limits": {"events": max(KS)}},
                        "diagnostics": "none", "citation_mode": "none",
                    }  # fmt: skip
                    started = time.perf_counter()
                    pack = await engine.recall(request)
                    latencies.append((time.perf_counter() - started) * 1000)
                    ranked = turns_in_rank_order(pack)
                    for k in KS:
                        top = set(ranked[:k])
                        recalls[k][qa["category"]].append(
                            sum(1 for e in evidence if e in top) / len(evidence)
                        )
    for arm in arms:
        results[arm]["ingest_rate"] = ingest_events / ingest_seconds
        results[arm]["ingest_events"] = ingest_events
    return results


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
          f"ingest {result['ingest_rate']:,.0f} turns/s captured and derived ({result['ingest_events']} turns)")  # fmt: skip


async def main() -> None:
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
    args = parser.parse_args()
    with open(args.data) as handle:
        samples = json.load(handle)
    if args.samples:
        samples = samples[: args.samples]
    from cortexdb.engine.retrieve.embedders import by_name

    embedder = by_name(args.embedder)
    print(
        f"LoCoMo dev: {len(samples)} conversations, embedder {embedder.name}, cpu_count={os.cpu_count()}"
    )
    arms = args.arms.split(",")
    results = await run(args, arms, samples, embedder)
    for arm in arms:
        report(arm, results[arm])


if __name__ == "__main__":
    trio.run(main)
