"""The query router's accuracy on the labelled set (tests/data/router/queries.jsonl) and on a
held-out set (heldout.jsonl) written after the rules were last changed.

    python bench/router.py [--show-misses]

Prints the accuracy, per-type precision and recall, the confusion matrix (rows: the label,
columns: the router's type) and, as a baseline measured in the same run, the accuracy of the
majority-class guess (every query ``exploratory``).  tests/test_router.py asserts a floor below
the accuracy measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.join(_HERE, ".."))

from cortexdb.engine.retrieve.router import TYPES, route  # noqa: E402

DATA = os.path.join(_HERE, "..", "tests", "data", "router", "queries.jsonl")
# written after the rules were last changed, and never used to change them
HELDOUT = os.path.join(_HERE, "..", "tests", "data", "router", "heldout.jsonl")


def load(path: str = DATA) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def evaluate(rows: list[dict]) -> dict:
    confusion = {t: {u: 0 for u in TYPES} for t in TYPES}
    misses = []
    for row in rows:
        got = route(row["query"]).type
        confusion[row["type"]][got] += 1
        if got != row["type"]:
            misses.append((row["type"], got, row["query"]))
    correct = sum(confusion[t][t] for t in TYPES)
    return {"n": len(rows), "accuracy": correct / len(rows), "confusion": confusion, "misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()
    rows = load()
    started = time.perf_counter()
    result = evaluate(rows)
    elapsed = (time.perf_counter() - started) * 1000 / len(rows)
    confusion = result["confusion"]
    print(f"queries: {result['n']}   accuracy: {result['accuracy']:.3f}   ({elapsed:.3f} ms per query)")
    majority = max(sum(1 for r in rows if r["type"] == t) for t in TYPES) / len(rows)
    print(f"baseline (majority class): {majority:.3f}   ratio: {result['accuracy'] / majority:.2f}x")
    short = {t: t[:10] for t in TYPES}
    print("\n" + " " * 16 + " ".join(f"{short[t]:>10}" for t in TYPES) + "   recall")
    for t in TYPES:
        row = confusion[t]
        total = sum(row.values()) or 1
        print(f"{t:>16}" + " ".join(f"{row[u]:>10}" for u in TYPES) + f"   {row[t] / total:.2f}")
    precision = []
    for t in TYPES:
        predicted = sum(confusion[u][t] for u in TYPES)
        precision.append(f"{t}={confusion[t][t] / predicted:.2f}" if predicted else f"{t}=n/a")
    print("precision: " + ", ".join(precision))
    heldout = evaluate(load(HELDOUT))
    print(f"held-out set: {heldout['n']} queries, accuracy {heldout['accuracy']:.3f}")
    if args.show_misses:
        for want, got, query in result["misses"] + heldout["misses"]:
            print(f"  {want:>16} -> {got:<16} {query}")


if __name__ == "__main__":
    main()
