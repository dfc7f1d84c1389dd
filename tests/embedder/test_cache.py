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


def test_one_partition_cannot_take_more_than_its_share() -> None:
    cache: TTLCache[str, int] = TTLCache(maxsize=10, ttl_s=300, clock=FakeClock(), max_share=0.3)
    for index in range(3):
        cache.put(f"quiet-{index}", index, partition="quiet")
    for index in range(1000):  # a flood of distinct queries from one tenant
        cache.put(f"noisy-{index}", index, partition="noisy")
    assert [cache.get(f"quiet-{index}", "quiet") for index in range(3)] == list(range(3))
    assert len(cache) == 6  # the quiet three and the noisy tenant's three most recent
    assert cache.get("noisy-999", "noisy") == 999 and cache.get("noisy-996", "noisy") is None


def test_the_same_text_is_cached_apart_per_partition() -> None:
    cache: TTLCache[str, int] = TTLCache(maxsize=10, ttl_s=300, clock=FakeClock())
    cache.put("q", 1, partition="a")
    assert cache.get("q", "b") is None  # one tenant cannot learn from timing what another asked
    assert cache.get("q", "a") == 1


def test_clearing_one_partition_keeps_the_others() -> None:
    clock = FakeClock()
    cache: TTLCache[str, int] = TTLCache(maxsize=10, ttl_s=300, clock=clock)
    cache.put("q", 1, partition="a")
    cache.put("q", 2, partition="b")
    cache.clear("a")
    assert (cache.get("q", "a"), cache.get("q", "b")) == (None, 2)
    clock.now = 301
    assert cache.get("q", "b") is None and len(cache) == 0
