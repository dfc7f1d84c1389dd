"""The embedding queue: memories waiting for a vector, leased to the background workers.

A claim is one short transaction (FOR UPDATE SKIP LOCKED, then a lease written on each row): no row
lock is held while the vectors are computed, so an Update, Delete or erasure of a claimed row never
waits for the inference tier. Completing checks that the row still holds the content that was
embedded (an Update in between makes it pending again, for its new text). A failed row waits out a
backoff that grows with its attempts; a row that failed before is embedded on its own, so it cannot
take the rows batched with it down again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta

from pgvector import Vector

from hindsight_server.domain.language import OWN_SPACE
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.vectors import FloatVector, PendingEmbedding
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import VECTOR_COLUMN, OnPool

__all__ = ["EmbeddingQueue"]


def _lacks_own(spaces: str, row: str = "") -> str:
    """SQL: the row (`row`: its alias and a dot) lacks the vector of its language's own space, that
    space among the text[] parameter `spaces` (VectorSpace values)."""
    cases = " ".join(
        f"WHEN '{lang}' THEN '{space.value}' = ANY({spaces}) AND {row}{VECTOR_COLUMN[space]} IS NULL"
        for lang, space in OWN_SPACE.items()
    )
    return f"coalesce(CASE {row}language {cases} END, false)"


# The vector columns as `complete` writes them: parameters $3.. in VECTOR_COLUMN's order, then the rest.
_VECTOR_COLUMNS = tuple(VECTOR_COLUMN.values())
_VECTOR_ARRAYS = ", ".join(f"${n}::vector[]" for n in range(3, 3 + len(_VECTOR_COLUMNS)))
_AFTER = 2 + len(_VECTOR_COLUMNS)


class EmbeddingQueue(OnPool):
    async def claim_pending_embeddings(
        self, limit: int, lease: timedelta, *, own: Collection[VectorSpace], own_now: Collection[VectorSpace]
    ) -> list[PendingEmbedding]:
        """Leases up to `limit` of the oldest pending rows across tenants (a maintenance path, not a
        tenant request) that are not leased or backing off, for `lease`, with the vectors each lacks.
        `own`: the languages' own spaces this server computes (no other is asked for); `own_now`: those
        it can right now (rows lacking only another one are left for later, so they do not hold back the
        rest)."""
        can_now, needs = _lacks_own("$3::text[]"), _lacks_own("$2::text[]")
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            rows = await connection.fetch(
                f"""WITH due AS (
                       SELECT tenant_id, id FROM memories
                       WHERE embedding_state = 'pending'
                         AND (embedding_retry_at IS NULL OR embedding_retry_at <= now())
                         AND (embedding IS NULL OR {can_now} OR NOT {needs})
                       ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)
                   UPDATE memories m SET embedding_retry_at = now() + $4::interval
                   FROM due WHERE m.tenant_id = due.tenant_id AND m.id = due.id
                   RETURNING m.id, m.tenant_id, m.subject, m.content, m.created_at, m.embedding_attempts,
                             m.language, md5(m.content) AS digest,
                             m.embedding IS NULL AS needs_multilingual,
                             {_lacks_own("$2::text[]", "m.")} AS needs_own,
                             m.embedding_en IS NOT NULL AS has_english""",
                limit,
                [space.value for space in own],
                [space.value for space in own_now],
                lease,
            )
        rows = sorted(rows, key=lambda r: (r["created_at"], str(r["id"])))  # RETURNING keeps no order
        return [
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
                        (OWN_SPACE.get(r["language"]), r["needs_own"]),
                    )
                    if needed and space is not None
                ),
                r["embedding_attempts"],
                r["digest"],
            )
            for r in rows
        ]

    async def complete(
        self,
        rows: Sequence[PendingEmbedding],
        vectors: Mapping[VectorSpace, Mapping[str, FloatVector]],
        failed: Mapping[str, timedelta],
    ) -> None:
        """Stores the vectors computed (per space, by memory id) where the row still holds the content
        embedded; a row that now has every vector it lacked becomes ready, the others stay pending with
        what they got and may be claimed again at once. A row in `failed` waits its backoff first and
        counts one more attempt."""

        def column(space: VectorSpace) -> list[Vector | None]:
            computed = vectors.get(space, {})
            return [None if (v := computed.get(row.memory_id)) is None else Vector(v) for row in rows]

        ready = [all(row.memory_id in vectors.get(space, {}) for space in row.missing) for row in rows]
        async with translate_errors():
            await self._pool.execute(
                f"""UPDATE memories AS m
                   SET {", ".join(f"{c} = coalesce(u.{c}, m.{c})" for c in _VECTOR_COLUMNS)},
                       embedding_state = CASE WHEN u.ready THEN 'ready' ELSE m.embedding_state END,
                       embedding_retry_at = CASE WHEN u.backoff IS NULL THEN NULL ELSE now() + u.backoff END,
                       embedding_attempts = CASE WHEN u.backoff IS NULL THEN 0
                                                 ELSE m.embedding_attempts + 1 END
                   FROM unnest($1::text[], $2::uuid[], {_VECTOR_ARRAYS}, ${_AFTER + 1}::bool[],
                               ${_AFTER + 2}::text[], ${_AFTER + 3}::interval[])
                        AS u(tenant_id, id, {", ".join(_VECTOR_COLUMNS)}, ready, digest, backoff)
                   WHERE m.tenant_id = u.tenant_id AND m.id = u.id
                     AND m.embedding_state = 'pending' AND md5(m.content) = u.digest""",
                [row.tenant_id for row in rows],
                [row.memory_id for row in rows],
                *(column(space) for space in VECTOR_COLUMN),
                ready,
                [row.digest for row in rows],
                [failed.get(row.memory_id) for row in rows],
            )
