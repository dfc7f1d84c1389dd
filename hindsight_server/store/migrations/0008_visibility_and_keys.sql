-- Agents sharing memory, requests safe to retry, and API keys per tenant.

-- Who may see a memory inside its tenant: every agent (shared) or only the one that wrote it (private).
ALTER TABLE memories
    ADD COLUMN visibility text NOT NULL DEFAULT 'shared' CHECK (visibility IN ('shared', 'private')),
    ADD CONSTRAINT memories_private_has_agent CHECK (visibility = 'shared' OR agent_id <> '');

-- The answer to a mutating request that carried an idempotency key: a retry gets it back instead of
-- changing anything again. `response` is NULL while the first call is still running.
CREATE TABLE request_replies (
    tenant_id  text        NOT NULL,
    method     text        NOT NULL,
    key        text        NOT NULL,
    fingerprint bytea      NOT NULL,  -- the request's hash: the same key with another request is refused
    response   bytea,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, method, key)
);
CREATE INDEX request_replies_age ON request_replies (created_at);

-- API keys: the secret is shown once at creation; only its SHA-256 is kept.
CREATE TABLE api_keys (
    key_id     text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    key_hash   bytea       NOT NULL,
    label      text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);
