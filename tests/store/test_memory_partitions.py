"""The memories table partitioned by tenant (migration 0012): its shape, what a tenant's statements read,
and the rewrite of a table written before it."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
import pytest

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import DatabaseSettings
from hindsight_server.domain.bm25 import Bm25
from hindsight_server.domain.model import Scope, VectorSpace
from hindsight_server.pipelines.statistics import StatisticsRefresh
from hindsight_server.process.running import RunningServer
from hindsight_server.store.channels import RecallChannels
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.migrate import EmbeddingDimensions, SchemaShape, available_migrations, migrate
from tests.support.eventually import eventually
from tests.support.plans import plan_nodes

PARTITIONING = 12  # the migration that partitions the table


def _shape(partitions: int) -> SchemaShape:
    return SchemaShape(EmbeddingDimensions(multilingual=3, english=2, chinese=2), partitions)


async def _partitions(connection: asyncpg.Connection) -> list[str]:
    rows = await connection.fetch(
        """SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
           WHERE i.inhparent = 'memories'::regclass ORDER BY c.relname"""
    )
    return [row["relname"] for row in rows]


def _scanned_relations(plan: Any) -> set[str]:
    """Every table an EXPLAIN (FORMAT JSON) plan reads."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            found.add(plan["Relation Name"])
        for value in plan.values():
            found |= _scanned_relations(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _scanned_relations(value)
    return found


async def test_the_live_table_is_hash_partitioned_by_tenant_and_every_partition_has_every_index(
    server: RunningServer,
) -> None:
    async with server.pool.acquire() as connection:
        key = await connection.fetchval("SELECT pg_get_partkeydef('memories'::regclass)")
        partitions = await _partitions(connection)
        parent_indexes = await connection.fetchval(
            "SELECT count(*) FROM pg_index WHERE indrelid = 'memories'::regclass"
        )
        per_partition = await connection.fetch(
            """SELECT c.relname, count(x.indexrelid) AS indexes, c.reloptions,
                      (SELECT count(*) FROM pg_statistic_ext s WHERE s.stxrelid = c.oid) AS stats
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               LEFT JOIN pg_index x ON x.indrelid = c.oid
               WHERE i.inhparent = 'memories'::regclass GROUP BY c.oid, c.relname, c.reloptions"""
        )
        storage = await connection.fetch(
            """SELECT attname, attstorage FROM pg_attribute
               WHERE attrelid = ANY(SELECT inhrelid FROM pg_inherits WHERE inhparent = 'memories'::regclass)
                 AND attname IN ('embedding', 'embedding_en', 'embedding_en_ctx')"""
        )
    assert key == "HASH (tenant_id)"
    assert len(partitions) == DatabaseSettings().memory_partitions == 16
    assert partitions[0] == "memories_p00" and partitions[-1] == "memories_p15"
    assert parent_indexes >= 19  # 0001-0011's indexes and the primary key
    for row in per_partition:
        assert row["indexes"] == parent_indexes, row["relname"]
        assert row["reloptions"] == ["fillfactor=80"], row["relname"]
        assert row["stats"] == 1, row["relname"]  # (tenant_id, subject) statistics of its own
    # The vectors searched stay in the row (0011); the English context vector, read for candidates only,
    # out of it (0029), so that a recalled memory's row stays small enough for cheap updates.
    assert {(row["attname"], row["attstorage"]) for row in storage} == {
        ("embedding", b"m"),
        ("embedding_en", b"m"),
        ("embedding_en_ctx", b"e"),
    }


async def test_a_tenants_vector_lexical_and_context_statements_read_its_partition_only(
    server: RunningServer,
) -> None:
    dimension = await server.pool.fetchval(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
    )
    vector = [0.1] * dimension
    statements: dict[str, tuple[str, list[Any]]] = {
        "vector": (
            """SELECT id FROM memories WHERE tenant_id = $1 AND subject = $2 AND status = 'active'
               ORDER BY embedding <=> $3::vector LIMIT 10""",
            ["some-tenant", "ann", vector],
        ),
        "lexical": (
            "SELECT id FROM memories WHERE tenant_id = $1 AND lexical @@ 'camp'::tsquery LIMIT 10",
            ["some-tenant"],
        ),
        "context": (
            """SELECT m.id FROM unnest($2::uuid[]) AS c(id)
               JOIN memories m ON m.tenant_id = $1 AND m.id = c.id""",
            ["some-tenant", [uuid.uuid4()]],
        ),
    }
    async with server.pool.acquire() as connection:
        for name, (statement, args) in statements.items():
            plan = json.loads(await connection.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args))
            relations = _scanned_relations(plan)
            assert len(relations) == 1 and relations.pop().startswith("memories_p"), (name, plan)


