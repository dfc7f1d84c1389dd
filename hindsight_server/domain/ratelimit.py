"""A token bucket per key: `rate` requests per second on average, bursts up to `burst`. Pure: the caller
passes the time, so tests move it."""

from __future__ import annotations

from dataclasses import dataclass, field

from hindsight_server.domain.errors import InvalidArgument

__all__ = ["RateLimiter"]


@dataclass
class _Bucket:
    tokens: float
    at: float  # monotonic seconds of the last refill


@dataclass
class RateLimiter:
    rate: float  # tokens per second; 0: unlimited
    burst: float
    # Past this many keys, buckets that have refilled are forgotten: a new bucket starts full, so
    # forgetting a full one changes no answer, and callers naming ever new keys cannot grow the map.
    max_keys: int = 10_000
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise InvalidArgument("rate", "must not be negative")
        if self.rate and self.burst < 1:
            raise InvalidArgument("burst", "must be at least 1")

    def allow(self, key: str, now: float) -> bool:
        """Takes one token from `key`'s bucket if it has one."""
        if not self.rate:
            return True
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._forget_full(now)
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def wait_s(self, key: str) -> float:
        """After a refused allow(): seconds until `key`'s bucket holds a token again."""
        bucket = self._buckets.get(key)
        if not self.rate or bucket is None:
            return 0.0
        return max(0.0, (1 - bucket.tokens) / self.rate)

    def _forget_full(self, now: float) -> None:
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
