"""An in-memory RecallStore (pipelines/ports.py) for the recall pipeline's own tests: the same scope
rules as store/channels.py over a list of memories, term overlap for the lexical channel, no vectors.
The store's SQL is tested against the real PostgreSQL elsewhere; this is for the pipeline's logic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hindsight_server.domain.bm25 import Bm25
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.errors import HindsightError
from hindsight_server.domain.lexical import analyse
from hindsight_server.domain.model import (
    ChannelHit,
    Entities,
    Memory,
    Scope,
    Status,
    Tier,
    VectorSpace,
    Visibility,
)
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.domain.vectors import FloatVector


def in_scope(memory: Memory, scope: Scope) -> bool:
    when = memory.valid_from or memory.created_at
    return (
        memory.tenant_id == scope.tenant_id
        and (memory.visibility is Visibility.SHARED or memory.agent_id == scope.agent_id)
        and memory.status is Status.ACTIVE
        and (memory.expires_at is None or memory.expires_at > scope.now)
        and (not scope.subject or memory.subject == scope.subject)
        and (not scope.tiers or memory.tier in scope.tiers)
        and (not scope.kinds or memory.kind in scope.kinds)
        and (scope.window.start is None or when >= scope.window.start)
        and (scope.window.end is None or when < scope.window.end)
    )


def _rows(ranked: Sequence[tuple[float, Memory]], limit: int) -> ChannelRows:
    best = sorted(ranked, key=lambda pair: (-pair[0], -pair[1].created_at.timestamp()))[:limit]
    return ChannelRows([ChannelHit(m, rank, score) for rank, (score, m) in enumerate(best, start=1)], {})


@dataclass
class InMemoryRecallStore:
    memories: list[Memory]
    failing: HindsightError | None = None  # raised by every channel: a database that cannot answer
    counted: list[tuple[str, str]] = field(default_factory=list)

    def _seen(self, scope: Scope) -> list[Memory]:
        if self.failing is not None:
            raise self.failing
        return [m for m in self.memories if in_scope(m, scope)]

    async def lexical_channel(
        self, scope: Scope, terms: Sequence[str], limit: int, bm25: Bm25, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        wanted = set(terms)
        scored = [(float(len(wanted & analyse(m.content).distinct)), m) for m in self._seen(scope)]
        return _rows([(score, m) for score, m in scored if score > 0], limit)

    async def structured_channel(
        self, scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        matched = [
            (float(sum(m.entities.get(k) == v for k, v in entities.items())), m) for m in self._seen(scope)
        ]
        return _rows([(s, m) for s, m in matched if s > 0 or not entities], limit)

    async def vector_channel(
        self,
        scope: Scope,
        query: FloatVector,
        limit: int,
        space: VectorSpace,
        spaces: Sequence[VectorSpace],
        *,
        exact: bool = False,
        without_english: bool = False,
    ) -> ChannelRows:
        raise AssertionError("no inference tier in these tests: the vector channel must not run")

    async def session_channel(
        self, scope: Scope, session_id: str, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        own = [
            m
            for m in self._seen(scope)
            if m.session_id == session_id and m.tier in (Tier.WORKING, Tier.EPISODIC)
        ]
        return _rows([(m.created_at.timestamp(), m) for m in own], limit)

    async def adjacent_turns(
        self, scope: Scope, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]
    ) -> tuple[ChannelRows, dict[str, tuple[str | None, str | None]]]:
        seen = self._seen(scope)
        around: dict[str, tuple[str | None, str | None]] = {}
        found: dict[str, Memory] = {}
        for memory_id in memory_ids:
            memory = next((m for m in seen if m.id == memory_id and m.session_id), None)
            if memory is None:
                continue
            turns = sorted(
                (m for m in seen if m.session_id == memory.session_id), key=lambda m: (m.created_at, m.id)
            )
            at = turns.index(memory)
            before = turns[at - 1] if at > 0 else None
            after = turns[at + 1] if at + 1 < len(turns) else None
            around[memory_id] = (before.id if before else None, after.id if after else None)
            found.update((m.id, m) for m in (before, after) if m is not None)
        return ChannelRows([ChannelHit(m, 1, 0.0) for m in found.values()], {}), around

    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
        self.counted.append((tenant_id, subject))
        rows = sum(m.tenant_id == tenant_id and (not subject or m.subject == subject) for m in self.memories)
        return ScopeSize(rows, rows, len(self.memories))
