"""The recall channels' statements: lexical (BM25), structured, vector, session, the context turns, and
the scope sizes the vector search is planned by. Every statement filters on tenant_id."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import asyncpg
from pgvector import Vector

from hindsight_server.domain.bm25 import Bm25, TermStatistics, plan_bm25_query
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.lexical import tsquery_literal
from hindsight_server.domain.model import (
    ChannelHit,
    Entities,
    Scope,
    VectorSpace,
)
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.domain.vectors import COMPANION_SPACES, FloatVector
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row
from hindsight_server.store.sql import (
    SEEN_BY,
    TENANT_PARTITION,
    VECTOR_COLUMN,
    OnPool,
    Sql,
    pinned_plans,
    where_subject_tier_kind,
)


def where_in_scope(sql: Sql, scope: Scope) -> None:
    """The conditions of a recall's scope (domain.model.Scope), the same for every channel."""
    sql.where(f"tenant_id = {sql.param(scope.tenant_id)}")
    sql.where(SEEN_BY.format(agent=sql.param(scope.agent_id)))
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
    where_subject_tier_kind(sql, scope.subject, scope.tiers, scope.kinds)
    if scope.window.start is not None:
        sql.where(f"coalesce(valid_from, created_at) >= {sql.param(scope.window.start)}")
    if scope.window.end is not None:
        sql.where(f"coalesce(valid_from, created_at) < {sql.param(scope.window.end)}")


def vector_columns(spaces: Sequence[VectorSpace]) -> str:
    """Each memory's vector in the first of `spaces` (preferred first) it has one in: a query scores a
    memory in one judging space only, so the others would be bytes on the wire for nothing; and its
    vector in each companion space (domain/vectors.COMPANION_SPACES), read whatever else it has."""
    columns = []
    judging = [space for space in spaces if space not in COMPANION_SPACES]
    for space in spaces:
        column = VECTOR_COLUMN[space]
        before = [] if space in COMPANION_SPACES else judging[: judging.index(space)]
        earlier = " AND ".join(f"{VECTOR_COLUMN[s]} IS NULL" for s in before)
        columns.append(f"CASE WHEN {earlier} THEN {column} END AS {column}" if earlier else column)
    return "".join(f", {column}" for column in columns)


def channel_rows(rows: Sequence[asyncpg.Record], spaces: Sequence[VectorSpace]) -> ChannelRows:
    hits = [
        ChannelHit(memory=memory_from_row(row), rank=rank, score=float(row["channel_score"] or 0.0))
        for rank, row in enumerate(rows, start=1)
    ]
    vectors = {
        space: {
            hit.memory.id: row[VECTOR_COLUMN[space]].to_numpy()
            for hit, row in zip(hits, rows, strict=True)
            if row[VECTOR_COLUMN[space]] is not None
        }
        for space in spaces
    }
    return ChannelRows(hits, vectors)


def ranked_statement(
    sql: Sql, score: str, limit: int, spaces: Sequence[VectorSpace], *, newest: str = "created_at"
) -> tuple[str, list[Any]]:
    """A channel's statement: the best `score` first, the newest (by `newest`) first among equals. A
    constant score with `newest` an indexed expression reads the rows in the index's order."""
    statement = f"""SELECT {MEMORY_COLUMNS}{vector_columns(spaces)}, {score} AS channel_score
                    FROM memories WHERE {sql.clause}
                    ORDER BY channel_score DESC, {newest} DESC LIMIT {sql.param(limit)}"""
    return statement, sql.args


def structured_statement(
    scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
) -> tuple[str, list[Any]]:
    """The structured channel's statement: memories carrying any of the wanted entity values (most
    matches first), or, with no entities, the newest inside the time window (the scope's newest by the
    time each speaks of: memories_subject_time for a subject, memories_tenant_time for the tenant)."""
    sql = Sql()
    where_in_scope(sql, scope)
    score, newest = "0", "coalesce(valid_from, created_at)"  # the time it speaks of (Scope.window)
    if entities:
        pairs = sql.param([json.dumps({key: value}, ensure_ascii=False) for key, value in entities.items()])
        sql.where(f"entities @> ANY({pairs}::jsonb[])")
        score = f"(SELECT count(*) FROM unnest({pairs}::jsonb[]) AS wanted WHERE entities @> wanted)"
    return ranked_statement(sql, score, limit, spaces, newest=newest)


