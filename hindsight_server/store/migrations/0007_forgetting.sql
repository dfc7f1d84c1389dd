-- Forgetting: the lifecycle jobs' lookups (store/lifecycle.py).

-- Purging a memory nulls the version links that point at it, and the foreign keys check them on every
-- DELETE: without these indexes each purged row costs a scan of the whole table (twice).
CREATE INDEX memories_supersedes ON memories (supersedes) WHERE supersedes IS NOT NULL;
CREATE INDEX memories_superseded_by ON memories (superseded_by) WHERE superseded_by IS NOT NULL;
-- Deleted memories are purged a grace period after their deletion (expired ones after their expiry,
-- which memories_expiry already orders).
CREATE INDEX memories_deleted ON memories (updated_at) WHERE status = 'deleted';
