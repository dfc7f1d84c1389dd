"""Reads by id and by filter, on a replica when the server has one (store/routing.py)."""

from __future__ import annotations

from typing import Protocol

from hindsight_server.domain.model import CommitPosition, ListQuery, Memory, Page
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.validation import validate_list, validate_tenant
from hindsight_server.pipelines.ports import MemoryReader
from hindsight_server.store.routing import ReadRoute


class CommitPositions(Protocol):
    async def commit_position(self) -> CommitPosition:
        """Where the changes committed so far end: a mutating call's consistency token."""
        ...


class ReadPipeline:
    def __init__(self, reads: ReadRoute[MemoryReader], limits: Limits) -> None:
        self._reads = reads
        self._limits = limits

    async def get(
        self,
        tenant_id: str,
        memory_id: str,
        agent_id: str = "",
        read_after: CommitPosition | None = None,
    ) -> Memory:
        validate_tenant(tenant_id, self._limits)
        return await self._reads.read(read_after, lambda store: store.get(tenant_id, memory_id, agent_id))

    async def history(
        self,
        tenant_id: str,
        memory_id: str,
        agent_id: str = "",
        read_after: CommitPosition | None = None,
    ) -> list[Memory]:
        validate_tenant(tenant_id, self._limits)
        return await self._reads.read(read_after, lambda store: store.history(tenant_id, memory_id, agent_id))

    async def list(self, query: ListQuery) -> Page:
        validate_list(query, self._limits)
        return await self._reads.read(query.read_after, lambda store: store.page(query))
