-- A server may hold a whole tenant's memories, not only a subject's (pipelines/hot_scopes.py): its look
-- at each recall asks what changed in the tenant since the last one. The changes are indexed by tenant
-- instead of by subject; a subject's look reads the same entries and keeps its subject's rows, which
-- costs little because a look reads only the changes since the previous look (a few rows).
CREATE INDEX memories_tenant_changes ON memories (tenant_id, change_xid);
DROP INDEX memories_scope_changes;
