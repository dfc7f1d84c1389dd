"""The recall channels read from a server's index of the subject (pipelines/hot_scopes.py) instead of
the database: the vector search, BM25 and the turns around the strongest candidates. The structured and
session channels, the lexical statistics (tenant-wide) and the scope sizes still read the database.

A RecallStore, so the recall pipeline runs the same stages over either."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from hindsight_server.domain.bm25 import Bm25, TermStatistics, plan_bm25_query
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.model import ChannelHit, Entities, Memory, Scope, VectorSpace
from hindsight_server.domain.scope_index import ScopeIndex, Scored
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.domain.vectors import FloatVector
from hindsight_server.pipelines.ports import RecallStore
from hindsight_server.pipelines.vector_searches import VectorSearches

__all__ = ["IndexedReads"]


class IndexedReads:
    def __init__(
        self, store: RecallStore, index: ScopeIndex, searches: VectorSearches, *, primary: bool
    ) -> None:
        self._store = store
        self._index = index
        self._searches = searches
        self._primary = primary  # `store` reads the primary: what it reads of the statistics is kept
        self._visible: list[tuple[Scope, npt.NDArray[np.bool_]]] = []

    def _seen(self, scope: Scope) -> npt.NDArray[np.bool_]:
        """The slots visible in `scope`, computed once per scope a recall asks about."""
        for seen, visible in self._visible:
            if seen == scope:
                return visible
        visible = self._index.visible(scope)
        self._visible.append((scope, visible))
        return visible

    def _rows(self, found: Sequence[Scored | Memory], spaces: Sequence[VectorSpace]) -> ChannelRows:
        """Hits in the order found, with each one's vector in the first of `spaces` it has one in (what
        store/channels.vector_columns reads)."""
        hits = [
            ChannelHit(item.memory, rank, item.score)
            if isinstance(item, Scored)
            else ChannelHit(item, rank, 0.0)
            for rank, item in enumerate(found, start=1)
        ]
        return ChannelRows(hits, self._index.first_vectors([hit.memory.id for hit in hits], spaces))

    async def term_statistics(self, tenant_id: str, terms: Sequence[str]) -> TermStatistics | None:
        """As the index last kept them when it holds the whole tenant and nothing changed since (one
        round trip fewer a recall); else from the database, kept for the next recall when read from the
        primary (a replica's may be older than the index)."""
        kept = self._index.statistics(terms)
        if kept is not None:
            return kept
        generation = self._index.generation
        statistics = await self._store.term_statistics(tenant_id, terms)
        if statistics is not None and self._primary:
            self._index.keep_statistics(generation, terms, statistics)
        return statistics

    async def lexical_channel(
        self, scope: Scope, terms: Sequence[str], limit: int, bm25: Bm25, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        statistics = await self.term_statistics(scope.tenant_id, terms)
        if statistics is None:
            return ChannelRows([], {})
        plan = plan_bm25_query(statistics.df, statistics.documents, bm25)
        if not plan.match:
            return ChannelRows([], {})
        found = self._index.lexical(self._seen(scope), plan, bm25, statistics.average_terms, limit)
        rows = self._rows(found, spaces)
        return ChannelRows(rows.hits, rows.vectors, rare_terms=plan.rare)

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
        """Exact whatever `exact` says: a search of the index costs less than a walk of the graph."""
        without = VectorSpace.ENGLISH if without_english else None
        found = await self._searches.nearest(
            self._index, self._seen(scope), space, query, limit, without=without
        )
        return self._rows(found, spaces)

    async def adjacent_turns(
        self, scope: Scope, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]
    ) -> tuple[ChannelRows, dict[str, tuple[str | None, str | None]]]:
        neighbours, adjacency = self._index.adjacent(self._seen(scope), memory_ids)
        return self._rows(neighbours, spaces), adjacency

    async def structured_channel(
        self, scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        return await self._store.structured_channel(scope, entities, limit, spaces)

    async def session_channel(
        self, scope: Scope, session_id: str, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        return await self._store.session_channel(scope, session_id, limit, spaces)

    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
        return await self._store.scope_size(tenant_id, subject)
