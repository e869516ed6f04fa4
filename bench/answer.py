"""Answers on LoCoMo (dev split), the baseline for model-backed runs: ``POST /v1/answer``'s engine
path (``Engine.answer``) with the deployment's answer model — by default the offline extractive
answerer.

    python bench/answer.py [--data ../shared/bench-data/locomo-dev.json] [--embedder best|hash|minilm]
                           [--samples N] [--questions N] [--model ID]
                           [--llm-base-url URL --llm-model ID]   # an openai_compatible model instead

Ingest follows bench/locomo.py (one scope per conversation, one event per turn, ``dia_id`` in the
event's labels; protocol: ../shared/bench-data/README.md).  Every question of categories 1-4 with
clean evidence is asked with its raw text in its conversation's scope (default answer request:
holistic view, default budgets, ``citation_mode`` inline).  Per question:

- **answer cites gold evidence** (the headline rate): the answer cites at least one of the
  question's gold evidence turns — a citation whose id is the event of a gold turn (``direct``),
  or a citation of a fact, belief or episode whose provenance (``provenance.citations`` followed
  down to events) reaches a gold turn (``via provenance``, which includes direct).  A question is
  counted once however many gold turns it cites;
- **pack holds gold evidence**: the answer's pack (``pack_id``, fetched within its 60 s) holds a
  gold turn among its events, or an item whose provenance reaches one — the ceiling for any
  answerer reading that pack;
- **supported**: the answer cites anything at all (``supported: true``);
- **gold answer tokens**: the share of the gold answer's words (lower-cased alphanumeric runs)
  found in the answer text, averaged — a text-level figure that needs no judge (an extractive
  answer quotes turns, so it is an indication, not a score).

Latency: p50/p95 of ``diagnostics.recall_ms``, ``diagnostics.llm_ms`` and the whole call.  Numbers
are per category and over 1-4.
"""

from __future__ import annotations

import argparse
import importlib.util
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

_spec = importlib.util.spec_from_file_location("bench_locomo", os.path.join(_HERE, "locomo.py"))
locomo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(locomo)

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_WORD = re.compile(r"[a-z0-9]+")
FIGURES = ("cites_direct", "cites", "pack", "supported", "tokens")


async def dia_ids(engine, scope: str) -> dict[str, str]:
    """Event id -> dia_id for every turn of a scope."""
    out, cursor = {}, None
    while True:
        page = await engine.events(scope, limit=1000, cursor=cursor)
        for event in page["items"]:
            for label in event["context"].get("labels", []):
                if label.startswith("dia_id:"):
                    out[event["id"]] = label[7:]
        if not page["has_more"]:
            return out
        cursor = page["next_cursor"]


def turns_reached(ids: list[str], dag: dict[str, list[str]], turns: dict[str, str]) -> set[str]:
    """The dia_ids of the events ``ids`` are or rest on (``provenance.citations`` followed down)."""
    seen, pending, out = set(), list(ids), set()
    while pending:
        record = pending.pop()
        if record in seen:
            continue
        seen.add(record)
        if record in turns:
            out.add(turns[record])
        pending += dag.get(record, [])
    return out


def token_share(gold: object, text: str) -> float:
    words = set(_WORD.findall(str(gold).lower()))
    return len(words & set(_WORD.findall(text.lower()))) / len(words) if words else 0.0


async def ask(engine, scope: str, qa: dict, turns: dict[str, str], evidence: list[str], model: str | None) -> dict:
    request = {"scope": scope, "question": qa["question"], "diagnostics": "summary"}
    if model:
        request["answer_model"] = model
    started = time.perf_counter()
    answer = await engine.answer(request)
    total_ms = (time.perf_counter() - started) * 1000
    pack = engine.get_pack(answer["pack_id"])
    dag = answer["provenance"]["citations"]
    gold = set(evidence)
    cited = [c["id"] for c in answer["citations"]]
    in_pack = [item["id"] for items in pack["layers"].values() for item in items]
    return {
        "cites_direct": bool(gold & {turns[i] for i in cited if i in turns}),
        "cites": bool(gold & turns_reached(cited, dag, turns)),
        "pack": bool(gold & turns_reached(in_pack, dag, turns)),
        "supported": answer["supported"],
        "tokens": token_share(qa.get("answer"), answer["answer"]),
        "recall_ms": answer["diagnostics"]["recall_ms"], "llm_ms": answer["diagnostics"]["llm_ms"],
        "total_ms": total_ms, "model": answer["diagnostics"]["answer_model"],
    }  # fmt: skip


