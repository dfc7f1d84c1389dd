"""Writing memories: inserts (as given, or resolving merges and new versions against their peers),
updates, deletes, pending decisions and the access counters, each in one transaction, with the BM25
statistics kept in step. Every statement filters on tenant_id."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg
from pgvector import Vector

from hindsight_server.domain.conflicts import Action, Existing, FactKeys, content_key, fact_keys
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.errors import Aborted, FailedPrecondition, InvalidArgument
from hindsight_server.domain.language import language
from hindsight_server.domain.lexical import LexicalDocument, analyse
from hindsight_server.domain.lifecycle import is_mutable
from hindsight_server.domain.model import (
    EmbeddingState,
    Memory,
    MemoryPatch,
    Resolution,
    VectorSpace,
    Visibility,
    WriteOutcome,
)
from hindsight_server.domain.portability import first_loop
from hindsight_server.domain.vectors import FloatVector, WriteVectors
from hindsight_server.offload import run_pure
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.feed import event_insert
from hindsight_server.store.reads import MemoryReads
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row
from hindsight_server.store.sql import (
    LISTED_MEMORIES_LOCKED,
    SEEN_BY,
    VECTOR_COLUMN,
    Sql,
    graph_plans,
    locked_in_order,
)

# The fields of a memory each event type says were set (the feed's `fields`).
_MERGED_FIELDS = "'{seen_count,last_seen_at,confidence,expires_at}'::text[]"
_SUPERSEDED_FIELDS = "'{status,superseded_by,valid_to}'::text[]"


@dataclass(frozen=True, slots=True)
class _CreatedEvents:
    """What the `created` events of an insert say: they are written by the insert statement itself
    (a CTE over its RETURNING rows), so a Write pays no round trip for its feed."""

    at: datetime
    with_content: bool
    resolution: str | None = None  # None: created, or superseded for a memory that replaces one


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


class MemoryWrites(MemoryReads):
    """Writes, and the reads a write answers with. Each write records its change feed events in its
    own transaction (store/feed.py), as one more statement or folded into the changing statement."""

    # The tenants whose feed events carry the memory's content (feed.content_tenants); others' never do.
    feed_content_tenants: frozenset[str] = frozenset()

    def _with_content(self, tenant_id: str) -> bool:
        return tenant_id in self.feed_content_tenants

    async def insert(
        self,
        memories: Sequence[Memory],
        embeddings: WriteVectors | None = None,
        now: datetime | None = None,
    ) -> list[WriteOutcome]:
        """Inserts one tenant's memories (a request has one tenant) in one transaction: all or nothing.
        A memory whose idempotency key was already used is not inserted; the stored one is returned
        instead (REPLAYED). `embeddings` holds, per space, vectors parallel to `memories` (None: not
        embedded yet). Stores every memory as given: no dedupe (see insert_resolving). `now`: the time
        of the feed's events (default: the first memory's created_at)."""
        created = self._created(memories[0].tenant_id, now or memories[0].created_at)
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            return await _insert_rows(connection, memories, embeddings or {}, created)

    async def import_batch(
        self,
        memories: Sequence[Memory],
        embeddings: WriteVectors,
        now: datetime,
    ) -> set[str]:
        """Exported memories, their ids and links final, in one transaction: each inserted unless one
        with its id (or idempotency key) is here already; then each version link set, both ways, where
        both ends are here (a chain split over several batches is whole once its last batch is in).
        Returns the ids inserted."""
        bare = [replace(m, supersedes=None, superseded_by=None) for m in memories]
        created = self._created(memories[0].tenant_id, now, resolution="imported")
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            inserted = await _insert(connection, bare, embeddings, _ON_ANY, created)
            await _link_versions(connection, memories)
        return inserted

    async def insert_resolving(
        self,
        memories: Sequence[Memory],
        embeddings: WriteVectors,
        decide: Callable[[Memory, list[Existing]], ConflictResolution],
        now: datetime,
        *,
        graph_subjects: frozenset[str] = frozenset(),
    ) -> list[WriteOutcome]:
        """Inserts one tenant's memories in one transaction, each checked against its active peers
        (same subject, kind and tier) first: `decide` (domain.conflicts) says whether it merges into
        one (seen again), supersedes one (a new version), or is new.

        Peers are serialised per (tenant, subject, kind, tier) by transaction-scoped advisory locks,
        taken in one order, so two servers writing the same fact at once cannot both insert it. Delete,
        Reject and the expire job do not take those locks; they change a memory under its row lock. So
        the chosen target is re-checked under that row lock (still active, not past its expiry) before
        it is merged into or superseded: one that was deleted or expired since the peers were read
        leaves the new memory stored as created, and a Delete is never overwritten by `superseded`.
        `graph_subjects`: the subjects whose nearest peers are found through HNSW (large ones, chosen by
        the caller as for recall: domain/search_plan.py); the others' are found by an exact scan."""
        groups = sorted({_peer_group(m) for m in memories})
        multilingual = embeddings.get(VectorSpace.MULTILINGUAL) or [None] * len(memories)
        own = {space: embeddings.get(space) or [None] * len(memories) for space in _OWN_SPACES}
        outcomes: list[WriteOutcome] = []
        created = self._created(memories[0].tenant_id, now)
        with_content = created.with_content
        # Lexical documents, content and slot keys, once: the keys find the peers, all three are stored.
        analysed = await run_pure(sum(len(m.content) for m in memories), _analyse, memories)
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
                derived = analysed[index]
                statement = peers_statement(
                    memory, derived.content_key, derived.keys.looks_for, vector, now, by_graph=by_graph
                )
                peers = await _peers(connection, memory, statement)
                # The rules read the new content against each peer's: ~15 ms for 20 peers of 1 KB.
                read = len(memory.content) + sum(len(peer.content) for peer in peers)
                resolution = await run_pure(read, decide, memory, peers)
                if resolution.action is Action.MERGE and resolution.target_id is not None:
                    merged = await _seen_again(connection, memory, resolution, now, with_content)
                    if merged is not None:
                        outcomes.append(merged)
                        continue
                    resolution = _TARGET_GONE
                if resolution.action is Action.SUPERSEDE and resolution.target_id is not None:
                    if await _lock_live(connection, memory.tenant_id, resolution.target_id, now):
                        memory = replace(memory, supersedes=resolution.target_id)
                    else:
                        resolution = _TARGET_GONE
                vectors: dict[VectorSpace, list[FloatVector | None]] = {
                    space: [column[index]] for space, column in own.items()
                }
                vectors[VectorSpace.MULTILINGUAL] = [vector]
                (outcome,) = await _insert_rows(connection, [memory], vectors, created, [derived])
                if memory.supersedes is not None:
                    await _mark_superseded(connection, memory, now)
                    outcome = replace(outcome, resolution=Resolution.SUPERSEDED, reason=resolution.reason)
                elif resolution is _TARGET_GONE:
                    outcome = replace(outcome, reason=resolution.reason)
                outcomes.append(outcome)
        return outcomes

    def _created(self, tenant_id: str, at: datetime, resolution: str | None = None) -> _CreatedEvents:
        return _CreatedEvents(at, self._with_content(tenant_id), resolution)

    async def update(self, patch: MemoryPatch, now: datetime, embedding_state: EmbeddingState) -> Memory:
        sql = Sql()
        tenant = sql.param(patch.tenant_id)
        memory_id = sql.param(patch.memory_id)
        seen = SEEN_BY.format(agent=sql.param(patch.agent_id))
        assignments = [f"updated_at = {sql.param(now)}", "version = version + 1"]
        for path in sorted(patch.mask):
            value = getattr(patch, path)
            if path == "entities":
                value = json.dumps(value, ensure_ascii=False)
            elif path in ("tier", "kind"):
                value = value.value
            cast = "::jsonb" if path == "entities" else ""
            assignments.append(f"{_PATCHABLE_COLUMNS[path]} = {sql.param(value)}{cast}")
        derived = (
            await run_pure(len(patch.content), _derive, patch.content) if "content" in patch.mask else None
        )
        if derived is not None:
            assignments.append(f"lexical = {sql.param(derived.lexical.tsvector)}::tsvector")
            assignments.append(f"lexical_terms = {sql.param(derived.lexical.length)}")
            assignments.append(f"language = {sql.param(derived.language)}")
            assignments.append(f"content_key = {sql.param(derived.content_key)}")
            assignments.append(f"fact_slot = {sql.param(derived.fact_slot)}")
            assignments.append(
                f"embedding_state = {sql.param(embedding_state.value)}, "
                + ", ".join(f"{column} = NULL" for column in VECTOR_COLUMN.values())
            )
            # New text: the worker may take it at once, whatever lease or backoff the old text had.
            assignments.append("embedding_retry_at = NULL, embedding_attempts = 0, context_retry_at = NULL")
        feed = event_insert(
            "changed",
            "'updated'",
            sql.param(now),
            f"{sql.param(sorted(patch.mask))}::text[]",
            sql.param(self._with_content(patch.tenant_id) and "content" in patch.mask),
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
                        WHERE m.tenant_id = {tenant} AND m.id = p.id
                          AND m.status IN ('active', 'pending') {version_check}
                        RETURNING m.*, p.lexical_terms AS previous_terms, p.previous_lexemes),
                    adjusted AS (
                        UPDATE lexical_stats s SET terms = s.terms + c.lexical_terms - c.previous_terms
                        FROM changed c
                        WHERE s.tenant_id = c.tenant_id AND c.lexical_terms <> c.previous_terms),
                    feed AS ({feed})
                    SELECT {MEMORY_COLUMNS}, previous_lexemes FROM changed""",
                *sql.args,
            )
            if row is not None and derived is not None:
                before, after = set(row["previous_lexemes"]), derived.lexical.distinct
                changes = {t: -1 for t in before - after} | {t: 1 for t in after - before}
                await _adjust_df(connection, patch.tenant_id, changes)
        if row is not None:
            return memory_from_row(row)
        current = await self.get(patch.tenant_id, patch.memory_id, patch.agent_id)  # NotFound if none
        if not is_mutable(current.status):
            message = f"memory {current.id!r} is {current.status.value} and cannot be updated"
            raise FailedPrecondition.of(
                "STATUS", f"memories/{current.id}", message, cause="MEMORY_NOT_MUTABLE"
            )
        raise Aborted(
            f"memory {current.id!r} is at version {current.version}, not {patch.expected_version}; "
            "re-read it and retry"
        )

    async def soft_delete(self, tenant_id: str, memory_id: str, now: datetime, agent_id: str = "") -> Memory:
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""WITH changed AS (
                        UPDATE memories SET status = 'deleted', updated_at = $3, version = version + 1
                        WHERE tenant_id = $1 AND id = $2 AND status <> 'deleted'
                          AND {SEEN_BY.format(agent="$4")}
                        RETURNING {MEMORY_COLUMNS}),
                    feed AS ({event_insert("changed", "'deleted'", "$3", "'{status}'::text[]", "false")})
                    SELECT * FROM changed""",
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
                f"""WITH {LISTED_MEMORIES_LOCKED},
                    changed AS (
                        UPDATE memories SET expires_at = $3, updated_at = $3, version = version + 1
                        WHERE tenant_id = $1 AND id IN (SELECT id FROM locked)
                          AND status IN ('active', 'pending') AND (expires_at IS NULL OR expires_at > $3)
                        RETURNING {MEMORY_COLUMNS})
                    {event_insert("changed", "'updated'", "$3", "'{expires_at}'::text[]", "false")}""",
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
            decided = "'confirmed'" if confirm else "'rejected'"
            feed = event_insert("changed", decided, "$4", "'{status}'::text[]", "$6")
            row = await self._pool.fetchrow(
                f"""WITH changed AS (
                        UPDATE memories SET status = $3, updated_at = $4, version = version + 1
                        WHERE tenant_id = $1 AND id = $2 AND status = 'pending'
                          AND {SEEN_BY.format(agent="$5")}
                        RETURNING {MEMORY_COLUMNS}),
                    feed AS ({feed})
                    SELECT * FROM changed""",
                tenant_id,
                memory_id,
                status,
                now,
                agent_id,
                confirm and self._with_content(tenant_id),
            )
        if row is not None:
            return memory_from_row(row)
        current = await self.get(tenant_id, memory_id, agent_id)  # NotFound when it does not exist
        verb = "confirmed" if confirm else "rejected"
        message = f"memory {memory_id!r} is {current.status.value}, not pending: it cannot be {verb}"
        raise FailedPrecondition.of("STATUS", f"memories/{memory_id}", message, cause="MEMORY_NOT_PENDING")

    async def record_access(self, accesses: Sequence[tuple[str, str, int, datetime]]) -> None:
        """Adds (tenant, memory id, count, last access) to the access counters in one statement."""
        async with translate_errors():
            await self._pool.execute(
                f"""WITH a AS (
                       SELECT * FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::timestamptz[])
                           AS a(tenant, id, count, at)),
                   {locked_in_order("FROM memories m JOIN a ON m.tenant_id = a.tenant AND m.id = a.id")}
                   UPDATE memories AS m
                   SET access_count = m.access_count + a.count,
                       last_accessed_at = greatest(m.last_accessed_at, a.at)
                   FROM a JOIN locked l ON l.tenant_id = a.tenant AND l.id = a.id
                   WHERE m.tenant_id = a.tenant AND m.id = a.id""",
                [a[0] for a in accesses],
                [a[1] for a in accesses],
                [a[2] for a in accesses],
                [a[3] for a in accesses],
            )


