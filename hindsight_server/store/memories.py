"""MemoryStore: the one module that speaks SQL about memories. Every statement filters on tenant_id."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
from pgvector import Vector

from hindsight_server.domain.bm25 import Bm25, plan_bm25_query
from hindsight_server.domain.conflicts import Action, Existing, content_key
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.errors import Aborted, FailedPrecondition, NotFound
from hindsight_server.domain.language import ENGLISH, language
from hindsight_server.domain.lexical import LexicalDocument, analyse, tsquery_literal
from hindsight_server.domain.lifecycle import is_mutable
from hindsight_server.domain.model import (
    ChannelHit,
    EmbeddingState,
    Entities,
    Kind,
    ListQuery,
    Memory,
    MemoryPatch,
    Page,
    PageCursor,
    Resolution,
    Scope,
    Tier,
    VectorSpace,
    WriteOutcome,
)
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row

FloatVector = npt.NDArray[np.float32]

# A private memory is seen by the agent that wrote it only (private ones always carry an agent_id, so
# a caller without one sees shared memories alone). Every read by a caller applies it.
_SEEN_BY = "(visibility = 'shared' OR agent_id = {agent})"

# The column holding each space's vectors (identifiers from this table only, never from a caller).
_VECTOR_COLUMN = {VectorSpace.MULTILINGUAL: "embedding", VectorSpace.ENGLISH: "embedding_en"}

# Update mask path -> column. Only these columns can be changed by a caller.
_PATCHABLE_COLUMNS = {
    "content": "content",
    "entities": "entities",
    "intent": "intent",
    "confidence": "confidence",
    "subject": "subject",
    "tier": "tier",
    "kind": "kind",
    "valid_from": "valid_from",
    "valid_to": "valid_to",
    "expires_at": "expires_at",
}


class _Sql:
    """Accumulates WHERE conditions with numbered parameters ($1, $2, ...)."""

    def __init__(self) -> None:
        self.args: list[Any] = []
        self.conditions: list[str] = []

    def param(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def where(self, condition: str) -> None:
        self.conditions.append(condition)

    @property
    def clause(self) -> str:
        return " AND ".join(self.conditions) if self.conditions else "TRUE"


def _where_subject_tier_kind(sql: _Sql, subject: str, tiers: Sequence[Tier], kinds: Sequence[Kind]) -> None:
    if subject:
        sql.where(f"subject = {sql.param(subject)}")
    if tiers:
        sql.where(f"tier = ANY({sql.param([t.value for t in tiers])}::text[])")
    if kinds:
        sql.where(f"kind = ANY({sql.param([k.value for k in kinds])}::text[])")


def _where_in_scope(sql: _Sql, scope: Scope) -> None:
    """The conditions of a recall's scope (domain.model.Scope), the same for every channel."""
    sql.where(f"tenant_id = {sql.param(scope.tenant_id)}")
    sql.where(_SEEN_BY.format(agent=sql.param(scope.agent_id)))
    if scope.as_of is not None:
        # What was believed then: recorded by then, and not yet replaced or removed then.
        as_of = sql.param(scope.as_of)
        sql.where(f"created_at <= {as_of}")
        ended = "status IN ('superseded', 'deleted', 'expired')"
        sql.where(f"(status = 'active' OR ({ended} AND updated_at > {as_of}))")
        sql.where(f"(expires_at IS NULL OR expires_at > {as_of})")
    else:
        statuses = ["active", "superseded"] if scope.include_superseded else ["active"]
        sql.where(f"status = ANY({sql.param(statuses)}::text[])")
        sql.where(f"(expires_at IS NULL OR expires_at > {sql.param(scope.now)})")
    _where_subject_tier_kind(sql, scope.subject, scope.tiers, scope.kinds)
    if scope.window.start is not None:
        sql.where(f"coalesce(valid_from, created_at) >= {sql.param(scope.window.start)}")
    if scope.window.end is not None:
        sql.where(f"coalesce(valid_from, created_at) < {sql.param(scope.window.end)}")


Vectors = dict[VectorSpace, dict[str, FloatVector]]  # per space, by memory id


@dataclass(frozen=True, slots=True)
class ChannelRows:
    """A channel's hits, and the embeddings of those that have one, in the first space asked for that
    each has a vector in (to score every candidate by similarity, not only those the vector channel
    found)."""

    hits: list[ChannelHit]
    vectors: Vectors


def _vector_columns(spaces: Sequence[VectorSpace]) -> str:
    """Each memory's vector in the first of `spaces` (preferred first) it has one in: a query scores a
    memory in one space only, so the others would be bytes on the wire for nothing."""
    columns = []
    for index, space in enumerate(spaces):
        column = _VECTOR_COLUMN[space]
        earlier = " AND ".join(f"{_VECTOR_COLUMN[s]} IS NULL" for s in spaces[:index])
        columns.append(f"CASE WHEN {earlier} THEN {column} END AS {column}" if earlier else column)
    return "".join(f", {column}" for column in columns)


