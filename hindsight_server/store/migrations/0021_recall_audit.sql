-- The recall audit (audit.tenants, store/audit.py): which recalls a memory fed, for the tenants that
-- turn it on. One row per recall in recall_audit (who, when, a keyed hash of the query, its text only
-- where allowed, the ids returned and packed), and one row per (memory, recall) in
-- recall_audit_memories: the question asked of the audit is "which recalls did memory X feed, newest
-- first, a page at a time", and a B-tree on (tenant_id, memory_id, at, audit_id) answers each page as
-- one index range, however often X was recalled. A GIN index on the id arrays finds the rows too, but
-- in no order: every page would read and sort every recall that ever returned X (a user's standing
-- preference is returned by most of their recalls). The cost: top_k small rows a recall, written in
-- the same statement as the audit row.
CREATE TABLE recall_audit (
    tenant_id    text        NOT NULL,
    id           uuid        NOT NULL,  -- also the id of its recall.served event in change_events
    at           timestamptz NOT NULL,
    request_id   text        NOT NULL DEFAULT '',
    subject      text        NOT NULL DEFAULT '',
    agent_id     text        NOT NULL DEFAULT '',
    query_hash   text        NOT NULL,  -- HMAC-SHA256 with audit.query_hash_key (domain/audit.py)
    query_text   text,                  -- only for audit.query_text_tenants
    returned_ids uuid[]      NOT NULL DEFAULT '{}',  -- in rank order
    packed_ids   uuid[]      NOT NULL DEFAULT '{}',  -- those packed into the injection text
    event_xid    xid8,                  -- its recall.served event's key, for erasure
    event_seq    bigint,
    PRIMARY KEY (tenant_id, id)
);
-- A tenant's recalls by time, and a subject's.
CREATE INDEX recall_audit_by_time ON recall_audit (tenant_id, at, id);
CREATE INDEX recall_audit_by_subject ON recall_audit (tenant_id, subject, at, id);
-- Retention deletes by time across tenants, in batches (the lifecycle job `audit`).
CREATE INDEX recall_audit_at ON recall_audit (at);

CREATE TABLE recall_audit_memories (
    tenant_id text        NOT NULL,
    memory_id uuid        NOT NULL,
    at        timestamptz NOT NULL,  -- the recall's
    audit_id  uuid        NOT NULL,
    packed    boolean     NOT NULL,
    PRIMARY KEY (tenant_id, memory_id, at, audit_id)
);
-- No index of its own for retention or erasure: they delete a recall's rows by this key, from the
-- recall_audit row's returned_ids and at.

-- A recall.served event names every memory the recall returned and those it packed (memory_id, one
-- memory's, stays NULL for it).
ALTER TABLE change_events ADD COLUMN memory_ids uuid[];
ALTER TABLE change_events ADD COLUMN packed_ids uuid[];