@dataclass(frozen=True, slots=True)
class _Analysed:
    """What a write derives from a memory's content, computed once per write (an insert's, an update's):
    its lexical document, language, content key and fact keys (the key it is filed under is the row's
    fact_slot; the keys it looks for find a resolving write's peers)."""

    lexical: LexicalDocument
    language: str
    content_key: str
    keys: FactKeys

    @property
    def fact_slot(self) -> str | None:
        return self.keys.filed_under


@dataclass(frozen=True, slots=True)
class _Column:
    """One column of the insert: its name, the element type of the array it travels in (unnest takes one
    array per column), the cast from that type where the column's own differs, and its value."""

    name: str
    array_type: str
    value: Callable[[Memory, _Analysed], Any]
    cast: str = ""


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


# Every column an insert writes, in one place: the column list, the unnest arrays, the SELECT list and
# each row's values are all made from it. The two vector columns come last (from the embeddings).
_COLUMNS: tuple[_Column, ...] = (
    _Column("id", "uuid", lambda m, a: m.id),
    _Column("tenant_id", "text", lambda m, a: m.tenant_id),
    _Column("subject", "text", lambda m, a: m.subject),
    _Column("agent_id", "text", lambda m, a: m.agent_id),
    _Column("session_id", "text", lambda m, a: m.session_id),
    _Column("tier", "text", lambda m, a: m.tier.value),
    _Column("kind", "text", lambda m, a: m.kind.value),
    _Column("intent", "text", lambda m, a: m.intent),
    _Column("entities", "text", lambda m, a: _json(m.entities), "::jsonb"),
    _Column("content", "text", lambda m, a: m.content),
    _Column("confidence", "float8", lambda m, a: m.confidence),
    _Column("status", "text", lambda m, a: m.status.value),
    _Column("valid_from", "timestamptz", lambda m, a: m.valid_from),
    _Column("valid_to", "timestamptz", lambda m, a: m.valid_to),
    _Column("created_at", "timestamptz", lambda m, a: m.created_at),
    _Column("updated_at", "timestamptz", lambda m, a: m.updated_at),
    _Column("expires_at", "timestamptz", lambda m, a: m.expires_at),
    _Column("idempotency_key", "text", lambda m, a: m.idempotency_key or None),
    _Column("embedding_state", "text", lambda m, a: m.embedding_state.value),
    _Column("lexical", "text", lambda m, a: a.lexical.tsvector, "::tsvector"),
    _Column("lexical_terms", "int", lambda m, a: a.lexical.length),
    _Column("language", "text", lambda m, a: a.language),
    _Column("content_key", "text", lambda m, a: a.content_key),
    _Column("supersedes", "uuid", lambda m, a: m.supersedes),
    # unnest cannot take a 2-D array of ragged rows: each row's sources travel as one uuid[] literal
    _Column("derived_from", "text", lambda m, a: "{" + ",".join(m.derived_from) + "}", "::uuid[]"),
    _Column("provenance", "text", lambda m, a: _json(m.provenance), "::jsonb"),
    _Column("visibility", "text", lambda m, a: m.visibility.value),
    _Column("access_count", "bigint", lambda m, a: m.access_count),
    _Column("last_accessed_at", "timestamptz", lambda m, a: m.last_accessed_at),
    _Column("version", "bigint", lambda m, a: m.version),
    _Column("seen_count", "bigint", lambda m, a: m.seen_count),
    _Column("last_seen_at", "timestamptz", lambda m, a: m.last_seen_at),
    _Column("fact_slot", "text", lambda m, a: a.fact_slot),
)
_VECTOR_COLUMNS = tuple(VECTOR_COLUMN.values())
_OWN_SPACES = [space for space in VECTOR_COLUMN if space is not VectorSpace.MULTILINGUAL]
_INSERT_COLUMNS = ", ".join([*(c.name for c in _COLUMNS), *_VECTOR_COLUMNS])
_INSERT_SELECT = ", ".join([*(f"u.{c.name}{c.cast}" for c in _COLUMNS), *(f"u.{v}" for v in _VECTOR_COLUMNS)])
_INSERT_ARRAYS = ", ".join(
    f"${n}::{t}[]"
    for n, t in enumerate([*(c.array_type for c in _COLUMNS), *("vector" for _ in _VECTOR_COLUMNS)], 1)
)
# The parameters after the columns' arrays: the created events' time, whether they carry content, and
# their resolution (None: created, or superseded for a memory that replaces one).
_AT, _WITH_CONTENT, _RESOLUTION = (f"${len(_COLUMNS) + len(_VECTOR_COLUMNS) + n}" for n in (1, 2, 3))
# A write may repeat an earlier one's idempotency key (that one is answered); an import skips whatever
# is here already, by id or by key.
_ON_KEY = "ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
_ON_ANY = "ON CONFLICT DO NOTHING"

