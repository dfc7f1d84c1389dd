-- The structured channel's time window in a recall that names no subject ("what did we plan last
-- week?" across the whole tenant) had only memories_subject_time, whose order holds within a subject:
-- a skip scan visited every subject and handed over every memory of the window to be sorted. At 1M
-- memories, the largest tenant (192,042 memories, 276 subjects) read 56,765 rows for a week's newest 20
-- (713 ms); through this index, backwards from the window's end, 22 rows (0.3 ms).
CREATE INDEX memories_tenant_time ON memories (tenant_id, (coalesce(valid_from, created_at)));