def scope_size_statement(tenant_id: str, subject: str) -> tuple[str, list[Any]]:
    """RecallChannels.scope_size's statement and arguments: a tenant's count, or a subject's."""
    in_scope = "" if subject == "" else "AND subject = $2"
    statement = f"""SELECT count(*) AS rows, count(*) FILTER (WHERE embedding_en IS NULL) AS without_english,
                          (SELECT coalesce(max(reltuples), -1)::bigint FROM pg_class
                           WHERE oid = {TENANT_PARTITION.format(tenant="$1")}) AS total
                    FROM memories
                    WHERE tenant_id = $1 {in_scope} AND status = 'active' AND embedding IS NOT NULL"""
    return statement, [tenant_id] if subject == "" else [tenant_id, subject]


def vector_statement(
    scope: Scope,
    query: FloatVector,
    limit: int,
    space: VectorSpace,
    spaces: Sequence[VectorSpace],
    exact: bool,
    without_english: bool,
) -> tuple[str, list[Any]]:
    """The vector channel's statement and its arguments (RecallChannels.vector_channel)."""
    sql = Sql()
    vector = sql.param(Vector(query))
    column = VECTOR_COLUMN[space]
    where_in_scope(sql, scope)
    sql.where(f"{column} IS NOT NULL")
    if without_english:
        sql.where(f"{VECTOR_COLUMN[VectorSpace.ENGLISH]} IS NULL")
    distance = f"{column} <=> {vector}"
    # HNSW serves only `ORDER BY column <=> value`: any other expression orders by a plain sort.
    order = f"({distance}) + 0" if exact else distance
    statement = f"""WITH nearest AS MATERIALIZED (
                        SELECT {MEMORY_COLUMNS}{vector_columns(spaces)}, {distance} AS distance
                        FROM memories WHERE {sql.clause}
                        ORDER BY {order} LIMIT {sql.param(limit)})
                    SELECT *, 1 - distance AS channel_score FROM nearest ORDER BY distance"""
    return statement, sql.args


