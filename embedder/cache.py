"""A bounded LRU cache whose entries expire after a fixed time to live."""

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
    """At most `maxsize` entries (least recently used evicted first), each valid `ttl_s` seconds."""

    def __init__(self, maxsize: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if maxsize < 0 or ttl_s < 0:
            raise ValueError("maxsize and ttl_s must be >= 0")
        self.maxsize, self.ttl_s = maxsize, ttl_s
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        expires_at, value = entry
        if self._clock() >= expires_at:
            del self._entries[key]
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, len(self._entries), self.maxsize)

    def put(self, key: K, value: V) -> None:
        if self.maxsize == 0:
            return
        self._entries[key] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Every entry dropped (the counters stay)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