# A memory that may still be merged into or superseded; `now` names the statement's time parameter.
_LIVE = "status = 'active' AND (expires_at IS NULL OR expires_at > {now})"
# A write compares itself with at most this many of the latest live memories of its intent and of the
# facts filed under each of its keys (a slot's live facts are one or a few; a facet's, of a subject that
# talks of it, or an intent's, can be thousands).
FILED_PER_KEY = 50
# What a write that would have merged or superseded says when its target went meanwhile.
_TARGET_GONE = ConflictResolution(
    Action.NEW, None, "the matching memory was deleted or expired meanwhile; stored as new"
)


async def _insert(
    connection: asyncpg.Connection,
    memories: Sequence[Memory],
    embeddings: WriteVectors,
    on_conflict: str,
    created: _CreatedEvents,
    analysed: Sequence[_Analysed] | None = None,
) -> set[str]:
    """Inserts the rows, counts the inserted ones into the tenant's BM25 statistics and records their
    `created` events, in one statement (the terms' document frequencies in a second); their ids.
    `analysed`: what was derived from the memories already (a resolving write's), else derived here."""
    if analysed is None:
        # A large batch's lexical analysis is seconds of CPU: off the event loop (hindsight_server.offload).
        analysed = await run_pure(sum(len(m.content) for m in memories), _analyse, memories)
    columns: list[list[Any]] = [
        [column.value(m, a) for m, a in zip(memories, analysed, strict=True)] for column in _COLUMNS
    ]
    for space in VECTOR_COLUMN:
        vectors = embeddings.get(space) or [None] * len(memories)
        columns.append([None if v is None else Vector(v) for v in vectors])
    resolution = (
        f"coalesce({_RESOLUTION}::text, CASE WHEN r.supersedes IS NULL THEN 'created' ELSE 'superseded' END)"
    )
    feed = event_insert("inserted", "'created'", _AT, "'{content}'::text[]", _WITH_CONTENT, resolution)
    inserted = {
        str(row["id"])
        for row in await connection.fetch(
            f"""WITH inserted AS (
                    INSERT INTO memories ({_INSERT_COLUMNS})
                    SELECT {_INSERT_SELECT}
                    FROM unnest({_INSERT_ARRAYS}) AS u({_INSERT_COLUMNS})
                    {on_conflict}
                    RETURNING id, tenant_id, subject, kind, visibility, agent_id, version, content,
                              supersedes, lexical_terms),
                stats AS (
                    INSERT INTO lexical_stats AS s (tenant_id, documents, terms)
                    SELECT tenant_id, count(*), sum(lexical_terms) FROM inserted GROUP BY tenant_id
                    ON CONFLICT (tenant_id) DO UPDATE
                    SET documents = s.documents + EXCLUDED.documents, terms = s.terms + EXCLUDED.terms),
                feed AS ({feed})
                SELECT id FROM inserted""",
            *columns,
            created.at,
            created.with_content,
            created.resolution,
        )
    }
    counted = [a.lexical for m, a in zip(memories, analysed, strict=True) if m.id in inserted]
    await _adjust_df(connection, memories[0].tenant_id, Counter(t for lx in counted for t in lx.distinct))
    return inserted


