-- Memory that stays true over time: dedupe counters, provenance, sessions, and the purge audit.

ALTER TABLE memories
    ADD COLUMN seen_count   bigint      NOT NULL DEFAULT 1,
    ADD COLUMN last_seen_at timestamptz,
    -- The normalised content (domain.conflicts.content_key): exact duplicates merge without embeddings.
    ADD COLUMN content_key  text,
    ADD COLUMN derived_from uuid[]      NOT NULL DEFAULT '{}',
    ADD COLUMN provenance   jsonb       NOT NULL DEFAULT '{}';

-- Conflict resolution looks up a new memory's active peers: same tenant, subject, kind and tier.
CREATE INDEX memories_peers ON memories (tenant_id, subject, kind, tier, content_key)
    WHERE status = 'active';
-- Episodic -> semantic pattern detection reads a subject's episodes by intent.
CREATE INDEX memories_episodes ON memories (tenant_id, subject, intent)
    WHERE tier = 'episodic' AND status = 'active';

-- A conversation: its turns are the source of the working memory, the summary and the episodes.
CREATE TABLE sessions (
    tenant_id          text        NOT NULL,
    session_id         text        NOT NULL,
    subject            text        NOT NULL DEFAULT '',
    agent_id           text        NOT NULL DEFAULT '',
    turn_count         bigint      NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    last_turn_at       timestamptz NOT NULL,
    summary            jsonb,                 -- domain.session_summary.SessionSummary, as stored
    summary_turn       bigint      NOT NULL DEFAULT 0,  -- turn_count when the summary was refreshed
    summary_updated_at timestamptz,
    summary_memory_id  uuid,                  -- the working-tier memory that carries the summary text
    consolidated_turn  bigint      NOT NULL DEFAULT 0,  -- turns up to here are in an episode
    PRIMARY KEY (tenant_id, session_id)
);
-- The idle-consolidation job finds sessions with unconsolidated turns, oldest activity first.
CREATE INDEX sessions_unconsolidated ON sessions (last_turn_at) WHERE turn_count > consolidated_turn;

CREATE TABLE session_turns (
    tenant_id       text        NOT NULL,
    session_id      text        NOT NULL,
    turn_index      bigint      NOT NULL,
    role            text        NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    text            text        NOT NULL,
    entities        jsonb       NOT NULL DEFAULT '{}',
    occurred_at     timestamptz NOT NULL,
    idempotency_key text,
    memory_id       uuid,                      -- the turn's working-tier memory
    PRIMARY KEY (tenant_id, session_id, turn_index),
    FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, session_id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX session_turns_idempotency ON session_turns (tenant_id, session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Every purge leaves a row: what, when and why; never the content.
CREATE TABLE purge_audit (
    id         bigserial   PRIMARY KEY,
    tenant_id  text        NOT NULL,
    memory_id  uuid        NOT NULL,
    tier       text        NOT NULL,
    kind       text        NOT NULL,
    status     text        NOT NULL,  -- the status it had when purged
    reason     text        NOT NULL,
    created_at timestamptz NOT NULL,  -- when the memory was recorded
    purged_at  timestamptz NOT NULL
);
CREATE INDEX purge_audit_tenant ON purge_audit (tenant_id, purged_at DESC);

-- Each lifecycle job's last run, for `hindsight jobs` and the schedule.
CREATE TABLE job_runs (
    job         text        PRIMARY KEY,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    processed   bigint      NOT NULL DEFAULT 0,
    server      text        NOT NULL DEFAULT ''
);
