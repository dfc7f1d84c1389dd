-- Session order is (created_at, id): the context channel's "turn before / after" walks this index in
-- either direction and stops at the first row (without id, ties forced a sort of the session).
DROP INDEX IF EXISTS memories_tenant_session;
CREATE INDEX memories_tenant_session ON memories (tenant_id, session_id, created_at, id)
    WHERE session_id <> '';
