"""What the strict request-body decoder costs, against plain ``orjson.loads`` in the same run.

    python bench/request_decode.py [--repeat 5]

``jsoncodec.decode_request`` (what ``Call.json()`` uses) adds to orjson: a scan for runs of 19+
digits (integers orjson would round), a count of brackets, and, when a body has more containers
than the depth limit, a breadth-first walk of its containers.  Printed per body: the median of
``--repeat`` timings of each, in µs per call, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit

# bench/http.py would shadow the stdlib package `http` for a script run from this directory
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import orjson  # noqa: E402

from cortexdb.engine import jsoncodec  # noqa: E402


def envelope(i: int) -> dict:
    return {"modality": "conversation",
            "content": {"kind": "message", "role": "user", "text": f"Alice works at Acme and likes green tea ({i})."},
            "context": {"observed_at": "2026-05-13T15:42:00Z", "labels": ["chat", "work"]}}  # fmt: skip


BODIES = {
    "one envelope": {"scope": "org:acme/user:alice", **envelope(0)},
    "recall request": {"scope": "org:acme/user:alice", "query": "where does Alice work?",
                       "temporal": {"natural": "last 30 days"}, "budgets": {"max_tokens": 2000},
                       "filters": {"AND": [{"confidence": {"gte": 0.5}}, {"modality": {"in": ["conversation"]}}]}},
    "bulk, 1000 items": {"scope": "org:acme/user:alice", "items": [envelope(i) for i in range(1000)]},
}  # fmt: skip


def median_us(fn, number: int, repeat: int) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'body':<18} {'bytes':>8} {'orjson.loads':>14} {'decode_request':>16} {'ratio':>7}")
    for name, document in BODIES.items():
        raw = orjson.dumps(document)
        number = max(1, 2_000_000 // len(raw))
        base = median_us(lambda raw=raw: orjson.loads(raw), number, args.repeat)
        strict = median_us(lambda raw=raw: jsoncodec.decode_request(raw), number, args.repeat)
        print(f"{name:<18} {len(raw):>8} {base:>11.1f} µs {strict:>13.1f} µs {strict / base:>6.2f}x")


if __name__ == "__main__":
    main()
