-- The embedding queue is claimed tenant by tenant (store/embeddings.py): the tenants with pending rows
-- are found by skipping along this index, and each one's oldest rows are read from it, so one tenant's
-- backlog, however long, is never read through to reach another's. It replaces the index on pending
-- rows by age alone (0012), which a count of the backlog reads as well as this one.
CREATE INDEX memories_embedding_queue ON memories (tenant_id, created_at) WHERE embedding_state = 'pending';
DROP INDEX memories_embedding_pending;
