-- Memories partitioned by tenant: {{MEMORY_PARTITIONS}} hash partitions of tenant_id
-- (database.memory_partitions, fixed when this migration runs).
--
-- Every recall names its tenant, so it reads one partition: its own HNSW graphs, B-trees and GIN index,
-- a share of the table. A tenant's filtered graph walk visits ~k x N / n nodes (domain/search_plan.py):
-- with N the partition instead of the whole table, a user's search no longer slows down as other
-- tenants fill the database (one user's 10,000 memories in a 353,000-memory table: vector statement
-- p50 1 ms at 230,000, 5.9 ms at 353,000; BENCHMARKS.md). It is also the shape Citus distributes by
-- tenant: every key leads with tenant_id.
--
-- The table is rewritten once: rows are copied before any index exists, then each index is built
-- partition by partition (maintenance_work_mem for one partition's graph, not the whole table's).
SET LOCAL maintenance_work_mem = '512MB';

ALTER TABLE memories RENAME TO memories_before_partitioning;
DROP STATISTICS IF EXISTS memories_tenant_subject;

-- Columns, defaults, CHECK constraints (with their names: store/errors.py maps them to fields) and
-- column storage (vectors in the row, 0011) as they were.
CREATE TABLE memories (
    LIKE memories_before_partitioning INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE
) PARTITION BY HASH (tenant_id);

-- Storage parameters and extended statistics belong to each partition (a pruned statement is planned
-- on its partition's statistics): room for HOT access updates (0010), the real frequency of each
-- (tenant, subject) pair (0011).
DO $$
DECLARE
    partitions constant integer := {{MEMORY_PARTITIONS}};
    digits constant integer := length((partitions - 1)::text);
    name text;
BEGIN
    FOR remainder IN 0 .. partitions - 1 LOOP
        name := 'memories_p' || lpad(remainder::text, digits, '0');
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF memories FOR VALUES WITH (MODULUS %s, REMAINDER %s)'
            ' WITH (fillfactor = 80)', name, partitions, remainder);
        EXECUTE format(
            'CREATE STATISTICS %I (mcv, dependencies, ndistinct) ON tenant_id, subject FROM %I',
            name || '_tenant_subject', name);
    END LOOP;
END
$$;

INSERT INTO memories SELECT * FROM memories_before_partitioning;
DROP TABLE memories_before_partitioning;

-- A key unique within its tenant; version links stay inside the tenant.
ALTER TABLE memories
    ADD CONSTRAINT memories_pkey PRIMARY KEY (tenant_id, id),
    ADD CONSTRAINT memories_supersedes_fkey
        FOREIGN KEY (tenant_id, supersedes) REFERENCES memories (tenant_id, id),
    ADD CONSTRAINT memories_superseded_by_fkey
        FOREIGN KEY (tenant_id, superseded_by) REFERENCES memories (tenant_id, id);

-- The indexes of 0001-0011, each now one per partition. The version-link indexes lead with tenant_id
-- like the foreign keys they serve.
CREATE UNIQUE INDEX memories_idempotency ON memories (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX memories_tenant_created ON memories (tenant_id, created_at DESC, id DESC);
CREATE INDEX memories_tenant_subject ON memories (tenant_id, subject, created_at DESC);
CREATE INDEX memories_tenant_session ON memories (tenant_id, session_id, created_at, id)
    WHERE session_id <> '';
CREATE INDEX memories_tenant_tier_kind ON memories (tenant_id, tier, kind, status);
CREATE INDEX memories_entities ON memories USING gin (entities jsonb_path_ops);
CREATE INDEX memories_tenant_lexical ON memories USING gin (tenant_id, lexical);
CREATE INDEX memories_embedding_pending ON memories (created_at) WHERE embedding_state = 'pending';
CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memories_peers ON memories (tenant_id, subject, kind, tier, md5(content_key))
    WHERE status = 'active';
CREATE INDEX memories_episodes ON memories (tenant_id, subject, intent)
    WHERE tier = 'episodic' AND status = 'active';
CREATE INDEX memories_supersedes ON memories (tenant_id, supersedes) WHERE supersedes IS NOT NULL;
CREATE INDEX memories_superseded_by ON memories (tenant_id, superseded_by) WHERE superseded_by IS NOT NULL;
CREATE INDEX memories_deleted ON memories (updated_at) WHERE status = 'deleted';
CREATE INDEX memories_without_english ON memories (tenant_id, subject)
    WHERE embedding_en IS NULL AND embedding IS NOT NULL;
CREATE INDEX memories_subject_time ON memories (tenant_id, subject, (coalesce(valid_from, created_at)));
CREATE INDEX memories_embedding ON memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memories_embedding_en ON memories USING hnsw (embedding_en vector_cosine_ops);

ANALYZE memories;
