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
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True
