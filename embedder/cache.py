"""A bounded LRU cache whose entries expire after a fixed time to live, shared by tenants: each entry
belongs to a partition (a tenant), and no partition holds more than `max_share` of the capacity, so one
tenant's stream of new queries evicts its own entries, not everyone's. A partition can be dropped alone
(an erasure in one tenant leaves the others' entries in place)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int  # absent or expired
    size: int
    capacity: int


class TTLCache(Generic[K, V]):
    """At most `maxsize` entries (least recently used evicted first), each valid `ttl_s` seconds; at
    most `max_share` of them in one partition (its own least recently used go first)."""

    def __init__(
        self,
        maxsize: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_share: float = 1.0,
    ) -> None:
        if maxsize < 0 or ttl_s < 0 or not 0 < max_share <= 1:
            raise ValueError("maxsize and ttl_s must be >= 0, max_share in (0, 1]")
        self.maxsize, self.ttl_s = maxsize, ttl_s
        self.max_per_partition = max(1, int(maxsize * max_share))
        self._clock = clock
        # Recency over all partitions, and each partition's own (for its share).
        self._entries: OrderedDict[tuple[str, K], tuple[float, V]] = OrderedDict()
        self._partitions: dict[str, OrderedDict[K, None]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: K, partition: str = "") -> V | None:
        entry = self._entries.get((partition, key))
        if entry is None:
            self.misses += 1
            return None
        expires_at, value = entry
        if self._clock() >= expires_at:
            self._drop(partition, key)
            self.misses += 1
            return None
        self._entries.move_to_end((partition, key))
        self._partitions[partition].move_to_end(key)
        self.hits += 1
        return value

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, len(self._entries), self.maxsize)

    def put(self, key: K, value: V, partition: str = "") -> None:
        if self.maxsize == 0:
            return
        self._entries[(partition, key)] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end((partition, key))
        own = self._partitions.setdefault(partition, OrderedDict())
        own[key] = None
        own.move_to_end(key)
        if len(own) > self.max_per_partition:
            self._drop(partition, next(iter(own)))
        while len(self._entries) > self.maxsize:
            oldest_partition, oldest = next(iter(self._entries))
            self._drop(oldest_partition, oldest)

    def clear(self, partition: str | None = None) -> None:
        """Every entry dropped, or only one partition's (the counters stay)."""
        if partition is None:
            self._entries.clear()
            self._partitions.clear()
            return
        for key in list(self._partitions.get(partition, ())):
            self._drop(partition, key)

    def _drop(self, partition: str, key: K) -> None:
        del self._entries[(partition, key)]
        own = self._partitions[partition]
        del own[key]
        if not own:
            del self._partitions[partition]

    def __len__(self) -> int:
        return len(self._entries)
