"""The in-memory store read as store/reads.py reads PostgreSQL (MemoryReader, pipelines/ports.py): a memory
by id as its agent may see it, the version chain through one (oldest first, bounded each way, a loop
walked once), and keyset pages newest first. It reads the memories an InMemoryMemoryStore holds, so
what a test writes through the write pipeline is what it reads back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hindsight_server.domain.errors import NotFound
from hindsight_server.domain.model import ListQuery, Memory, Page, PageCursor
from hindsight_server.store.reads import MAX_HISTORY_STEPS
from tests.support.fakes.memory_store import InMemoryMemoryStore, seen_by


@dataclass
class InMemoryMemoryReads:
    store: InMemoryMemoryStore

    async def get(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        return self.store.get(tenant_id, memory_id, agent_id)

    async def history(self, tenant_id: str, memory_id: str, agent_id: str = "") -> list[Memory]:
        tenant = self.store.memories.get(tenant_id, {})
        if memory_id not in tenant:
            raise NotFound("memory", memory_id)
        older = self._walk(tenant, memory_id, lambda m: m.supersedes)
        newer = self._walk(tenant, memory_id, lambda m: m.superseded_by)
        chain = [*reversed(older), tenant[memory_id], *newer]
        # Each version once, where the walk first reached it.
        seen = [m for m in {m.id: m for m in chain}.values() if seen_by(m, agent_id)]
        if not seen:
            raise NotFound("memory", memory_id)
        return seen

    @staticmethod
    def _walk(tenant: dict[str, Memory], start: str, link: Callable[[Memory], str | None]) -> list[Memory]:
        """The memories `link` leads to from `start`, nearest first, until a link ends, leaves the tenant,
        comes back to one already walked, or MAX_HISTORY_STEPS were taken."""
        walked: list[Memory] = []
        visited = {start}
        current = tenant[start]
        while (
            len(walked) < MAX_HISTORY_STEPS
            and (next_id := link(current)) in tenant
            and next_id not in visited
        ):
            current = tenant[next_id]
            visited.add(next_id)
            walked.append(current)
        return walked

    async def page(self, query: ListQuery) -> Page:
        after = query.after
        matching = [
            m
            for m in self.store.of_tenant(query.tenant_id)
            if seen_by(m, query.agent_id)
            and (not query.subject or m.subject == query.subject)
            and (not query.tiers or m.tier in query.tiers)
            and (not query.kinds or m.kind in query.kinds)
            and (not query.session_id or m.session_id == query.session_id)
            and m.status in query.statuses
            and (after is None or (m.created_at, m.id) < (after.created_at, after.memory_id))
        ]
        newest_first = sorted(matching, key=lambda m: (m.created_at, m.id), reverse=True)
        memories = newest_first[: query.page_size]
        more = len(newest_first) > query.page_size
        return Page(memories, PageCursor(memories[-1].created_at, memories[-1].id) if more else None)
