-- The memory record (DESIGN.md). {{EMBEDDING_DIM}} is the configured embedding dimension, fixed when
-- the table is created; a server configured with another dimension refuses to start.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE memories (
    id                uuid PRIMARY KEY,
    tenant_id         text        NOT NULL,
    subject           text        NOT NULL DEFAULT '',
    agent_id          text        NOT NULL DEFAULT '',
    session_id        text        NOT NULL DEFAULT '',
    tier              text        NOT NULL CHECK (tier IN ('working', 'episodic', 'semantic')),
    kind              text        NOT NULL,
    intent            text        NOT NULL DEFAULT '',
    entities          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    content           text        NOT NULL,
    confidence        double precision NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    status            text        NOT NULL
                      CHECK (status IN ('active', 'pending', 'superseded', 'expired', 'deleted')),
    supersedes        uuid        REFERENCES memories (id),
    superseded_by     uuid        REFERENCES memories (id),
    valid_from        timestamptz,
    valid_to          timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    expires_at        timestamptz,
    access_count      bigint      NOT NULL DEFAULT 0,
    last_accessed_at  timestamptz,
    idempotency_key   text,
    embedding_state   text        NOT NULL CHECK (embedding_state IN ('pending', 'ready', 'disabled')),
    embedding         vector({{EMBEDDING_DIM}}),
    lexical           tsvector    NOT NULL,
    version           bigint      NOT NULL DEFAULT 1,
    CONSTRAINT memories_valid_range CHECK (valid_to IS NULL OR valid_from IS NULL OR valid_to > valid_from)
);

-- Idempotency: one memory per (tenant, key).
CREATE UNIQUE INDEX memories_idempotency ON memories (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- List and the structured / session channels: every query leads with the tenant.
CREATE INDEX memories_tenant_created ON memories (tenant_id, created_at DESC, id DESC);
CREATE INDEX memories_tenant_subject ON memories (tenant_id, subject, created_at DESC);
CREATE INDEX memories_tenant_session ON memories (tenant_id, session_id, created_at DESC)
    WHERE session_id <> '';
CREATE INDEX memories_tenant_tier_kind ON memories (tenant_id, tier, kind, status);
CREATE INDEX memories_entities ON memories USING gin (entities jsonb_path_ops);
CREATE INDEX memories_lexical ON memories USING gin (lexical);
CREATE INDEX memories_embedding ON memories USING hnsw (embedding vector_cosine_ops);
-- The background embedding worker claims from here.
CREATE INDEX memories_embedding_pending ON memories (created_at) WHERE embedding_state = 'pending';
CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL;