def _channel_rows(rows: Sequence[asyncpg.Record], spaces: Sequence[VectorSpace]) -> ChannelRows:
    hits = [
        ChannelHit(memory=memory_from_row(row), rank=rank, score=float(row["channel_score"] or 0.0))
        for rank, row in enumerate(rows, start=1)
    ]
    vectors = {
        space: {
            hit.memory.id: row[_VECTOR_COLUMN[space]].to_numpy()
            for hit, row in zip(hits, rows, strict=True)
            if row[_VECTOR_COLUMN[space]] is not None
        }
        for space in spaces
    }
    return ChannelRows(hits, vectors)


class MemoryStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

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

    async def record_access(self, accesses: Sequence[tuple[str, str, int, datetime]]) -> None:
        """Adds (tenant, memory id, count, last access) to the access counters in one statement."""
        async with translate_errors():
            await self._pool.execute(
                """UPDATE memories AS m
                   SET access_count = m.access_count + a.count,
                       last_accessed_at = greatest(m.last_accessed_at, a.at)
                   FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::timestamptz[])
                        AS a(tenant, id, count, at)
                   WHERE m.tenant_id = a.tenant AND m.id = a.id""",
                [a[0] for a in accesses],
                [a[1] for a in accesses],
                [a[2] for a in accesses],
                [a[3] for a in accesses],
            )

    async def ping(self) -> None:
        async with translate_errors():
            await self._pool.fetchval("SELECT 1")

    # ----------------------------------------------------------------------------------------- writes

    async def insert(
        self,
        memories: Sequence[Memory],
        embeddings: Mapping[VectorSpace, Sequence[FloatVector | None]] | None = None,
    ) -> list[WriteOutcome]:
        """Inserts one tenant's memories (a request has one tenant) in one transaction: all or nothing.
        A memory whose idempotency key was already used is not inserted; the stored one is returned
        instead (REPLAYED). `embeddings` holds, per space, vectors parallel to `memories` (None: not
        embedded yet). Stores every memory as given: no dedupe (see insert_resolving)."""
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            return await _insert_rows(connection, memories, embeddings or {})

    async def insert_resolving(
        self,
        memories: Sequence[Memory],
        embeddings: Mapping[VectorSpace, Sequence[FloatVector | None]],
        decide: Callable[[Memory, list[Existing]], ConflictResolution],
        now: datetime,
        *,
        graph_subjects: frozenset[str] = frozenset(),
    ) -> list[WriteOutcome]:
        """Inserts one tenant's memories in one transaction, each checked against its active peers
        (same subject, kind and tier) first: `decide` (domain.conflicts) says whether it merges into
        one (seen again), supersedes one (a new version), or is new.

        Peers are serialised per (tenant, subject, kind, tier) by transaction-scoped advisory locks,
        taken in one order, so two servers writing the same fact at once cannot both insert it.
        `graph_subjects`: the subjects whose nearest peers are found through HNSW (large ones, chosen by
        the caller as for recall: domain/search_plan.py); the others' are found by an exact scan."""
        groups = sorted({_peer_group(m) for m in memories})
        multilingual = embeddings.get(VectorSpace.MULTILINGUAL) or [None] * len(memories)
        english = embeddings.get(VectorSpace.ENGLISH) or [None] * len(memories)
        outcomes: list[WriteOutcome] = []
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            await connection.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(g, 0)) FROM unnest($1::text[]) AS g",
                groups,
            )
            for index, memory in enumerate(memories):
                vector = multilingual[index]
                replayed = await _replayed(connection, memory)
                if replayed is not None:
                    outcomes.append(replayed)
                    continue
                by_graph = vector is not None and memory.subject in graph_subjects
                peers = await _peers(connection, memory, vector, by_graph=by_graph)
                resolution = decide(memory, peers)
                if resolution.action is Action.MERGE and resolution.target_id is not None:
                    outcomes.append(await _seen_again(connection, memory, resolution, now))
                    continue
                if resolution.action is Action.SUPERSEDE and resolution.target_id is not None:
                    memory = replace(memory, supersedes=resolution.target_id)
                vectors = {VectorSpace.MULTILINGUAL: [vector], VectorSpace.ENGLISH: [english[index]]}
                (outcome,) = await _insert_rows(connection, [memory], vectors)
                if memory.supersedes is not None:
                    await _mark_superseded(connection, memory, now)
                    outcome = replace(outcome, resolution=Resolution.SUPERSEDED, reason=resolution.reason)
                outcomes.append(outcome)
        return outcomes

    async def update(self, patch: MemoryPatch, now: datetime, embedding_state: EmbeddingState) -> Memory:
        sql = _Sql()
        tenant = sql.param(patch.tenant_id)
        memory_id = sql.param(patch.memory_id)
        seen = _SEEN_BY.format(agent=sql.param(patch.agent_id))
        assignments = [f"updated_at = {sql.param(now)}", "version = version + 1"]
        for path in sorted(patch.mask):
            value = getattr(patch, path)
            if path == "entities":
                value = json.dumps(value, ensure_ascii=False)
            elif path in ("tier", "kind"):
                value = value.value
            cast = "::jsonb" if path == "entities" else ""
            assignments.append(f"{_PATCHABLE_COLUMNS[path]} = {sql.param(value)}{cast}")
        if "content" in patch.mask:
            lexical = analyse(patch.content)
            assignments.append(f"lexical = {sql.param(lexical.tsvector)}::tsvector")
            assignments.append(f"lexical_terms = {sql.param(lexical.length)}")
            assignments.append(f"language = {sql.param(language(patch.content))}")
            assignments.append(f"content_key = {sql.param(content_key(patch.content))}")
            assignments.append(
                f"embedding_state = {sql.param(embedding_state.value)}, embedding = NULL, embedding_en = NULL"
            )
        version_check = ""
        if patch.expected_version is not None:
            version_check = f"AND m.version = {sql.param(patch.expected_version)}"
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            # The row, and the tenant's BM25 length total when the content changed; then its terms' df.
            row = await connection.fetchrow(
                f"""WITH previous AS (
                        SELECT id, lexical_terms, tsvector_to_array(lexical) AS previous_lexemes
                        FROM memories WHERE tenant_id = {tenant} AND id = {memory_id} AND {seen} FOR UPDATE),
                    changed AS (
                        UPDATE memories m SET {", ".join(assignments)} FROM previous p
                        WHERE m.id = p.id AND m.status IN ('active', 'pending') {version_check}
                        RETURNING m.*, p.lexical_terms AS previous_terms, p.previous_lexemes),
                    adjusted AS (
                        UPDATE lexical_stats s SET terms = s.terms + c.lexical_terms - c.previous_terms
                        FROM changed c
                        WHERE s.tenant_id = c.tenant_id AND c.lexical_terms <> c.previous_terms)
                    SELECT {MEMORY_COLUMNS}, previous_lexemes FROM changed""",
                *sql.args,
            )
            if row is not None and "content" in patch.mask:
                before, after = set(row["previous_lexemes"]), analyse(patch.content).distinct
                changes = {t: -1 for t in before - after} | {t: 1 for t in after - before}
                await _adjust_df(connection, patch.tenant_id, changes)
        if row is not None:
            return memory_from_row(row)
        current = await self.get(patch.tenant_id, patch.memory_id, patch.agent_id)  # NotFound if none
        if not is_mutable(current.status):
            raise FailedPrecondition(f"memory {current.id!r} is {current.status.value} and cannot be updated")
        raise Aborted(
            f"memory {current.id!r} is at version {current.version}, not {patch.expected_version}; "
            "re-read it and retry"
        )

    async def soft_delete(self, tenant_id: str, memory_id: str, now: datetime, agent_id: str = "") -> Memory:
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""UPDATE memories SET status = 'deleted', updated_at = $3, version = version + 1
                    WHERE tenant_id = $1 AND id = $2 AND status <> 'deleted' AND {_SEEN_BY.format(agent="$4")}
                    RETURNING {MEMORY_COLUMNS}""",
                tenant_id,
                memory_id,
                now,
                agent_id,
            )
        # Deleting twice is not an error: the second call returns the deleted memory.
        return memory_from_row(row) if row is not None else await self.get(tenant_id, memory_id, agent_id)

    async def expire_now(self, tenant_id: str, memory_ids: Sequence[str], now: datetime) -> None:
        """Ends the memories' lifetime now (they leave recall at once; the expiry job marks them)."""
        async with translate_errors():
            await self._pool.execute(
                """UPDATE memories SET expires_at = $3, updated_at = $3, version = version + 1
                   WHERE tenant_id = $1 AND id = ANY($2::uuid[]) AND status IN ('active', 'pending')
                     AND (expires_at IS NULL OR expires_at > $3)""",
                tenant_id,
                list(memory_ids),
                now,
            )

    async def decide_pending(
        self, tenant_id: str, memory_id: str, confirm: bool, now: datetime, agent_id: str = ""
    ) -> Memory:
        """A pending memory becomes active (confirmed) or deleted (rejected); FailedPrecondition when it
        is not pending."""
        status = "active" if confirm else "deleted"
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""UPDATE memories SET status = $3, updated_at = $4, version = version + 1
                    WHERE tenant_id = $1 AND id = $2 AND status = 'pending' AND {_SEEN_BY.format(agent="$5")}
                    RETURNING {MEMORY_COLUMNS}""",
                tenant_id,
                memory_id,
                status,
                now,
                agent_id,
            )
        if row is not None:
            return memory_from_row(row)
        current = await self.get(tenant_id, memory_id, agent_id)  # NotFound when it does not exist
        verb = "confirmed" if confirm else "rejected"
        raise FailedPrecondition(
            f"memory {memory_id!r} is {current.status.value}, not pending: it cannot be {verb}"
        )

    # ------------------------------------------------------------------------------------------ reads

    async def history(self, tenant_id: str, memory_id: str, agent_id: str = "") -> list[Memory]:
        """The version chain through a memory, oldest first: what it superseded, back to the first
        version, and what superseded it, up to the latest."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""WITH RECURSIVE older AS (
                        SELECT id, supersedes, 0 AS step FROM memories WHERE tenant_id = $1 AND id = $2
                        UNION ALL
                        SELECT m.id, m.supersedes, o.step - 1 FROM memories m
                        JOIN older o ON m.id = o.supersedes
                        WHERE m.tenant_id = $1),
                    newer AS (
                        SELECT id, superseded_by, 0 AS step FROM memories WHERE tenant_id = $1 AND id = $2
                        UNION ALL
                        SELECT m.id, m.superseded_by, n.step + 1 FROM memories m
                        JOIN newer n ON m.id = n.superseded_by
                        WHERE m.tenant_id = $1),
                    chain AS (SELECT id, step FROM older UNION SELECT id, step FROM newer)
                    SELECT {MEMORY_COLUMNS} FROM memories JOIN chain USING (id)
                    WHERE tenant_id = $1 AND {_SEEN_BY.format(agent="$3")} ORDER BY chain.step""",
                tenant_id,
                memory_id,
                agent_id,
            )
        if not rows:
            raise NotFound("memory", memory_id)
        return [memory_from_row(row) for row in rows]

    async def get(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        """The memory as the calling agent may see it; another agent's private memory is NotFound."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""SELECT {MEMORY_COLUMNS} FROM memories
                    WHERE tenant_id = $1 AND id = $2 AND {_SEEN_BY.format(agent="$3")}""",
                tenant_id,
                memory_id,
                agent_id,
            )
        if row is None:
            raise NotFound("memory", memory_id)
        return memory_from_row(row)

    async def page(self, query: ListQuery) -> Page:
        sql = _Sql()
        sql.where(f"tenant_id = {sql.param(query.tenant_id)}")
        sql.where(_SEEN_BY.format(agent=sql.param(query.agent_id)))
        _where_subject_tier_kind(sql, query.subject, query.tiers, query.kinds)
        if query.session_id:
            sql.where(f"session_id = {sql.param(query.session_id)}")
        sql.where(f"status = ANY({sql.param([s.value for s in query.statuses])}::text[])")
        if query.after is not None:
            created_at = sql.param(query.after.created_at)
            after_id = sql.param(query.after.memory_id)
            sql.where(f"(created_at, id) < ({created_at}, {after_id}::uuid)")
        limit = sql.param(query.page_size + 1)
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {MEMORY_COLUMNS} FROM memories WHERE {sql.clause}
                    ORDER BY created_at DESC, id DESC LIMIT {limit}""",
                *sql.args,
            )
        memories = [memory_from_row(row) for row in rows[: query.page_size]]
        more = len(rows) > query.page_size
        cursor = PageCursor(memories[-1].created_at, memories[-1].id) if more else None
        return Page(memories=memories, next_cursor=cursor)

    # --------------------------------------------------------------------------------- recall channels

    async def lexical_channel(
        self,
        scope: Scope,
        terms: Sequence[str],
        limit: int,
        bm25: Bm25,
        spaces: Sequence[VectorSpace],
    ) -> ChannelRows:
        """Okapi BM25 over the tenant's memories, from per-tenant statistics kept by the writes
        (lexical_stats, lexical_df). Two round trips: the terms' statistics, then the scoring query
        with a literal tsquery, so the planner sees how selective it is and uses the GIN index."""
        async with translate_errors():
            stats = await self._pool.fetch(
                """SELECT s.documents, s.terms AS total, d.term, d.df
                   FROM lexical_stats s LEFT JOIN lexical_df d
                     ON d.tenant_id = s.tenant_id AND d.term = ANY($2::text[])
                   WHERE s.tenant_id = $1""",
                scope.tenant_id,
                list(terms),
            )
        if not stats:
            return ChannelRows([], {})
        documents, total = stats[0]["documents"], stats[0]["total"]
        plan = plan_bm25_query(
            {row["term"]: row["df"] for row in stats if row["term"] is not None}, documents, bm25
        )
        if not plan.match:
            return ChannelRows([], {})
        sql = _Sql()
        query = sql.param(tsquery_literal(list(plan.match)))
        weighted_terms, idfs = sql.param(list(plan.idf)), sql.param(list(plan.idf.values()))
        k1, b = sql.param(bm25.k1), sql.param(bm25.b)
        avgdl = sql.param(max(total / max(documents, 1), 1.0))
        _where_in_scope(sql, scope)
        sql.where(f"lexical @@ {query}::tsquery")
        # The rarest term alone can match thousands of one user's memories; scoring costs ~15 us a row,
        # so at most match_rows of them (the newest) are scored.
        scored = sql.param(bm25.match_rows)
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT candidates.*, (
                        SELECT sum(w.idf * cardinality(u.positions) * ({k1} + 1)
                                   / (cardinality(u.positions)
                                      + {k1} * (1 - {b} + {b} * candidates.lexical_terms / {avgdl})))
                        FROM unnest(candidates.lexical) AS u(lexeme, positions, weights)
                        JOIN unnest({weighted_terms}::text[], {idfs}::float8[]) AS w(term, idf)
                          ON w.term = u.lexeme) AS channel_score
                    FROM (SELECT {MEMORY_COLUMNS}{_vector_columns(spaces)}, lexical, lexical_terms
                          FROM memories WHERE {sql.clause}
                          ORDER BY created_at DESC LIMIT {scored}) AS candidates
                    ORDER BY channel_score DESC, created_at DESC LIMIT {sql.param(limit)}""",
                *sql.args,
            )
        return _channel_rows(rows, spaces)

    async def structured_channel(
        self, scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        """Memories carrying any of the wanted entity values (most matches first), or, with no entities,
        the newest memories inside the time window."""
        sql = _Sql()
        _where_in_scope(sql, scope)
        score, newest = "0", "coalesce(valid_from, created_at)"  # the time it speaks of (Scope.window)
        if entities:
            pairs = sql.param(
                [json.dumps({key: value}, ensure_ascii=False) for key, value in entities.items()]
            )
            sql.where(f"entities @> ANY({pairs}::jsonb[])")
            score = f"(SELECT count(*) FROM unnest({pairs}::jsonb[]) AS wanted WHERE entities @> wanted)"
        return await self._ranked(sql, score, limit, spaces, newest=newest)

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
        """Nearest memories by cosine similarity in `space` (the query vector's), in the scope.
        `exact`: the scope's rows by its index, sorted by distance; otherwise through HNSW, with
        `hnsw.iterative_scan = relaxed_order` (set on the pool's connections), so a selective filter
        keeps scanning instead of silently returning fewer rows; the outer ORDER BY restores exact order.
        The caller chooses (domain/search_plan.py) and the plan follows: PostgreSQL's estimate of a
        scope's rows is too poor to choose by. `without_english`: only memories lacking an English
        vector (what an English search cannot see)."""
        sql = _Sql()
        vector = sql.param(Vector(query))
        column = _VECTOR_COLUMN[space]
        _where_in_scope(sql, scope)
        sql.where(f"{column} IS NOT NULL")
        if without_english:
            sql.where(f"{_VECTOR_COLUMN[VectorSpace.ENGLISH]} IS NULL")
        distance = f"{column} <=> {vector}"
        # HNSW serves only `ORDER BY column <=> value`: any other expression orders by a plain sort.
        order = f"({distance}) + 0" if exact else distance
        statement = f"""WITH nearest AS MATERIALIZED (
                            SELECT {MEMORY_COLUMNS}{_vector_columns(spaces)}, {distance} AS distance
                            FROM memories WHERE {sql.clause}
                            ORDER BY {order} LIMIT {sql.param(limit)})
                        SELECT *, 1 - distance AS channel_score FROM nearest ORDER BY distance"""
        async with translate_errors():
            if exact:
                rows = await self._pool.fetch(statement, *sql.args)
            else:
                async with (
                    self._pool.acquire() as connection,
                    connection.transaction(),
                    _graph_plans(connection, True, restore=False),
                ):
                    rows = await connection.fetch(statement, *sql.args)
        return _channel_rows(rows, spaces)

    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
        """The active memories of a tenant (or of one subject of it) with a multilingual vector, those of
        them without an English one, and the table's rows (the planner's estimate: -1 before the table
        was first analysed). Reads the scope's rows through its index (no vector is read)."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                """SELECT count(*) AS rows, count(*) FILTER (WHERE embedding_en IS NULL) AS without_english,
                          (SELECT reltuples::bigint FROM pg_class WHERE oid = 'memories'::regclass) AS total
                   FROM memories
                   WHERE tenant_id = $1 AND ($2 = '' OR subject = $2) AND status = 'active'
                     AND embedding IS NOT NULL""",
                tenant_id,
                subject,
            )
        return ScopeSize(int(row["rows"]), int(row["without_english"]), int(row["total"]))

    async def adjacent_turns(
        self, scope: Scope, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]
    ) -> tuple[ChannelRows, dict[str, tuple[str | None, str | None]]]:
        """The memories recorded right before and right after each given one in its session (by
        created_at, then id), and for each given id its (previous, next) ids. One round trip."""
        sql = _Sql()
        ids = sql.param(list(memory_ids))
        _where_in_scope(sql, scope)
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT around.of_id, around.side, n.* FROM (
                        SELECT c.id AS of_id, 'previous' AS side, (
                            SELECT p.id FROM memories p
                            WHERE p.tenant_id = m.tenant_id AND p.session_id = m.session_id
                              AND p.session_id <> ''  -- lets the planner use the partial session index
                              AND (p.created_at, p.id) < (m.created_at, m.id)
                            ORDER BY p.created_at DESC, p.id DESC LIMIT 1) AS neighbour_id
                        FROM unnest({ids}::uuid[]) AS c(id) JOIN memories m ON m.id = c.id
                        WHERE m.session_id <> ''
                        UNION ALL
                        SELECT c.id, 'next', (
                            SELECT q.id FROM memories q
                            WHERE q.tenant_id = m.tenant_id AND q.session_id = m.session_id
                              AND q.session_id <> ''
                              AND (q.created_at, q.id) > (m.created_at, m.id)
                            ORDER BY q.created_at, q.id LIMIT 1)
                        FROM unnest({ids}::uuid[]) AS c(id) JOIN memories m ON m.id = c.id
                        WHERE m.session_id <> '') AS around
                    CROSS JOIN LATERAL (
                        SELECT {MEMORY_COLUMNS}{_vector_columns(spaces)}, 0.0 AS channel_score FROM memories
                        WHERE id = around.neighbour_id AND {sql.clause}) AS n""",
                *sql.args,
            )
        adjacency: dict[str, tuple[str | None, str | None]] = {}
        for row in rows:
            previous, following = adjacency.get(str(row["of_id"]), (None, None))
            if row["side"] == "previous":
                previous = str(row["id"])
            else:
                following = str(row["id"])
            adjacency[str(row["of_id"])] = (previous, following)
        unique = list({str(row["id"]): row for row in rows}.values())
        return _channel_rows(unique, spaces), adjacency

    async def session_channel(
        self, scope: Scope, session_id: str, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        """The session's working and episodic memory, newest first."""
        sql = _Sql()
        _where_in_scope(sql, scope)
        sql.where(f"session_id = {sql.param(session_id)}")
        sql.where("tier IN ('working', 'episodic')")
        return await self._ranked(sql, "extract(epoch FROM created_at)", limit, spaces)

    async def _ranked(
        self,
        sql: _Sql,
        score: str,
        limit: int,
        spaces: Sequence[VectorSpace],
        *,
        newest: str = "created_at",
    ) -> ChannelRows:
        """A channel's rows: the best `score` first, the newest (by `newest`) first among equals. A
        constant score with `newest` an indexed expression reads the rows in the index's order."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {MEMORY_COLUMNS}{_vector_columns(spaces)}, {score} AS channel_score
                    FROM memories WHERE {sql.clause}
                    ORDER BY channel_score DESC, {newest} DESC LIMIT {sql.param(limit)}""",
                *sql.args,
            )
        return _channel_rows(rows, spaces)