async def _link_versions(connection: asyncpg.Connection, memories: Sequence[Memory]) -> None:
    """(newer, older) pairs from either side of each link; set on both rows when both are here and
    neither end already links elsewhere (an import fills a chain's missing links, it never rewrites the
    links a stored memory has). Two statements: a middle version is the newer of one pair and the older
    of the next. Links that would close a loop fail the import (InvalidArgument)."""
    pairs = {(m.id, m.supersedes) for m in memories if m.supersedes}
    pairs |= {(m.superseded_by, m.id) for m in memories if m.superseded_by}
    if not pairs:
        return
    newer, older = zip(*sorted(pairs), strict=True)
    tenant_id = memories[0].tenant_id
    # Both ends are read before either is written: each pair is set on both rows or on neither.
    linkable = await connection.fetch(
        """SELECT p.newer, p.older FROM unnest($2::uuid[], $3::uuid[]) AS p(newer, older)
           JOIN memories n ON n.tenant_id = $1 AND n.id = p.newer
           JOIN memories o ON o.tenant_id = $1 AND o.id = p.older
           WHERE coalesce(n.supersedes = p.older, n.supersedes IS NULL)
             AND coalesce(o.superseded_by = p.newer, o.superseded_by IS NULL)""",
        tenant_id,
        list(newer),
        list(older),
    )
    if not linkable:
        return
    newer = tuple(row["newer"] for row in linkable)
    older = tuple(row["older"] for row in linkable)
    for column, target, source in (("supersedes", "older", "newer"), ("superseded_by", "newer", "older")):
        await connection.execute(
            f"""UPDATE memories m SET {column} = p.{target}
                FROM unnest($2::uuid[], $3::uuid[]) AS p(newer, older)
                WHERE m.tenant_id = $1 AND m.id = p.{source}""",
            tenant_id,
            list(newer),
            list(older),
        )
    # What the new links reach, each row once (UNION: the walk ends even on a loop); the loop itself is
    # found in one pass over that map.
    reached = await connection.fetch(
        """WITH RECURSIVE walk(id, supersedes) AS (
               SELECT id, supersedes FROM memories WHERE tenant_id = $1 AND id = ANY($2::uuid[])
               UNION
               SELECT m.id, m.supersedes FROM memories m JOIN walk w ON m.id = w.supersedes
               WHERE m.tenant_id = $1)
           SELECT id, supersedes FROM walk""",
        tenant_id,
        list(newer),
    )
    looped = first_loop({str(row["id"]): _text_or_none(row["supersedes"]) for row in reached})
    if looped is not None:
        raise InvalidArgument("memories", f"the version links would form a loop through memory {looped}")


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


