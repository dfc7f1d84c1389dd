"""The embedding queue: memories waiting for a vector, claimed by the background workers (FOR UPDATE
SKIP LOCKED) and completed in their claiming transaction."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

import asyncpg
from pgvector import Vector

from hindsight_server.domain.language import ENGLISH
from hindsight_server.domain.model import (
    VectorSpace,
)
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import FloatVector, OnPool


class EmbeddingQueue(OnPool):
    @contextlib.asynccontextmanager
    async def claim_pending_embeddings(
        self, limit: int, *, english: bool, english_now: bool
    ) -> AsyncIterator[EmbeddingClaim]:
        """Oldest pending rows across tenants (a maintenance path, not a tenant request), with the
        vectors each lacks. `english`: this server computes English vectors (else none is asked for);
        `english_now`: it can right now (else rows lacking only that one are left for later, so they
        do not hold back the rest)."""
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            rows = await connection.fetch(
                """SELECT id, tenant_id, subject, content, embedding IS NULL AS needs_multilingual,
                          ($2 AND language = $3 AND embedding_en IS NULL) AS needs_english,
                          embedding_en IS NOT NULL AS has_english
                   FROM memories
                   WHERE embedding_state = 'pending'
                     AND ($4 OR embedding IS NULL OR NOT ($2 AND language = $3 AND embedding_en IS NULL))
                   ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED""",
                limit,
                english,
                ENGLISH,
                english_now,
            )
            pending = [
                PendingEmbedding(
                    str(r["id"]),
                    r["tenant_id"],
                    r["subject"],
                    r["content"],
                    r["has_english"],
                    frozenset(
                        space
                        for space, needed in (
                            (VectorSpace.MULTILINGUAL, r["needs_multilingual"]),
                            (VectorSpace.ENGLISH, r["needs_english"]),
                        )
                        if needed
                    ),
                )
                for r in rows
            ]
            yield EmbeddingClaim(connection, pending)


@dataclass(frozen=True, slots=True)
class PendingEmbedding:
    memory_id: str
    tenant_id: str
    subject: str
    content: str
    has_english: bool  # before this claim (a Chinese memory never gets one)
    missing: frozenset[VectorSpace]  # the spaces whose vector this memory still lacks and can get


class EmbeddingClaim:
    """Rows claimed for embedding, locked (FOR UPDATE SKIP LOCKED) until complete() or the claim ends,
    so several servers' workers never embed the same row twice."""

    def __init__(self, connection: asyncpg.Connection, rows: Sequence[PendingEmbedding]) -> None:
        self._connection = connection
        self.rows = rows

    async def complete(self, vectors: Mapping[VectorSpace, Mapping[str, FloatVector]]) -> None:
        """Stores the vectors computed (per space, by memory id); a row that now has every vector it
        lacked becomes ready, the others stay pending with what they got."""

        def column(space: VectorSpace) -> list[Vector | None]:
            computed = vectors.get(space, {})
            return [None if (v := computed.get(row.memory_id)) is None else Vector(v) for row in self.rows]

        ready = [all(row.memory_id in vectors.get(space, {}) for space in row.missing) for row in self.rows]
        async with translate_errors():
            await self._connection.execute(
                """UPDATE memories AS m
                   SET embedding = coalesce(u.embedding, m.embedding),
                       embedding_en = coalesce(u.embedding_en, m.embedding_en),
                       embedding_state = CASE WHEN u.ready THEN 'ready' ELSE m.embedding_state END
                   FROM unnest($1::text[], $2::uuid[], $3::vector[], $4::vector[], $5::bool[])
                        AS u(tenant_id, id, embedding, embedding_en, ready)
                   WHERE m.tenant_id = u.tenant_id AND m.id = u.id""",
                [row.tenant_id for row in self.rows],
                [row.memory_id for row in self.rows],
                column(VectorSpace.MULTILINGUAL),
                column(VectorSpace.ENGLISH),
                ready,
            )
