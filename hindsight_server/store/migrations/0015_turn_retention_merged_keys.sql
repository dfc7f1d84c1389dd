-- Retention of the raw conversation, superseded versions, and merged writes' idempotency keys.

-- When the server stored a turn: the purge counts a turn's age from it, like its working memory's
-- (occurred_at is the caller's to choose). Turns stored before this column count from occurred_at, so
-- no row is rewritten here.
ALTER TABLE session_turns ADD COLUMN recorded_at timestamptz;
CREATE INDEX session_turns_age ON session_turns ((coalesce(recorded_at, occurred_at)));

-- Superseded versions age out a while after they were replaced (updated_at is set then, and a
-- superseded memory is not updated again).
CREATE INDEX memories_superseded ON memories (updated_at) WHERE status = 'superseded';

-- A write merged into an existing memory keeps its idempotency key here, so its retry is answered
-- with that memory instead of merging (and counting) again. The key leaves with the memory.
CREATE TABLE merged_write_keys (
    tenant_id       text        NOT NULL,
    idempotency_key text        NOT NULL,
    memory_id       uuid        NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key),
    FOREIGN KEY (tenant_id, memory_id) REFERENCES memories (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX merged_write_keys_memory ON merged_write_keys (tenant_id, memory_id);

-- The embedding worker claims pending rows with a lease instead of holding their locks through the
-- inference calls (an Update or Delete of a claimed row no longer waits for Triton): a claimed row is
-- not offered again before embedding_retry_at. A row whose embedding failed waits there too, longer
-- after each attempt, so one that always fails does not hold back the rest of the backlog.
ALTER TABLE memories
    ADD COLUMN embedding_retry_at timestamptz,
    ADD COLUMN embedding_attempts integer NOT NULL DEFAULT 0;
