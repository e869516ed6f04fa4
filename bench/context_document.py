"""The context document's cost: recall with ``format: "xml"`` against the same recall as text.

    python bench/context_document.py [--events 5000] [--queries 200] [--max-tokens 2000]

N synthetic conversational events (bench/recall.py's generator) in one scope on the memory
backend, fully derived; then ``--queries`` recalls, each asked twice in alternation — the plain
text context block (the baseline, measured in the same run) and the ``<cortex-context>``
document — under the same token budget.  Prints p50 / p95 of each, the ratio of the p50s, the
mean rendered size of each, and how many items each kept (the document spends more of the budget
on markup, so it keeps fewer).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, _HERE)

from recall import QUERIES, load, text  # noqa: E402  (bench/recall.py)

import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

SCOPE = "org:bench/user:ada"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    config = EngineConfig(default_caller="user:ada", episode_idle_check=3600.0)
    async with cortexdb.open_engine("memory", config=config, id_seed=7) as engine:
        started = time.perf_counter()
        await load(engine, SCOPE, rng, args.events)
        print(f"loaded {args.events} events in {time.perf_counter() - started:.1f} s")
        timings: dict[str, list[float]] = {"text": [], "xml": []}
        sizes: dict[str, list[int]] = {"text": [], "xml": []}
        kept: dict[str, list[int]] = {"text": [], "xml": []}
        budgets = {"max_tokens": args.max_tokens}
        for i in range(args.queries):
            query = text(rng, QUERIES[i % len(QUERIES)])
            for form in ("text", "xml") if i % 2 else ("xml", "text"):
                request = {"scope": SCOPE, "query": query, "budgets": budgets, "format": form}
                t = time.perf_counter()
                pack = await engine.recall(request)
                timings[form].append((time.perf_counter() - t) * 1000)
                sizes[form].append(len(pack["context_block"]))
                kept[form].append(sum(len(items) for items in pack["layers"].values()))
        for form in ("text", "xml"):
            print(f"{form:>4}: p50 {statistics.median(timings[form]):.2f} ms, p95 {pct(timings[form], 0.95):.2f} ms, "
                  f"{statistics.mean(sizes[form]):.0f} chars, {statistics.mean(kept[form]):.1f} items kept")  # fmt: skip
        ratio = statistics.median(timings["xml"]) / statistics.median(timings["text"])
        print(f"xml / text p50: {ratio:.2f}x  (budget {args.max_tokens} tokens, {args.queries} queries each)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=2000)
    trio.run(main, parser.parse_args())
