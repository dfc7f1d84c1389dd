"""The embedding queue: memories waiting for a vector, leased to the background workers.

A claim is one short transaction (FOR UPDATE SKIP LOCKED, then a lease written on each row): no row
lock is held while the vectors are computed, so an Update, Delete or erasure of a claimed row never
waits for the inference tier. Completing checks that the row still holds the content that was
embedded (an Update in between makes it pending again, for its new text). A failed row waits out a
backoff that grows with its attempts; a row that failed before is embedded on its own, so it cannot
take the rows batched with it down again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta

import asyncpg
from pgvector import Vector

from hindsight_server.domain.language import OWN_SPACE
from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.vectors import (
    ClaimRequest,
    EmbeddingClaim,
    FloatVector,
    PendingContext,
    PendingEmbedding,
    ShareRounds,
    more_due,
)
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import VECTOR_COLUMN, OnPool, locked_in_order, pinned_plans

__all__ = ["CONTEXT_DUE", "WAITING_TENANTS", "EmbeddingQueue"]

# The rows waiting for a context vector (migration 0029's partial index says the same).
CONTEXT_DUE = "embedding_en_ctx IS NULL AND embedding_en IS NOT NULL AND session_id <> ''"
# A claimed row `m` that is to get its context vector with its English one.
_WANTS_CONTEXT = "(m.language = 'en' AND m.session_id <> '' AND m.embedding_en_ctx IS NULL)"
# The text of the turn before `m` in its session: the memory recorded last before it (created_at, then
# id, the context channel's order) that its readers may read too (the same agent and visibility) and
# that is not deleted.
_PREVIOUS = """(SELECT p.content FROM memories p
                WHERE p.tenant_id = m.tenant_id AND p.session_id = m.session_id
                  AND p.session_id <> ''  -- the partial session index
                  AND (p.created_at, p.id) < (m.created_at, m.id)
                  AND p.agent_id = m.agent_id AND p.visibility = m.visibility
                  AND p.status IN ('active', 'superseded')
                ORDER BY p.created_at DESC, p.id DESC LIMIT 1)"""


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


def _pending(row: asyncpg.Record) -> PendingEmbedding:
    return PendingEmbedding(
        str(row["id"]),
        row["tenant_id"],
        row["subject"],
        row["content"],
        row["has_english"],
        frozenset(
            space
            for space, needed in (
                (VectorSpace.MULTILINGUAL, row["needs_multilingual"]),
                (OWN_SPACE.get(row["language"]), row["needs_own"]),
            )
            if needed and space is not None
        ),
        row["embedding_attempts"],
        row["digest"],
        row["wants_context"],
        row["previous"],
    )


# The tenants with rows due (pending, not leased or backing off) above $1 and up to $2 (none: no
# ceiling), at most $3, in order: each step asks the queue's index (0025) for the next tenant, reading
# past only that tenant's rows that are leased or backing off (a claim's worth a worker, and failures).
_DUE = "embedding_state = 'pending' AND (embedding_retry_at IS NULL OR embedding_retry_at <= now())"
WAITING_TENANTS = f"""
    WITH RECURSIVE waiting(tenant_id, n) AS (
        SELECT (SELECT min(tenant_id) FROM memories WHERE {_DUE}
                AND tenant_id > $1 AND ($2::text IS NULL OR tenant_id <= $2)), 1
      UNION ALL
        SELECT (SELECT min(m.tenant_id) FROM memories m WHERE {_DUE}
                AND m.tenant_id > w.tenant_id AND ($2::text IS NULL OR m.tenant_id <= $2)), w.n + 1
        FROM waiting w WHERE w.tenant_id IS NOT NULL AND w.n < $3)
    SELECT coalesce(array_agg(tenant_id ORDER BY tenant_id), '{{}}') FROM waiting
    WHERE tenant_id IS NOT NULL"""


async def _waiting_tenants(pool: asyncpg.Pool, limit: int, after: str) -> list[str]:
    """Up to `limit` tenants with rows due, in order from the one after `after`, wrapping round. On the
    pinned connections: the walk has one right plan, and planning it for every claim (16 partitions,
    twice) cost ~5 ms against ~0.2 ms to run it."""
    pinned = pinned_plans(pool)
    tenants: list[str] = await pinned.fetchval(WAITING_TENANTS, after, None, limit)
    if len(tenants) < limit and after:
        tenants += await pinned.fetchval(WAITING_TENANTS, "", after, limit - len(tenants))
    return tenants


class EmbeddingQueue(OnPool):
    async def claim_pending_embeddings(self, request: ClaimRequest) -> EmbeddingClaim:
        """Leases pending rows that are not leased or backing off, with the vectors each lacks (a
        maintenance path, not a tenant request). Shared between tenants: up to `limit` tenants with rows
        due, taken in turn, each gives its oldest `limit // tenants` rows first, so a tenant that queued
        a large backlog delays another's rows by one claim, not by the whole backlog; what the others
        leave of the batch then goes to the tenants with more. A full batch says more may be due, as
        does a turn that left tenants for the next claim."""
        limit, after_tenant = request.limit, request.after_tenant
        async with translate_errors():
            tenants = await _waiting_tenants(self._pool, limit, after_tenant)
        if not tenants:
            return EmbeddingClaim([], more=False, last_tenant=after_tenant)
        rows: list[asyncpg.Record] = []
        rounds = ShareRounds(tenants, limit)
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            while (round_ := rounds.next()) is not None:
                taken = await self._claim_shares(connection, request, *round_)
                # Each round's rows oldest first, the rounds in order: the worker embeds in this order,
                # so every tenant's share is in before the rest of the batch.
                rows += sorted(taken, key=lambda r: (r["created_at"], str(r["id"])))
                rounds.took(Counter(r["tenant_id"] for r in taken))
        more = more_due(len(rows), limit, len(tenants))
        return EmbeddingClaim([_pending(r) for r in rows], more=more, last_tenant=tenants[-1])

    @staticmethod
    async def _claim_shares(
        connection: asyncpg.Connection, request: ClaimRequest, tenants: list[str], share: int
    ) -> list[asyncpg.Record]:
        """Each tenant's oldest `share` rows due, leased (a row leased by an earlier round of the same
        claim is no longer due)."""
        return list(
            await connection.fetch(
                f"""WITH due AS (
                       SELECT d.tenant_id, d.id FROM unnest($1::text[]) AS t(tenant_id)
                       CROSS JOIN LATERAL (
                           SELECT m.tenant_id, m.id FROM memories m
                           WHERE m.tenant_id = t.tenant_id AND {_DUE}
                             AND (m.embedding IS NULL OR {_lacks_own("$4::text[]", "m.")}
                                  OR NOT {_lacks_own("$3::text[]", "m.")})
                           ORDER BY m.created_at LIMIT $2 FOR UPDATE SKIP LOCKED) AS d)
                   UPDATE memories m SET embedding_retry_at = now() + $5::interval
                   FROM due WHERE m.tenant_id = due.tenant_id AND m.id = due.id
                   RETURNING m.id, m.tenant_id, m.subject, m.content, m.created_at, m.embedding_attempts,
                             m.language, md5(m.content) AS digest,
                             m.embedding IS NULL AS needs_multilingual,
                             {_lacks_own("$3::text[]", "m.")} AS needs_own,
                             m.embedding_en IS NOT NULL AS has_english,
                             {_WANTS_CONTEXT} AS wants_context,
                             CASE WHEN {_WANTS_CONTEXT} THEN {_PREVIOUS} END AS previous""",
                tenants,
                share,
                [space.value for space in request.own],
                [space.value for space in request.own_now],
                request.lease,
            )
        )

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
                f"""WITH u AS (
                       SELECT * FROM unnest($1::text[], $2::uuid[], {_VECTOR_ARRAYS}, ${_AFTER + 1}::bool[],
                                            ${_AFTER + 2}::text[], ${_AFTER + 3}::interval[])
                           AS u(tenant_id, id, {", ".join(_VECTOR_COLUMNS)}, ready, digest, backoff)),
                   {locked_in_order("FROM memories m JOIN u ON m.tenant_id = u.tenant_id AND m.id = u.id")}
                   UPDATE memories AS m
                   SET {", ".join(f"{c} = coalesce(u.{c}, m.{c})" for c in _VECTOR_COLUMNS)},
                       embedding_state = CASE WHEN u.ready THEN 'ready' ELSE m.embedding_state END,
                       embedding_retry_at = CASE WHEN u.backoff IS NULL THEN NULL ELSE now() + u.backoff END,
                       embedding_attempts = CASE WHEN u.backoff IS NULL THEN 0
                                                 ELSE m.embedding_attempts + 1 END
                   FROM u JOIN locked l ON l.tenant_id = u.tenant_id AND l.id = u.id
                   WHERE m.tenant_id = u.tenant_id AND m.id = u.id
                     AND m.embedding_state = 'pending' AND md5(m.content) = u.digest""",
                [row.tenant_id for row in rows],
                [row.memory_id for row in rows],
                *(column(space) for space in VECTOR_COLUMN),
                ready,
                [row.digest for row in rows],
                [failed.get(row.memory_id) for row in rows],
            )

    async def claim_contexts(self, limit: int, lease: timedelta) -> list[PendingContext]:
        """English memories of a session without a context vector (VectorSpace.ENGLISH_CONTEXT), oldest
        first, leased for `lease` (so workers of other servers take other rows), each with the turn
        before it (_PREVIOUS). Most get theirs with their English vector (claim_pending_embeddings);
        these are the rest: embedded inline, or whose session lost a memory. The lease is all: a row
        whose vector never comes is claimed again once it ends."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""WITH due AS (
                       SELECT tenant_id, id FROM memories WHERE {CONTEXT_DUE}
                         AND (context_retry_at IS NULL OR context_retry_at <= now())
                       ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)
                   UPDATE memories m SET context_retry_at = now() + $2::interval
                   FROM due WHERE m.tenant_id = due.tenant_id AND m.id = due.id
                   RETURNING m.id, m.tenant_id, m.content, md5(m.content) AS digest,
                             {_PREVIOUS} AS previous""",
                limit,
                lease,
            )
        return [
            PendingContext(str(r["id"]), r["tenant_id"], r["content"], r["previous"], r["digest"])
            for r in sorted(rows, key=lambda r: (r["tenant_id"], str(r["id"])))
        ]

    async def complete_contexts(
        self, rows: Sequence[PendingContext], vectors: Mapping[str, FloatVector | None]
    ) -> None:
        """Stores each row's context vector, or its own English vector where `vectors` gives None (a
        session's first memory, or a pair the model failed on: it is not claimed again), where the
        memory still holds the content claimed and has none yet. A row left out waits for its lease."""
        done = [row for row in rows if row.memory_id in vectors]
        if not done:
            return
        async with translate_errors():
            await self._pool.execute(
                f"""WITH u AS (
                       SELECT * FROM unnest($1::text[], $2::uuid[], $3::vector[], $4::text[])
                           AS u(tenant_id, id, vector, digest)),
                   {locked_in_order("FROM memories m JOIN u ON m.tenant_id = u.tenant_id AND m.id = u.id")}
                   UPDATE memories AS m
                   SET embedding_en_ctx = coalesce(u.vector, m.embedding_en), context_retry_at = NULL
                   FROM u JOIN locked l ON l.tenant_id = u.tenant_id AND l.id = u.id
                   WHERE m.tenant_id = u.tenant_id AND m.id = u.id
                     AND m.embedding_en_ctx IS NULL AND md5(m.content) = u.digest""",
                [row.tenant_id for row in done],
                [row.memory_id for row in done],
                [None if (v := vectors[row.memory_id]) is None else Vector(v) for row in done],
                [row.digest for row in done],
            )