class RecallChannels(OnPool):
    async def term_statistics(self, tenant_id: str, terms: Sequence[str]) -> TermStatistics | None:
        """The tenant's lexical statistics for `terms` (lexical_stats, lexical_df, kept by the writes);
        None while it has none. Look-ups by key: on the pinned connections."""
        async with translate_errors():
            stats = await pinned_plans(self._pool).fetch(
                """SELECT s.documents, s.terms AS total, d.term, d.df
                   FROM lexical_stats s LEFT JOIN lexical_df d
                     ON d.tenant_id = s.tenant_id AND d.term = ANY($2::text[])
                   WHERE s.tenant_id = $1""",
                tenant_id,
                list(terms),
            )
        if not stats:
            return None
        df = {row["term"]: row["df"] for row in stats if row["term"] is not None}
        return TermStatistics(stats[0]["documents"], stats[0]["total"], df)

    async def lexical_channel(
        self,
        scope: Scope,
        terms: Sequence[str],
        limit: int,
        bm25: Bm25,
        spaces: Sequence[VectorSpace],
    ) -> ChannelRows:
        """Okapi BM25 over the tenant's memories, from per-tenant statistics kept by the writes. Two
        round trips: the terms' statistics, then the scoring query with a literal tsquery, so the
        planner sees how selective it is and uses the GIN index."""
        statistics = await self.term_statistics(scope.tenant_id, terms)
        if statistics is None:
            return ChannelRows([], {})
        plan = plan_bm25_query(statistics.df, statistics.documents, bm25)
        if not plan.match:
            return ChannelRows([], {})
        sql = Sql()
        query = sql.param(tsquery_literal(list(plan.match)))
        weighted_terms, idfs = sql.param(list(plan.idf)), sql.param(list(plan.idf.values()))
        # Typed: an untyped parameter beside an integer is inferred as one, and 1.2 would arrive as 1.
        k1, b = f"{sql.param(bm25.k1)}::float8", f"{sql.param(bm25.b)}::float8"
        avgdl = f"{sql.param(statistics.average_terms)}::float8"
        where_in_scope(sql, scope)
        sql.where(f"lexical @@ {query}::tsquery")
        # The rarest term alone can match thousands of one user's memories; scoring costs ~15 us a row,
        # so at most match_rows of them (the newest) are scored.
        scored = sql.param(bm25.match_rows)
        # Only what scoring reads travels through the scoring (the id, the terms, their count); the best
        # `limit` are then read whole, by their key, with their vectors: the other candidates' rows and
        # vectors are never detoasted. The candidates' terms are scored here, not sent.
        tenant = sql.param(scope.tenant_id)
        # A memory's lexemes narrowed to the query's before they are unnested (a turn holds ~40, a query
        # ~5): stored lexemes carry no weight, so marking the query's 'A' and keeping the A's keeps them.
        only_query_terms = f"ts_filter(setweight(candidates.lexical, 'A', {weighted_terms}::text[]), '{{a}}')"
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""WITH best AS MATERIALIZED (
                        SELECT candidates.id, candidates.created_at, (
                            SELECT sum(w.idf * cardinality(u.positions) * ({k1} + 1)
                                       / (cardinality(u.positions)
                                          + {k1} * (1 - {b} + {b} * candidates.lexical_terms / {avgdl})))
                            FROM unnest({only_query_terms}) AS u(lexeme, positions, weights)
                            JOIN unnest({weighted_terms}::text[], {idfs}::float8[]) AS w(term, idf)
                              ON w.term = u.lexeme) AS channel_score
                        FROM (SELECT id, created_at, lexical, lexical_terms
                              FROM memories WHERE {sql.clause}
                              ORDER BY created_at DESC LIMIT {scored}) AS candidates
                        ORDER BY channel_score DESC, created_at DESC LIMIT {sql.param(limit)})
                    SELECT m.*, best.channel_score FROM best
                    CROSS JOIN LATERAL (
                        SELECT {MEMORY_COLUMNS}{vector_columns(spaces)} FROM memories
                        WHERE tenant_id = {tenant} AND id = best.id LIMIT 1) AS m
                    ORDER BY best.channel_score DESC, best.created_at DESC""",
                *sql.args,
            )
        return replace(channel_rows(rows, spaces), rare_terms=plan.rare)

    async def structured_channel(
        self, scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        """Memories carrying any of the wanted entity values (most matches first), or, with no entities,
        the newest memories inside the time window."""
        return await self._fetch_rows(structured_statement(scope, entities, limit, spaces), spaces)

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
        `exact`: the scope's rows by its index, sorted by distance; otherwise through HNSW, on the
        connections with pinned plans (store/pool.py), where sorting is off, so the graph is the only plan:
        PostgreSQL's estimate of a scope's rows cannot be trusted to choose (it multiplies the tenant's and
        the subject's selectivities), and even with a right estimate it sorted 8,700 peers (50 ms) rather
        than walk the graph (1 ms). `hnsw.iterative_scan = relaxed_order` (on every connection) keeps a
        selective filter scanning instead of silently returning fewer rows; the outer ORDER BY restores
        exact order. The caller chooses by the scope's counted size (domain/search_plan.py).
        `without_english`: only memories lacking an English vector (what an English search cannot see)."""
        statement, args = vector_statement(scope, query, limit, space, spaces, exact, without_english)
        async with translate_errors():
            rows = await (self._pool if exact else pinned_plans(self._pool)).fetch(statement, *args)
        return channel_rows(rows, spaces)

    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
        """The active memories of a tenant (or of one subject of it) with a multilingual vector, those of
        them without an English one, and the rows of the partition holding them (the planner's
        estimate: -1 before it was first analysed, or while the tenant has no row). Reads the scope's
        rows through its index (no vector is read). One statement text per kind of scope: as
        `($2 = '' OR subject = $2)` a subject's count read its whole tenant (1M memories: 40-310 ms
        for a subject of 3,000 in a tenant of 192,000, against 6-19 ms by the subject's index)."""
        async with translate_errors():
            statement, args = scope_size_statement(tenant_id, subject)
            row = await self._pool.fetchrow(statement, *args)
        return ScopeSize(int(row["rows"]), int(row["without_english"]), int(row["total"]))

    async def adjacent_turns(
        self, scope: Scope, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]
    ) -> tuple[ChannelRows, dict[str, tuple[str | None, str | None]]]:
        """The memories recorded right before and right after each given one in its session (by
        created_at, then id), and for each given id its (previous, next) ids. One round trip, on the
        connections with pinned plans: look-ups by key and by the session index's order."""
        sql = Sql()
        # The tenant as a parameter in every join (not m.tenant_id): a correlated tenant cannot be pruned
        # to one partition when the statement is planned, and planning all of them cost 10 ms. Each row
        # is read by its key through a LATERAL ... LIMIT 1, which the planner cannot flatten into a join:
        # a tenant written since the last ANALYZE is estimated at one row, and as a join the planner
        # read all of its rows once per given id instead (1.6 s for 1,030 rows during an import).
        ids, tenant = sql.param(list(memory_ids)), sql.param(scope.tenant_id)
        where_in_scope(sql, scope)
        async with translate_errors():
            rows = await pinned_plans(self._pool).fetch(
                f"""WITH given AS MATERIALIZED (
                        SELECT m.id, m.session_id, m.created_at FROM unnest({ids}::uuid[]) AS c(id)
                        CROSS JOIN LATERAL (
                            SELECT id, session_id, created_at FROM memories
                            WHERE tenant_id = {tenant} AND id = c.id AND session_id <> '' LIMIT 1) AS m),
                    around AS (
                        SELECT g.id AS of_id, 'previous' AS side, (
                            SELECT p.id FROM memories p
                            WHERE p.tenant_id = {tenant} AND p.session_id = g.session_id
                              AND p.session_id <> ''  -- lets the planner use the partial session index
                              AND (p.created_at, p.id) < (g.created_at, g.id)
                            ORDER BY p.created_at DESC, p.id DESC LIMIT 1) AS neighbour_id
                        FROM given g
                        UNION ALL
                        SELECT g.id, 'next', (
                            SELECT q.id FROM memories q
                            WHERE q.tenant_id = {tenant} AND q.session_id = g.session_id
                              AND q.session_id <> ''
                              AND (q.created_at, q.id) > (g.created_at, g.id)
                            ORDER BY q.created_at, q.id LIMIT 1)
                        FROM given g)
                    SELECT around.of_id, around.side, n.* FROM around
                    CROSS JOIN LATERAL (
                        SELECT {MEMORY_COLUMNS}{vector_columns(spaces)}, 0.0 AS channel_score FROM memories
                        WHERE id = around.neighbour_id AND {sql.clause} LIMIT 1) AS n""",
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
        return channel_rows(unique, spaces), adjacency

    async def session_channel(
        self, scope: Scope, session_id: str, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        """The session's working and episodic memory, newest first."""
        sql = Sql()
        where_in_scope(sql, scope)
        sql.where(f"session_id = {sql.param(session_id)}")
        sql.where("tier IN ('working', 'episodic')")
        return await self._fetch_rows(
            ranked_statement(sql, "extract(epoch FROM created_at)", limit, spaces), spaces
        )

    async def _fetch_rows(
        self, statement: tuple[str, list[Any]], spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        text, args = statement
        async with translate_errors():
            rows = await self._pool.fetch(text, *args)
        return channel_rows(rows, spaces)