async def _insert_rows(
    connection: asyncpg.Connection,
    memories: Sequence[Memory],
    embeddings: WriteVectors,
    created: _CreatedEvents,
    analysed: Sequence[_Analysed] | None = None,
) -> list[WriteOutcome]:
    inserted = await _insert(connection, memories, embeddings, _ON_KEY, created, analysed)
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
        else _replay(existing[memory.idempotency_key], memory)
        for memory in memories
    ]


def _peer_group(memory: Memory) -> str:
    return "\x1f".join(("peers", memory.tenant_id, memory.subject, memory.kind.value, memory.tier.value))


async def _replayed(connection: asyncpg.Connection, memory: Memory) -> WriteOutcome | None:
    """The memory an earlier write with this idempotency key created, or merged into."""
    if not memory.idempotency_key:
        return None
    row = await connection.fetchrow(
        f"""SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = $1 AND idempotency_key = $2
            UNION ALL
            SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = $1 AND id = (
                SELECT memory_id FROM merged_write_keys WHERE tenant_id = $1 AND idempotency_key = $2)
            LIMIT 1""",
        memory.tenant_id,
        memory.idempotency_key,
    )
    return None if row is None else _replay(memory_from_row(row), memory)


def _replay(stored: Memory, sent: Memory) -> WriteOutcome:
    """The first write's answer to a retry with its idempotency key, unless that memory is another
    agent's PRIVATE one: a key must not read what the agent could not Get."""
    if stored.visibility is Visibility.PRIVATE and stored.agent_id != sent.agent_id:
        key = sent.idempotency_key
        raise FailedPrecondition.of(
            "IDEMPOTENCY_KEY",
            f"idempotency_keys/{key}",
            f"idempotency_key {key!r} was used for another agent's memory; use a new key",
            cause="IDEMPOTENCY_KEY_REUSED",
        )
    return WriteOutcome(stored, created=False, resolution=Resolution.REPLAYED)