async def test_the_partition_count_is_fixed_when_the_table_is_created(
    fresh_database: Callable[[], Awaitable[str]], caplog: pytest.LogCaptureFixture
) -> None:
    dsn = await fresh_database()
    await migrate(dsn, _shape(4))
    with caplog.at_level(logging.WARNING, logger="hindsight_server.store.migrate"):
        assert await migrate(dsn, _shape(8)) == []  # nothing to apply: the table keeps its 4
    assert "has 4 partitions; database.memory_partitions=8" in caplog.text
    connection = await asyncpg.connect(dsn)
    try:
        assert await _partitions(connection) == ["memories_p0", "memories_p1", "memories_p2", "memories_p3"]
    finally:
        await connection.close()


async def test_a_table_written_before_partitioning_is_rewritten_whole(
    fresh_database: Callable[[], Awaitable[str]],
) -> None:
    """Every row, column and version link survives; each tenant's rows land in one partition; the keys
    that needed tenant_id now have it."""
    dsn = await fresh_database()
    shape = _shape(4)
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in available_migrations():
            if migration.version < PARTITIONING:
                await connection.execute(shape.fill(migration.sql))
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
        now = datetime.now(UTC)
        ids = {name: uuid.uuid4() for name in ("old", "new", "other")}
        rows = [
            ("old", "t-1", "status", "superseded", None, ids["new"], "[1,0,0]"),
            ("new", "t-1", "status", "active", ids["old"], None, "[0,1,0]"),
            ("other", "t-2", "fact", "active", None, None, None),
        ]
        for name, tenant, kind, status, _, _, embedding in rows:
            await connection.execute(
                """INSERT INTO memories (id, tenant_id, subject, tier, kind, content, status, created_at,
                                         updated_at, embedding_state, embedding, lexical, supersedes,
                                         entities, provenance)
                   VALUES ($1, $2, 'ann', 'semantic', $3, $4, $5, $6, $6, 'ready', $7::vector,
                           to_tsvector('simple', $4), NULL, '{"city": "Oslo"}', '{"source": "test"}')""",
                ids[name],
                tenant,
                kind,
                f"{name} memory",
                status,
                now,
                embedding,
            )
        for name, _, _, _, supersedes, superseded_by, _ in rows:
            await connection.execute(
                "UPDATE memories SET supersedes = $2, superseded_by = $3 WHERE id = $1",
                ids[name],
                supersedes,
                superseded_by,
            )
        before = {
            row["id"]: dict(row) for row in await connection.fetch("SELECT * FROM memories ORDER BY id")
        }

        assert await migrate(dsn, shape) == [
            m.name for m in available_migrations() if m.version >= PARTITIONING
        ]

        after = {row["id"]: dict(row) for row in await connection.fetch("SELECT * FROM memories ORDER BY id")}
        # Later migrations may add columns (0015: the embedding lease); every column there before is kept.
        assert {key: {column: row[column] for column in before[key]} for key, row in after.items()} == before
        homes = await connection.fetch(
            "SELECT tenant_id, count(DISTINCT tableoid) AS partitions FROM memories GROUP BY tenant_id"
        )
        assert {row["tenant_id"]: row["partitions"] for row in homes} == {"t-1": 1, "t-2": 1}
        keys = await connection.fetch(
            """SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint
               WHERE conrelid = 'memories'::regclass AND contype IN ('p', 'f') AND conparentid = 0"""
        )
        link = "FOREIGN KEY (tenant_id, {}) REFERENCES memories(tenant_id, id)"
        assert {row["conname"]: row["definition"] for row in keys} == {
            "memories_pkey": "PRIMARY KEY (tenant_id, id)",
            "memories_superseded_by_fkey": link.format("superseded_by"),
            "memories_supersedes_fkey": link.format("supersedes"),
        }
        # A version link into another tenant is refused now (it was not before).
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await connection.execute(
                "UPDATE memories SET supersedes = $1 WHERE id = $2", ids["old"], ids["other"]
            )
    finally:
        await connection.close()


