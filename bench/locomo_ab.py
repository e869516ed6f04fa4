"""LoCoMo recall settings side by side over one ingest (the hybrid arm, the bulk path).

    python bench/locomo_ab.py --variant base: --variant wide:recall_pool_events=300 \\
                              [--variant NAME:FIELD=VALUE,FIELD=VALUE ...] [--samples N]
                              [--embedder best|hash|minilm] [--vector-cache PATH] [--set NAME=VALUE]

Every conversation is ingested once (bench/locomo.py's protocol and helpers), then each question
is recalled under every variant in turn — the variants interleaved question by question, so load
changes during the run fall on all of them alike.  A variant is a name and the ``EngineConfig``
recall settings it changes (``--set`` applies to the ingest and to every variant).  Printed per
variant: evidence recall@5/10/20 per category and over categories 1-4, R@10 over 1-4 per
conversation, and the recall's CPU time per question (process time, median and mean; all
threads) with its ratio to the first variant.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import attrs
import trio

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.abspath(os.path.join(_HERE, "..")))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


locomo = _load("locomo")
import cortexdb  # noqa: E402
from cortexdb import EngineConfig  # noqa: E402

KS = (5, 10, 20)


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, rest = text.partition(":")
    return name, locomo.settings([p for p in rest.split(",") if p])


async def run(args, samples: list[dict], embedder, variants: list[tuple[str, dict]]) -> dict:
    config = EngineConfig(recall_candidates=100, idle_timeout=3600, **locomo.settings(args.set))
    for _, changes in variants:  # a misspelt field fails before the ingest
        attrs.evolve(config, **changes)
    out = {name: {"recall": {k: {} for k in KS}, "conv": {}, "cpu": []} for name, _ in variants}
    async with cortexdb.open_engine("memory", config=config, embedder=embedder) as engine:
        base = engine._ctx.config
        scopes = []
        for sample in samples:
            scope = locomo.scope_of(sample)
            await locomo.ingest(engine, scope, locomo.turns_of(sample))
            scopes.append((scope, sample))
        print(f"ingested; load average {locomo.load_average()}", flush=True)
        for scope, sample in scopes:
            for _number, qa, evidence in locomo.questions_of(args, sample):
                for name, changes in variants:
                    engine.config = engine._ctx.config = attrs.evolve(base, **changes)
                    cpu = time.process_time()
                    pack = await engine.recall(locomo.recall_request(scope, qa["question"]))
                    result = out[name]
                    result["cpu"].append(1000 * (time.process_time() - cpu))
                    ranked = locomo.turns_in_rank_order(pack)
                    for k in KS:
                        top = set(ranked[:k])
                        value = sum(1 for e in evidence if e in top) / len(evidence)
                        result["recall"][k].setdefault(qa["category"], []).append(value)
                        if k == 10 and qa["category"] in (1, 2, 3, 4):
                            result["conv"].setdefault(sample["sample_id"], []).append(value)
        engine.config = engine._ctx.config = base
    return out


def report(out: dict) -> None:
    mean = locomo.mean
    names = list(out)
    print("\nevidence recall@5 / @10 / @20 (%) per category; one column per variant")
    print("category".ljust(22) + "".join(n[:22].rjust(24) for n in names))
    for category, label in locomo.CATEGORIES.items():
        count = len(out[names[0]]["recall"][10].get(category, []))
        if not count:
            continue
        cells = [" / ".join(f"{mean(out[n]['recall'][k][category]):.1f}" for k in KS) for n in names]
        print(f"{category} {label} [{count}]".ljust(22) + "".join(c.rjust(24) for c in cells))
    cells = []
    for n in names:
        pooled = {k: [v for c in (1, 2, 3, 4) for v in out[n]["recall"][k].get(c, [])] for k in KS}
        cells.append(" / ".join(f"{mean(pooled[k]):.1f}" for k in KS))
    print("1-4".ljust(22) + "".join(c.rjust(24) for c in cells))
    print("\nR@10 (%), categories 1-4, per conversation")
    for conv in out[names[0]]["conv"]:
        print(conv.ljust(22) + "".join(f"{mean(out[n]['conv'][conv]):24.1f}" for n in names))
    first = statistics.mean(out[names[0]]["cpu"])
    print("\nrecall CPU ms per question (median / mean / mean ratio to the first)")
    for n in names:
        cpu = out[n]["cpu"]
        print(n.ljust(22) + f"{statistics.median(cpu):8.1f} {statistics.mean(cpu):8.1f} {statistics.mean(cpu) / first:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=locomo.DEFAULT_DATA)
    parser.add_argument("--embedder", default="best", choices=["best", "hash", "minilm"])
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--questions", type=int, default=0)
    parser.add_argument("--vector-cache", default="")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:FIELD=VALUE,...")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant] or [("default", {})]
    samples, embedder = locomo.samples_and_embedder(args)
    print(f"LoCoMo dev A/B: {len(samples)} conversations, embedder {embedder.name}, "
          f"variants {variants}, load average {locomo.load_average()}", flush=True)  # fmt: skip
    out = trio.run(run, args, samples, embedder, variants)
    report(out)
    print(f"(load average at the end: {locomo.load_average()})")
    if args.vector_cache:
        embedder.save()


if __name__ == "__main__":
    main()
