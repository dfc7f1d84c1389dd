-- The per-tenant change feed (Watch, store/feed.py): a transactional outbox. Every change to a memory
-- writes its event row in the transaction that makes the change, so an event exists exactly when its
-- change committed: none lost (a crash after the commit) and none phantom (a rollback takes the event
-- with it). It needs nothing of the server beyond SQL: it works on the embedded PostgreSQL, behind a
-- pooler and with streaming replicas, with no replication slot to create, watch and drop (logical
-- decoding would need wal_level=logical, a slot per consumer that holds WAL back while it lags, and
-- an output plugin to decode memories' rows, content included, into events).
--
-- Order: `xid` is the writing transaction's id, `seq` a sequence value taken at insert. Neither is the
-- commit order; a reader serves only events whose xid is below the xmin of its statement's snapshot
-- (every transaction below it has ended: committed and visible, or rolled back), in (xid, seq) order.
-- A cursor is an (xid, seq) position; every event served later has a larger xid than any served
-- before it, so a reader resuming after a position misses none and sees none twice (store/feed.py).
CREATE SEQUENCE change_events_seq;
CREATE TABLE change_events (
    tenant_id   text        NOT NULL,
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id(),
    seq         bigint      NOT NULL DEFAULT nextval('change_events_seq'),
    id          uuid        NOT NULL DEFAULT gen_random_uuid(),  -- the event's stable id
    at          timestamptz NOT NULL,
    type        text        NOT NULL,
    memory_id   uuid,
    subject     text        NOT NULL DEFAULT '',
    kind        text        NOT NULL DEFAULT '',
    visibility  text        NOT NULL DEFAULT 'shared',
    agent_id    text        NOT NULL DEFAULT '',
    resolution  text        NOT NULL DEFAULT '',
    version     bigint      NOT NULL DEFAULT 0,   -- the memory's version after the change
    fields      text[]      NOT NULL DEFAULT '{}', -- the fields the change set
    content     text,                              -- only for tenants whose feed carries content
    PRIMARY KEY (tenant_id, xid, seq)
);
-- Retention deletes by time, in batches (the lifecycle job `feed`).
CREATE INDEX change_events_at ON change_events (at);
-- Erasure scrubs a memory's events in its transaction.
CREATE INDEX change_events_memory ON change_events (tenant_id, memory_id);
-- Per tenant, the last position retention dropped: a cursor at or before it may have missed events.
CREATE TABLE change_feed_trimmed (
    tenant_id text   NOT NULL PRIMARY KEY,
    xid       xid8   NOT NULL,
    seq       bigint NOT NULL
);
