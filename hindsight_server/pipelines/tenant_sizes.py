"""The tenants' sizes the vector channel chooses its search by (domain/search_plan.py), cached per server:
the choice needs their order of magnitude, not their exact count, so a size is read at most once a minute
per tenant instead of once per recall."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from hindsight_server.store.memories import MemoryStore

TTL_S = 60.0
CAPACITY = 10_000  # tenants remembered; the least recently used is forgotten first


class TenantSizes:
    def __init__(self, store: MemoryStore, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._sizes: OrderedDict[str, tuple[float, tuple[int, int]]] = OrderedDict()

    async def of(self, tenant_id: str) -> tuple[int, int]:
        """(the tenant's memories, the table's), at most TTL_S old."""
        now = self._clock()
        cached = self._sizes.get(tenant_id)
        if cached is not None and now - cached[0] < TTL_S:
            self._sizes.move_to_end(tenant_id)
            return cached[1]
        sizes = await self._store.tenant_size(tenant_id)
        self._sizes[tenant_id] = (now, sizes)
        self._sizes.move_to_end(tenant_id)
        while len(self._sizes) > CAPACITY:
            self._sizes.popitem(last=False)
        return sizes