@contextlib.asynccontextmanager
async def _graph_plans(
    connection: asyncpg.Connection, on: bool, *, restore: bool = True
) -> AsyncIterator[None]:
    """Inside a transaction, while `on`: statements are planned with sorting off, so `ORDER BY vector
    <=> query` can only be served by the HNSW graph. PostgreSQL's estimate of a scope's rows cannot be
    trusted to choose (it multiplies the tenant's and the subject's selectivities), and even with a
    right estimate it sorted 8,700 peers (50 ms) rather than walk the graph (1 ms); the caller chooses
    by the scope's counted size instead (domain/search_plan.py). Sorts that are the only plan still run.
    `restore=False` when the transaction ends right after (SET LOCAL ends with it)."""
    if not on:
        yield
        return
    await connection.execute("SET LOCAL enable_sort = off")
    yield
    if restore:
        await connection.execute("SET LOCAL enable_sort = on")


_INSERT_COLUMNS = (
    "id, tenant_id, subject, agent_id, session_id, tier, kind, intent, entities, content, confidence, "
    "status, valid_from, valid_to, created_at, updated_at, expires_at, idempotency_key, embedding_state, "
    "lexical, lexical_terms, language, content_key, supersedes, derived_from, provenance, visibility, "
    "embedding, embedding_en"
)


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
                   FROM unnest($1::uuid[], $2::vector[], $3::vector[], $4::bool[])
                        AS u(id, embedding, embedding_en, ready)
                   WHERE m.id = u.id""",
                [row.memory_id for row in self.rows],
                column(VectorSpace.MULTILINGUAL),
                column(VectorSpace.ENGLISH),
                ready,
            )


async def _insert_rows(
    connection: asyncpg.Connection,
    memories: Sequence[Memory],
    embeddings: Mapping[VectorSpace, Sequence[FloatVector | None]],
) -> list[WriteOutcome]:
    lexical = [analyse(m.content) for m in memories]
    columns: list[Any] = list(
        zip(*(_insert_values(m, lx) for m, lx in zip(memories, lexical, strict=True)), strict=True)
    )
    for space in (VectorSpace.MULTILINGUAL, VectorSpace.ENGLISH):
        vectors = embeddings.get(space) or [None] * len(memories)
        columns.append([None if v is None else Vector(v) for v in vectors])
    inserted = {
        str(row["id"])
        for row in await connection.fetch(
            f"""INSERT INTO memories ({_INSERT_COLUMNS})
                SELECT u.id, u.tenant_id, u.subject, u.agent_id, u.session_id, u.tier, u.kind,
                       u.intent, u.entities::jsonb, u.content, u.confidence, u.status, u.valid_from,
                       u.valid_to, u.created_at, u.updated_at, u.expires_at, u.idempotency_key,
                       u.embedding_state, u.lexical::tsvector, u.lexical_terms, u.language,
                       u.content_key, u.supersedes, u.derived_from::uuid[], u.provenance::jsonb,
                       u.visibility, u.embedding, u.embedding_en
                FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                            $7::text[], $8::text[], $9::text[], $10::text[], $11::float8[],
                            $12::text[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[],
                            $16::timestamptz[], $17::timestamptz[], $18::text[], $19::text[],
                            $20::text[], $21::int[], $22::text[], $23::text[], $24::uuid[],
                            $25::text[], $26::text[], $27::text[], $28::vector[], $29::vector[])
                     AS u({_INSERT_COLUMNS})
                ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL
                DO NOTHING
                RETURNING id""",
            *columns,
        )
    }
    await _count_documents(
        connection,
        memories[0].tenant_id,
        [lx for m, lx in zip(memories, lexical, strict=True) if m.id in inserted],
    )
    replayed_keys = [m.idempotency_key for m in memories if m.id not in inserted]
    existing: dict[str, Memory] = {}
    if replayed_keys:
        rows = await connection.fetch(
            f"""SELECT {MEMORY_COLUMNS} FROM memories
                WHERE tenant_id = $1 AND idempotency_key = ANY($2::text[])""",
            memories[0].tenant_id,
            replayed_keys,
        )
        existing = {row["idempotency_key"]: memory_from_row(row) for row in rows}
    return [
        WriteOutcome(memory, created=True)
        if memory.id in inserted
        else WriteOutcome(existing[memory.idempotency_key], created=False, resolution=Resolution.REPLAYED)
        for memory in memories
    ]


def _peer_group(memory: Memory) -> str:
    return "\x1f".join(("peers", memory.tenant_id, memory.subject, memory.kind.value, memory.tier.value))


async def _replayed(connection: asyncpg.Connection, memory: Memory) -> WriteOutcome | None:
    if not memory.idempotency_key:
        return None
    row = await connection.fetchrow(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = $1 AND idempotency_key = $2",
        memory.tenant_id,
        memory.idempotency_key,
    )
    if row is None:
        return None
    return WriteOutcome(memory_from_row(row), created=False, resolution=Resolution.REPLAYED)


async def _peers(
    connection: asyncpg.Connection, memory: Memory, vector: FloatVector | None, *, by_graph: bool
) -> list[Existing]:
    """The memory's active peers that could be the same thing: the same normalised content, the same
    intent, or among the 5 nearest by meaning (`by_graph`: through HNSW, else by an exact scan)."""
    # Two look-ups, each by its index: the nearest by meaning through HNSW (a user's peers can be
    # thousands: reading them all to sort by distance cost 11 ms a Write at 10,000, and grew with them),
    # the same content or intent through the peers and episodes indexes.
    peer = f"""tenant_id = $1 AND subject = $2 AND kind = $3 AND tier = $4 AND status = 'active'
               AND visibility = $8 AND {_SEEN_BY.format(agent="$9")}"""
    nearest_order = "embedding <=> $7::vector" if by_graph else "(embedding <=> $7::vector) + 0"
    async with _graph_plans(connection, by_graph):
        rows = await connection.fetch(
            f"""WITH nearest AS MATERIALIZED (
               SELECT id, content, intent, entities, embedding <=> $7::vector AS distance FROM memories
               WHERE {peer} AND $7::vector IS NOT NULL AND embedding IS NOT NULL
               ORDER BY {nearest_order} LIMIT 5),
           alike AS MATERIALIZED (
               SELECT id, content, intent, entities,
                      CASE WHEN $7::vector IS NULL OR embedding IS NULL THEN NULL
                           ELSE embedding <=> $7::vector END AS distance
               FROM memories
               WHERE {peer}
                 AND ((md5(content_key) = md5($5) AND content_key = $5) OR ($6 <> '' AND intent = $6))
               ORDER BY distance NULLS LAST LIMIT 20)
           SELECT id, content, intent, entities, 1 - distance AS similarity
           FROM (SELECT * FROM nearest UNION SELECT * FROM alike) AS found
           ORDER BY distance NULLS LAST, id
           LIMIT 20""",
            memory.tenant_id,
            memory.subject,
            memory.kind.value,
            memory.tier.value,
            content_key(memory.content),
            memory.intent,
            None if vector is None else Vector(vector),
            memory.visibility.value,
            memory.agent_id,
        )
    return [
        Existing(
            id=str(row["id"]),
            subject=memory.subject,
            kind=memory.kind,
            tier=memory.tier,
            content=row["content"],
            intent=row["intent"],
            entities=json.loads(row["entities"]) if isinstance(row["entities"], str) else row["entities"],
            similarity=row["similarity"],
        )
        for row in rows
    ]


async def _seen_again(
    connection: asyncpg.Connection, memory: Memory, resolution: ConflictResolution, now: datetime
) -> WriteOutcome:
    """A merge: the existing memory was said again. Its confidence keeps the stronger of the two."""
    row = await connection.fetchrow(
        f"""UPDATE memories
            SET seen_count = seen_count + 1, last_seen_at = $3, updated_at = $3, version = version + 1,
                confidence = greatest(confidence, $4)
            WHERE tenant_id = $1 AND id = $2
            RETURNING {MEMORY_COLUMNS}""",
        memory.tenant_id,
        resolution.target_id,
        now,
        memory.confidence,
    )
    return WriteOutcome(
        memory_from_row(row), created=False, resolution=Resolution.MERGED, reason=resolution.reason
    )


async def _mark_superseded(connection: asyncpg.Connection, memory: Memory, now: datetime) -> None:
    """The replaced version: superseded from now on (recorded time; as_of reads updated_at), and no
    longer true in the world from when the new version is (valid time), unless it says otherwise."""
    await connection.execute(
        """UPDATE memories
           SET status = 'superseded', superseded_by = $3, updated_at = $4, version = version + 1,
               valid_to = CASE WHEN valid_to IS NULL AND (valid_from IS NULL OR valid_from < $5)
                               THEN $5 ELSE valid_to END
           WHERE tenant_id = $1 AND id = $2""",
        memory.tenant_id,
        memory.supersedes,
        memory.id,
        now,
        memory.valid_from or now,
    )


async def _count_documents(
    connection: asyncpg.Connection, tenant_id: str, inserted: Sequence[LexicalDocument]
) -> None:
    """Adds the new rows to their tenant's BM25 statistics, in the inserting transaction."""
    if not inserted:
        return
    await connection.execute(
        """INSERT INTO lexical_stats AS s (tenant_id, documents, terms) VALUES ($1, $2, $3)
           ON CONFLICT (tenant_id) DO UPDATE
           SET documents = s.documents + EXCLUDED.documents, terms = s.terms + EXCLUDED.terms""",
        tenant_id,
        len(inserted),
        sum(document.length for document in inserted),
    )
    await _adjust_df(connection, tenant_id, Counter(t for document in inserted for t in document.distinct))


