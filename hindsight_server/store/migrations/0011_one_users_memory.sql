-- One user's memory: a tenant whose recalls name one subject holding most of its rows.
--
-- 1. The planner multiplied the selectivities of tenant_id and subject as if they were independent:
--    for a subject holding all 10,000 memories of its tenant it estimated 376 rows, sorted them all by
--    exact distance instead of walking HNSW (100 ms instead of 1 ms), and planned the other channels'
--    statements on the same error. Extended statistics give it the pairs' real frequencies. (The vector
--    searches do not rely on them: the server counts a scope and chooses, store/memories.py.)
CREATE STATISTICS IF NOT EXISTS memories_tenant_subject (mcv, dependencies, ndistinct)
    ON tenant_id, subject FROM memories;

-- 2. A vector (2 KB multilingual, 1.5 KB English) pushed its row past the 2 KB TOAST threshold, so it
--    lived out of line: an exact scan of a subject's rows read ~3 TOAST pages a row (10,000 rows:
--    31,000 buffers, 29 ms) where an inline vector costs one heap page (5,000 buffers, 13 ms). MAIN
--    keeps it in the row unless the row would not fit a page. It applies to rows written from now on.
ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN,
                     ALTER COLUMN embedding_en SET STORAGE MAIN;

-- 3. An English query searches the English vectors, and the multilingual ones only of the memories
--    that have no English vector (Chinese ones, or English ones the worker has not reached): usually
--    few, found through this index instead of a walk of the multilingual graph.
CREATE INDEX memories_without_english ON memories (tenant_id, subject)
    WHERE embedding_en IS NULL AND embedding IS NOT NULL;

-- 4. The structured channel's time window (the newest memories a time expression speaks of: "in May
--    2023", "上周三") read every memory of the subject and sorted them: 15-20 ms at 10,000, growing with
--    the user's memory. This index hands over the window's newest first. A recall that names no subject
--    reads it by B-tree skip scan (PostgreSQL 18).
CREATE INDEX memories_subject_time ON memories (tenant_id, subject, (coalesce(valid_from, created_at)));

-- 5. The lexical channel ANDed its terms' GIN bitmap (746 rows) with a bitmap of the whole tenant from a
--    B-tree (100,019 rows, 13 of its 25 ms at 100,000 memories). One GIN index over (tenant_id, lexical)
--    finds the tenant's matching rows by itself (0.4 ms); btree_gin (contrib, a trusted extension)
--    gives text its GIN operator class. It replaces the index on lexical alone: every lexical search
--    names its tenant.
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE INDEX memories_tenant_lexical ON memories USING gin (tenant_id, lexical);
DROP INDEX memories_lexical;

ANALYZE memories;
