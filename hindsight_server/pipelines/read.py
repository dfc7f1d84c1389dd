"""Reads by id and by filter."""

from __future__ import annotations

from hindsight_server.domain.model import ListQuery, Memory, Page
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.validation import validate_list, validate_tenant
from hindsight_server.store.reads import MemoryReads


class ReadPipeline:
    def __init__(self, store: MemoryReads, limits: Limits) -> None:
        self._store = store
        self._limits = limits

    async def get(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        validate_tenant(tenant_id, self._limits)
        return await self._store.get(tenant_id, memory_id, agent_id)

    async def history(self, tenant_id: str, memory_id: str, agent_id: str = "") -> list[Memory]:
        validate_tenant(tenant_id, self._limits)
        return await self._store.history(tenant_id, memory_id, agent_id)

    async def list(self, query: ListQuery) -> Page:
        validate_list(query, self._limits)
        return await self._store.page(query)
