"""The live schema against the rules Citus applies when tables are distributed by tenant_id
(create_distributed_table(..., 'tenant_id')) or replicated (create_reference_table): Citus itself does
not install here, so its rules are checked on the catalog.

1. Each table either holds a tenant's rows (it has tenant_id: distributed) or is marked shared by a
   comment starting "hindsight: shared" (a reference table).
2. Every primary key, unique constraint and unique index of a distributed table includes tenant_id
   (Citus enforces uniqueness per shard only).
3. A foreign key between distributed tables includes tenant_id on both sides at the same position (the
   rows it joins are on one shard); a shared table never references a distributed one.
4. No exclusion constraint on a distributed table lacks tenant_id.
"""

from __future__ import annotations

import asyncpg

from hindsight_server.process.running import RunningServer

SHARED = "hindsight: shared"


async def _tables(connection: asyncpg.Connection) -> dict[str, bool]:
    """Each table of the schema (partitions aside) -> whether it is distributed (not marked shared)."""
    rows = await connection.fetch(
        """SELECT c.relname, obj_description(c.oid, 'pg_class') AS comment,
                  EXISTS (SELECT 1 FROM pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
                      AS has_tenant
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"""
    )
    tables = {}
    for row in rows:
        shared = (row["comment"] or "").startswith(SHARED)
        assert shared or row["has_tenant"], f"{row['relname']}: neither tenant_id nor marked shared"
        tables[row["relname"]] = not shared
    return tables


async def test_the_schema_is_one_citus_can_distribute_by_tenant(server: RunningServer) -> None:
    async with server.pool.acquire() as connection:
        tables = await _tables(connection)
        distributed = [name for name, is_distributed in tables.items() if is_distributed]
        assert {"memories", "sessions", "session_turns", "lexical_stats", "lexical_df"} <= set(distributed)
        assert {"api_keys", "job_runs", "schema_migrations"} <= {n for n, d in tables.items() if not d}

        unique = await connection.fetch(
            """SELECT t.relname AS table_name, i.relname AS index_name,
                      array(SELECT a.attname FROM unnest(x.indkey) AS k(n)
                            JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n) AS columns
               FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
               WHERE (x.indisunique OR x.indisexclusion) AND t.relname = ANY($1::text[])""",
            distributed,
        )
        for row in unique:
            assert "tenant_id" in row["columns"], f"{row['table_name']}.{row['index_name']}: {row['columns']}"

        foreign = await connection.fetch(
            """SELECT c.conname, f.relname AS from_table, r.relname AS to_table,
                      array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY AS k(n, i)
                            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
                            ORDER BY k.i) AS from_columns,
                      array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY AS k(n, i)
                            JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n
                            ORDER BY k.i) AS to_columns
               FROM pg_constraint c
               JOIN pg_class f ON f.oid = c.conrelid JOIN pg_class r ON r.oid = c.confrelid
               WHERE c.contype = 'f' AND c.conparentid = 0 AND NOT f.relispartition"""
        )
    assert foreign, "the schema has foreign keys to check"
    for row in foreign:
        source, target = tables.get(row["from_table"]), tables.get(row["to_table"])
        assert not (source is False and target is True), (
            f"{row['conname']}: a shared table refers to a tenant's"
        )
        if source and target:
            position = row["from_columns"].index("tenant_id") if "tenant_id" in row["from_columns"] else -1
            assert position >= 0 and row["to_columns"][position] == "tenant_id", (
                f"{row['conname']}: {row['from_columns']} -> {row['to_columns']}"
            )
