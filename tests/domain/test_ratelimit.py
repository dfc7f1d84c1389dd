"""The per-tenant token bucket."""

from __future__ import annotations

import pytest

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.ratelimit import RateLimiter


def test_a_burst_then_the_rate() -> None:
    limiter = RateLimiter(rate=10, burst=3)
    assert [limiter.allow("a", 0.0) for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("b", 0.0)  # another key has its own bucket
    assert not limiter.allow("a", 0.05)  # half a token
    assert limiter.allow("a", 0.1)  # one token after 1/rate seconds
    assert [limiter.allow("a", 10.0) for _ in range(4)] == [True, True, True, False]  # never above burst


def test_rate_zero_is_unlimited() -> None:
    limiter = RateLimiter(rate=0, burst=0)
    assert all(limiter.allow("a", 0.0) for _ in range(10_000))


@pytest.mark.parametrize(("rate", "burst", "field"), [(-1, 5, "rate"), (5, 0, "burst")])
def test_bad_limits_are_named(rate: float, burst: float, field: str) -> None:
    with pytest.raises(InvalidArgument, match=field):
        RateLimiter(rate=rate, burst=burst)


def test_new_keys_cannot_grow_the_buckets_without_bound_and_no_answer_changes() -> None:
    limiter = RateLimiter(rate=1, burst=1, max_keys=3)
    for i in range(100):  # ever new keys, each bucket refilled (full) by the time the next comes
        assert limiter.allow(f"k{i}", i * 2.0)
    assert len(limiter._buckets) <= 3
    assert limiter.allow("busy", 500.0) and not limiter.allow("busy", 500.0)  # emptied
    assert limiter.allow("new", 500.1)  # forgets the full buckets, not the busy one
    assert not limiter.allow("busy", 500.2)  # still limited