def peers_statement(
    memory: Memory,
    key: str,
    looked_for: tuple[str, ...],
    vector: FloatVector | None,
    now: datetime,
    *,
    by_graph: bool,
) -> tuple[str, list[Any]]:
    """The statement that reads a memory's live peers, those that could be the same thing, and its
    arguments: the same normalised content (`key`), one of the latest of the same intent or of the facts
    filed under a key it looks for (`looked_for`, domain/conflicts.FactKeys: "lives in Lisbon" for
    "moved to Porto", "I'm single" for "got engaged"), or among the 5 nearest by meaning (`by_graph`:
    through HNSW, else by an exact scan). Live: active and not past its expiry (the expire job marks
    such a memory only later; recall already hides it)."""
    # Look-ups each by its index: the nearest by meaning through HNSW (a user's peers can be thousands:
    # reading them all to sort by distance cost 11 ms a Write at 10,000, and grew with them), the same
    # content through the peers index, and the latest of the same intent and of the facts filed under
    # each key through memories_intent_recent and memories_fact_slot_recent (an intent or a facet can
    # hold thousands: reading all of them cost a Write 70 ms at 10,000).
    peer = f"""tenant_id = $1 AND subject = $2 AND kind = $3 AND tier = $4 AND {_LIVE.format(now="$10")}
               AND visibility = $8 AND {SEEN_BY.format(agent="$9")}"""
    nearest_order = "embedding <=> $7::vector" if by_graph else "(embedding <=> $7::vector) + 0"
    distance = "CASE WHEN $7::vector IS NULL OR embedding IS NULL THEN NULL ELSE embedding <=> $7::vector END"
    statement = f"""WITH nearest AS MATERIALIZED (
               SELECT id, content, intent, entities, embedding <=> $7::vector AS distance FROM memories
               WHERE {peer} AND $7::vector IS NOT NULL AND embedding IS NOT NULL
               ORDER BY {nearest_order} LIMIT 5),
           same AS MATERIALIZED (
               SELECT id, content, intent, entities, {distance} AS distance
               FROM memories
               WHERE {peer} AND md5(content_key) = md5($5) AND content_key = $5
               ORDER BY distance NULLS LAST LIMIT 20),
           intended AS MATERIALIZED (
               SELECT id, content, intent, entities, {distance} AS distance
               FROM memories
               WHERE {peer} AND $6 <> '' AND intent = $6
               ORDER BY created_at DESC LIMIT {FILED_PER_KEY}),
           filed AS MATERIALIZED (
               SELECT latest.* FROM unnest($11::text[]) AS wanted (slot)
               CROSS JOIN LATERAL (
                   SELECT id, content, intent, entities, {distance} AS distance
                   FROM memories
                   WHERE {peer} AND fact_slot = wanted.slot
                   ORDER BY created_at DESC LIMIT {FILED_PER_KEY}) AS latest)
           SELECT id, content, intent, entities, 1 - distance AS similarity
           FROM (SELECT * FROM nearest UNION SELECT * FROM same UNION SELECT * FROM intended
                 UNION SELECT * FROM filed) AS found
           ORDER BY distance NULLS LAST, id
           LIMIT 20"""
    arguments = [
        memory.tenant_id,
        memory.subject,
        memory.kind.value,
        memory.tier.value,
        key,
        memory.intent,
        None if vector is None else Vector(vector),
        memory.visibility.value,
        memory.agent_id,
        now,
        list(looked_for),
    ]
    return statement, arguments