class RecordingPool:
    """The pool's statements as the channels send them, each with its arguments (those sent to the
    connections with pinned plans too: their plans are checked here as the shared connections make
    them, for the same parameters)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    @property
    def pinned(self) -> RecordingPool:
        return self

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        self.statements.append((query, args))
        rows: list[asyncpg.Record] = await self.pool.fetch(query, *args)
        return rows

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        self.statements.append((query, args))
        return await self.pool.fetchrow(query, *args)


async def test_every_statement_of_recalls_channels_is_planned_on_the_tenants_partition_only(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """A tenant that reaches the planner only through a join (m.tenant_id) cannot be pruned when the
    statement is planned: planning then covers every partition (the context statement took 10 ms to
    plan that way, 0.6 ms pruned)."""
    written = await client.write_batch(
        tenant,
        [
            memory_input(
                f"ann went camping at lake {i}",
                tier="episodic",
                kind="event",
                subject="ann",
                session_id="s-1",
                entities={"place": f"lake {i}"},
            )
            for i in range(4)
        ],
        verbatim=True,
    )
    ids = [result.memory.id for result in written.results]
    dimension = await server.pool.fetchval(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
    )
    recorder = RecordingPool(server.pool)
    channels = RecallChannels(recorder)
    scope = Scope(tenant_id=tenant, now=datetime.now(UTC), subject="ann")
    spaces = [VectorSpace.MULTILINGUAL]
    bm25 = Bm25(k1=1.2, b=0.75, common_term_share=1.0, match_terms=4, match_rows=300)
    assert (await channels.lexical_channel(scope, ["camping", "lake"], 10, bm25, spaces)).hits
    assert (await channels.structured_channel(scope, {"place": "lake 1"}, 10, spaces)).hits
    assert (await channels.session_channel(scope, "s-1", 10, spaces)).hits
    for exact in (True, False):
        await channels.vector_channel(
            scope, np.full(dimension, 0.1, np.float32), 10, spaces[0], spaces, exact=exact
        )
    await channels.scope_size(tenant, "ann")
    around, _ = await channels.adjacent_turns(scope, ids[1:3], spaces)
    assert around.hits

    assert len(recorder.statements) >= 8
    for statement, args in recorder.statements:
        plan = json.loads(await server.pool.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args))
        partitions = {name for name in _scanned_relations(plan) if name.startswith("memories")}
        assert len(partitions) <= 1, (statement, sorted(partitions))


async def test_a_grown_tenants_statements_are_planned_for_its_size(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """A tenant written since the last ANALYZE is estimated at one row: the planner then read all of
    its rows once for each memory the context statement was given (1,030 rows x 1,030 loops, 1.6 s
    during an import). Once its partition is analyzed, each probe reads one row."""
    written = await client.write_batch(
        tenant,
        [
            memory_input(f"turn {i} of a long chat", tier="episodic", kind="event", session_id="s-1")
            for i in range(400)
        ],
        verbatim=True,
    )
    ids = [result.memory.id for result in written.results]
    refresh = StatisticsRefresh(MemoryStore(server.pool), after_rows=300)
    refresh.note_written(tenant, 400)
    assert await refresh.refresh_next() == tenant

    recorder = RecordingPool(server.pool)
    scope = Scope(tenant_id=tenant, now=datetime.now(UTC))
    around, _ = await RecallChannels(recorder).adjacent_turns(scope, ids[100:120], [VectorSpace.MULTILINGUAL])
    assert around.hits
    ((statement, args),) = recorder.statements
    plan = json.loads(await server.pool.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *args))
    scans = [node for node in plan_nodes(plan) if node.get("Relation Name", "").startswith("memories")]
    assert scans
    for scan in scans:  # each probe reads at most one row: no scan of the tenant
        assert scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0) <= 1, scan


async def test_a_server_analyzes_a_tenants_partition_after_writing_enough_into_it(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    after_rows = DatabaseSettings().analyze_after_rows
    await client.write_batch(tenant, [memory_input("first", tier="semantic", kind="fact")], verbatim=True)
    partition = await server.pool.fetchval(
        "SELECT tableoid::regclass::text FROM memories WHERE tenant_id = $1 LIMIT 1", tenant
    )
    analyzed = "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = $1"  # not autovacuum's
    before = await server.pool.fetchval(analyzed, partition)
    for start in range(0, after_rows, 500):
        await client.write_batch(
            tenant,
            [memory_input(f"note {i}", tier="semantic", kind="fact") for i in range(start, start + 500)],
            verbatim=True,
        )
    await eventually(lambda: _analyzed_since(server, partition, before), timeout_s=10)


async def test_a_server_analyzes_a_tenants_partition_after_an_import_into_it(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """An import is the tenant that grows most at once: it counts as the writes do."""
    after_rows = DatabaseSettings().analyze_after_rows
    source = f"{tenant}-source"
    await client.write_batch(
        source, [memory_input(f"note {i}", tier="semantic", kind="fact") for i in range(500)], verbatim=True
    )
    exported = [item.memory async for item in client.export(source) if item.HasField("memory")]
    await client.import_memories(tenant, [_copy(exported[0], after_rows)])  # its partition, found
    partition = await server.pool.fetchval(
        "SELECT tableoid::regclass::text FROM memories WHERE tenant_id = $1 LIMIT 1", tenant
    )
    analyzed = "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = $1"
    before = await server.pool.fetchval(analyzed, partition)
    for copy in range(after_rows // len(exported)):
        await client.import_memories(tenant, [_copy(m, copy) for m in exported], timeout_s=60)
    await eventually(lambda: _analyzed_since(server, partition, before), timeout_s=10)


async def _analyzed_since(server: RunningServer, partition: str, count: int) -> bool:
    """ANALYZE ran on the partition since its analyze_count was `count` (statistics read afresh)."""
    await server.pool.execute("SELECT pg_stat_clear_snapshot()")
    analyzed = "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = $1"  # not autovacuum's
    return bool(await server.pool.fetchval(analyzed, partition) > count)


def _copy(memory: pb.ExportedMemory, copy: int) -> pb.ExportedMemory:
    """The memory under an id (and without a key) of its own per copy: each import inserts it anew."""
    copied = pb.ExportedMemory()
    copied.CopyFrom(memory)
    copied.memory.id = str(uuid.UUID(int=uuid.UUID(memory.memory.id).int ^ (copy + 1)))
    copied.memory.idempotency_key = ""
    return copied