async def run(args, samples: list[dict], embedder, llm) -> tuple[list[tuple[int, dict]], float]:
    config = EngineConfig(recall_candidates=100, idle_timeout=3600)
    results: list[tuple[int, dict]] = []
    ingest_seconds = 0.0
    async with cortexdb.open_engine("memory", config=config, embedder=embedder, llm=llm) as engine:
        for sample in samples:
            scope = f"bench:{re.sub(r'[^A-Za-z0-9_-]', '_', sample['sample_id'])}"
            started = time.perf_counter()
            await locomo.ingest(engine, scope, locomo.turns_of(sample))
            ingest_seconds += time.perf_counter() - started
            turns = await dia_ids(engine, scope)
            questions = sample["qa"][: args.questions] if args.questions else sample["qa"]
            for qa in questions:
                evidence = locomo.clean_evidence(qa.get("evidence"))
                if qa["category"] in CATEGORIES and evidence:
                    results.append((qa["category"], await ask(engine, scope, qa, turns, evidence, args.model)))
    return results, ingest_seconds


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def report(results: list[tuple[int, dict]]) -> None:
    print("\nper category (%): answer cites gold evidence (direct | via provenance), pack holds gold evidence, "
          "supported, gold answer tokens")  # fmt: skip
    header = "category".ljust(22) + "".join(name.rjust(10) for name in ("direct", "cites", "pack", "supported", "tokens"))
    print(header)
    rows = [(f"{c} {name}", [r for cat, r in results if cat == c]) for c, name in CATEGORIES.items()]
    for label, rows_of in [*rows, ("1-4", [r for _, r in results])]:
        if rows_of:
            figures = [100 * statistics.fmean(float(r[f]) for r in rows_of) for f in FIGURES]
            print(f"{label} [{len(rows_of)}]".ljust(22) + "".join(f"{v:10.1f}" for v in figures))
    every = [r for _, r in results]
    if not every:
        print("no questions with evidence in this slice")
        return
    cites, pack = (statistics.fmean(float(r[f]) for r in every) for f in ("cites", "pack"))
    share = f"{100 * cites / pack:.1f}%" if pack else "n/a"
    print(f"\nanswer cites gold evidence (via provenance) {100 * cites:.1f}% of {len(every)} questions; the pack "
          f"holds it for {100 * pack:.1f}%: the answerer cites it in {share} of the packs that hold it")  # fmt: skip
    for name in ("recall_ms", "llm_ms", "total_ms"):
        values = [r[name] for r in every]
        print(f"{name:>9}: p50 {statistics.median(values):8.2f} ms   p95 {pct(values, 0.95):8.2f} ms")
    recall_p50, llm_p50 = (statistics.median([r[n] for r in every]) for n in ("recall_ms", "llm_ms"))
    print(f"llm / recall at p50: {llm_p50 / recall_p50:.3f} (answer model: {every[0]['model']})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=locomo.DEFAULT_DATA)
    parser.add_argument("--embedder", default="best", choices=["best", "hash", "minilm"])
    parser.add_argument("--samples", type=int, default=0, help="use only the first N conversations")
    parser.add_argument("--questions", type=int, default=0, help="use only the first N questions of each")
    parser.add_argument("--model", help="answer_model of every request (default: the deployment's)")
    parser.add_argument("--llm-base-url", help="an openai_compatible endpoint (key: $CORTEX_LLM_API_KEY)")
    parser.add_argument("--llm-model", help="the model at --llm-base-url")
    args = parser.parse_args()
    with open(args.data) as handle:
        samples = json.load(handle)
    if args.samples:
        samples = samples[: args.samples]
    from cortexdb.engine.llm import OpenAICompatibleLLM
    from cortexdb.engine.retrieve.embedders import by_name

    embedder = by_name(args.embedder)
    llm = None
    if args.llm_base_url:
        llm = OpenAICompatibleLLM(base_url=args.llm_base_url, model=args.llm_model or "",
                                  api_key=os.environ.get("CORTEX_LLM_API_KEY"))  # fmt: skip
    print(f"LoCoMo dev answers: {len(samples)} conversations, embedder {embedder.name}, cpu_count={os.cpu_count()}")
    results, ingest_seconds = await run(args, samples, embedder, llm)
    print(f"ingest {ingest_seconds:.1f} s; {len(results)} questions (categories 1-4 with evidence)")
    report(results)


if __name__ == "__main__":
    trio.run(main)
