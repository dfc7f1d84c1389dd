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
    session_id  text        NOT NULL DEFAULT '',   -- "consolidated": the session folded into memory_id
    erasure_id  text        NOT NULL DEFAULT '',   -- "erasure_finished": the erasure that ended
    -- A partitioned table's key holds its partition key; (tenant_id, xid, seq) alone is unique already.
    PRIMARY KEY (tenant_id, xid, seq, at)
) PARTITION BY RANGE (at);
-- Retention drops whole days: one partition per UTC day, made ahead of time by the lifecycle job `feed`
-- (store/feed.py), dropped once the day is past the retention. An event dated outside every day made
-- (the job stopped for days, a clock far off) lands in the default partition, which the job trims by a
-- batched DELETE: no write ever fails for want of a partition.
CREATE TABLE change_events_default PARTITION OF change_events DEFAULT;
CREATE INDEX change_events_default_at ON change_events_default (at);
-- Erasure scrubs a memory's events in its transaction.
CREATE INDEX change_events_memory ON change_events (tenant_id, memory_id);
DO $$
DECLARE
    day date;
BEGIN
    FOR day IN SELECT generate_series(now() AT TIME ZONE 'UTC', (now() AT TIME ZONE 'UTC') + interval '2 days', interval '1 day')::date LOOP
        EXECUTE format(
            'CREATE TABLE change_events_p%s PARTITION OF change_events FOR VALUES FROM (%L) TO (%L)',
            to_char(day, 'YYYYMMDD'), day::timestamp AT TIME ZONE 'UTC',
            (day + 1)::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END
$$;
-- Per tenant, the last position retention dropped: a cursor at or before it may have missed events.
CREATE TABLE change_feed_trimmed (
    tenant_id text   NOT NULL PRIMARY KEY,
    xid       xid8   NOT NULL,
    seq       bigint NOT NULL
);