async def _adjust_df(connection: asyncpg.Connection, tenant_id: str, changes: Mapping[str, int]) -> None:
    """Applies document-frequency changes. Rows are locked in term order, so concurrent writers of one
    tenant wait for each other instead of deadlocking."""
    terms = sorted(term for term, change in changes.items() if change)
    if not terms:
        return
    await connection.execute(
        """INSERT INTO lexical_df AS d (tenant_id, term, df)
           SELECT $1, c.term, c.change FROM unnest($2::text[], $3::bigint[]) AS c(term, change)
           ORDER BY c.term
           ON CONFLICT (tenant_id, term) DO UPDATE SET df = d.df + EXCLUDED.df""",
        tenant_id,
        terms,
        [changes[term] for term in terms],
    )


def _insert_values(memory: Memory, lexical: LexicalDocument) -> tuple[Any, ...]:
    return (
        memory.id,
        memory.tenant_id,
        memory.subject,
        memory.agent_id,
        memory.session_id,
        memory.tier.value,
        memory.kind.value,
        memory.intent,
        json.dumps(memory.entities, ensure_ascii=False),
        memory.content,
        memory.confidence,
        memory.status.value,
        memory.valid_from,
        memory.valid_to,
        memory.created_at,
        memory.updated_at,
        memory.expires_at,
        memory.idempotency_key or None,
        memory.embedding_state.value,
        lexical.tsvector,
        lexical.length,
        language(memory.content),
        content_key(memory.content),
        memory.supersedes,
        # unnest cannot take a 2-D array of ragged rows: each row's sources travel as one uuid[] literal
        "{" + ",".join(memory.derived_from) + "}",
        json.dumps(memory.provenance, ensure_ascii=False),
        memory.visibility.value,
    )


__all__ = ["ChannelRows", "FloatVector", "MemoryStore", "PendingEmbedding", "Vectors"]
