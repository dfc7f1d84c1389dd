from embedder.cache import TTLCache


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_entries_expire_after_ttl() -> None:
    clock = FakeClock()
    cache: TTLCache[str, int] = TTLCache(maxsize=10, ttl_s=300, clock=clock)
    cache.put("q", 1)
    clock.now = 299.9
    assert cache.get("q") == 1
    clock.now = 300.0
    assert cache.get("q") is None
    assert len(cache) == 0


def test_least_recently_used_is_evicted() -> None:
    cache: TTLCache[str, int] = TTLCache(maxsize=2, ttl_s=300, clock=FakeClock())
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_size_zero_disables_the_cache() -> None:
    cache: TTLCache[str, int] = TTLCache(maxsize=0, ttl_s=300)
    cache.put("a", 1)
    assert cache.get("a") is None