async def _peers(
    connection: asyncpg.Connection, memory: Memory, statement: tuple[str, list[Any]]
) -> list[Existing]:
    """The memory's live peers, by `peers_statement`."""
    # Planned with sorting off whatever `by_graph`: the latest of an intent or a key come in order from
    # their indexes (with sorting on, the planner read all 1,000 of a key and sorted them), the nearest
    # from the graph when `by_graph`; the sorts that are the only plan still run.
    text, args = statement
    async with graph_plans(connection):
        rows = await connection.fetch(text, *args)
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
    connection: asyncpg.Connection,
    memory: Memory,
    resolution: ConflictResolution,
    now: datetime,
    with_content: bool,
) -> WriteOutcome | None:
    """A merge: the existing memory was said again. Its confidence keeps the stronger of the two, and
    it lives at least as long as the new one would have. None when the target is no longer live (the
    UPDATE waits for a concurrent Delete or expiry and re-reads the row): nothing was merged. The new
    memory's idempotency key is kept, so its retry is answered with this memory, not merged again."""
    row = await connection.fetchrow(
        f"""WITH changed AS (
                UPDATE memories
                SET seen_count = seen_count + 1, last_seen_at = $3, updated_at = $3, version = version + 1,
                    confidence = greatest(confidence, $4),
                    expires_at = CASE WHEN expires_at IS NULL OR $5::timestamptz IS NULL THEN NULL
                                      ELSE greatest(expires_at, $5::timestamptz) END
                WHERE tenant_id = $1 AND id = $2 AND {_LIVE.format(now="$3")}
                RETURNING {MEMORY_COLUMNS}),
            feed AS ({event_insert("changed", "'merged'", "$3", _MERGED_FIELDS, "$6", "'merged'")})
            SELECT * FROM changed""",
        memory.tenant_id,
        resolution.target_id,
        now,
        memory.confidence,
        memory.expires_at,
        with_content,
    )
    if row is None:
        return None
    if memory.idempotency_key:
        await connection.execute(
            """INSERT INTO merged_write_keys (tenant_id, idempotency_key, memory_id, created_at)
               VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING""",
            memory.tenant_id,
            memory.idempotency_key,
            resolution.target_id,
            now,
        )
    return WriteOutcome(
        memory_from_row(row), created=False, resolution=Resolution.MERGED, reason=resolution.reason
    )


