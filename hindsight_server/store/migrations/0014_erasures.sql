-- One row per erasure (Erase: a subject, a tenant, or named memories): the audit record that stays
-- (who, what scope, when, counts; never content) and the state an erasure cut short resumes from.
CREATE TABLE erasures (
    tenant_id     text        NOT NULL,
    id            uuid        NOT NULL,
    scope         text        NOT NULL CHECK (scope IN ('subject', 'tenant', 'memories')),
    subject       text,                  -- scope 'subject'
    memory_ids    uuid[],                -- scope 'memories'
    reason        text        NOT NULL DEFAULT '',
    requested_by  text        NOT NULL,  -- the API key id, or how the call was let in without one
    request_id    text        NOT NULL DEFAULT '',
    requested_at  timestamptz NOT NULL,
    state         text        NOT NULL CHECK (state IN ('running', 'done')),
    heartbeat_at  timestamptz NOT NULL,  -- moved on by each batch; a stale one is resumed by the job
    finished_at   timestamptz,
    memories      bigint      NOT NULL DEFAULT 0,
    sessions      bigint      NOT NULL DEFAULT 0,
    turns         bigint      NOT NULL DEFAULT 0,
    replies       bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX erasures_running ON erasures (heartbeat_at) WHERE state = 'running';
CREATE INDEX erasures_tenant ON erasures (tenant_id, requested_at DESC);
CREATE INDEX erasures_finished ON erasures (finished_at) WHERE state = 'done';

-- An erasure follows derived_from to every memory made from an erased one (an episode, a habit): only
-- consolidated memories have sources, so the index is small.
CREATE INDEX memories_derived_from ON memories USING gin (tenant_id, derived_from)
    WHERE derived_from <> '{}';
