"""Per-actor token buckets: rates parse once (a small cache) and read the same every time; a
bucket refills at its rate, refuses when empty, and starts again when the policy's rate changes."""

from __future__ import annotations

import pytest

from cortexdb.server import ratelimit
from cortexdb.server.ratelimit import RateLimiter, parse_rate


def test_rates_parse_to_tokens_a_second_whatever_their_unit_and_bad_ones_are_refused():
    ratelimit._rate.cache_clear()
    assert [parse_rate(t) for t in ("100/s", " 100 / sec ", "60/min", "7200/hour", "100/s")] == [100.0, 100.0, 1.0, 2.0, 100.0]
    for bad in ("100", "fast", "1/day", ["100/s"], None, 5):
        with pytest.raises(ValueError, match="not a rate"):
            parse_rate(bad)
    info = ratelimit._rate.cache_info()  # "100/s" the second time was a hit, not parsed again
    assert info.hits >= 1 and info.currsize <= info.maxsize == 64


def test_a_bucket_refills_at_its_rate_refuses_when_empty_and_follows_a_new_rate():
    now = [1000.0]
    limiter = RateLimiter(lambda: now[0], lambda: 1_700_000_000.0 + now[0])
    verdicts = [limiter.take("user:alice", "write", "2/s") for _ in range(3)]
    assert [v.allowed for v in verdicts] == [True, True, False]
    assert verdicts[2].retry_after == 1 and verdicts[2].limit == 2 and verdicts[2].remaining == 0
    now[0] += 0.5  # half a second: one token back
    assert limiter.take("user:alice", "write", "2/s").allowed
    assert not limiter.take("user:alice", "write", "2/s").allowed
    assert limiter.take("user:bob", "write", "2/s").allowed  # a bucket per actor
    fresh = limiter.take("user:alice", "write", "10/s")  # the policy changed the rate: a new, full bucket
    assert fresh.allowed and fresh.limit == 10 and fresh.remaining == 9