async def _lock_live(connection: asyncpg.Connection, tenant_id: str, memory_id: str, now: datetime) -> bool:
    """Locks a supersede target until the transaction ends, if it is still live; False when it is not
    (deleted, expired or superseded since the peers were read). Holding the row lock from here to
    _mark_superseded makes a concurrent Delete wait, and then apply to the superseded version."""
    live = await connection.fetchval(
        f"""SELECT true FROM memories WHERE tenant_id = $1 AND id = $2 AND {_LIVE.format(now="$3")}
            FOR UPDATE""",
        tenant_id,
        memory_id,
        now,
    )
    return bool(live)


async def _mark_superseded(connection: asyncpg.Connection, memory: Memory, now: datetime) -> None:
    """The replaced version (locked live by _lock_live): superseded from now on (recorded time; as_of
    reads updated_at), and no longer true in the world from when the new version is (valid time),
    unless it says otherwise. Its `superseded` event follows the new version's `created`."""
    await connection.execute(
        f"""WITH changed AS (
                UPDATE memories
                SET status = 'superseded', superseded_by = $3, updated_at = $4, version = version + 1,
                    valid_to = CASE WHEN valid_to IS NULL AND (valid_from IS NULL OR valid_from < $5)
                                    THEN $5 ELSE valid_to END
                WHERE tenant_id = $1 AND id = $2 AND status = 'active'
                RETURNING {MEMORY_COLUMNS})
            {event_insert("changed", "'superseded'", "$4", _SUPERSEDED_FIELDS, "false")}""",
        memory.tenant_id,
        memory.supersedes,
        memory.id,
        now,
        memory.valid_from or now,
    )


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


def _derive(content: str) -> _Analysed:
    return _Analysed(analyse(content), language(content), content_key(content), fact_keys(content))


def _analyse(memories: Sequence[Memory]) -> list[_Analysed]:
    return [_derive(m.content) for m in memories]
