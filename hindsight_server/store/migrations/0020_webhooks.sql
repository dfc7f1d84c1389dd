-- Webhooks (store/webhooks.py, pipelines/webhooks.py): endpoints that receive a tenant's change feed
-- (change_events, 0019) as signed HTTP POSTs. One row per endpoint holds everything delivery needs:
-- where it has delivered up to (cursor_xid, cursor_seq: the feed's resumable position), its retry
-- state, and its lease. Every memory server delivers; a server takes an endpoint by setting
-- lease_holder and lease_until (an UPDATE of rows whose lease has expired, FOR UPDATE SKIP LOCKED), so
-- one server delivers an endpoint's events at a time, in order. A server that dies loses its leases at
-- their expiry and another continues from the stored cursor (the event in flight may then arrive
-- twice, with the same webhook-id).
--
-- The signing secrets are kept as they are: HMAC needs the key itself (unlike the API keys, which
-- are stored as digests). Whoever reads this table can forge deliveries; it is as sensitive as the
-- memories themselves.
CREATE TABLE webhook_endpoints (
    id                    uuid        NOT NULL DEFAULT gen_random_uuid(),
    tenant_id             text        NOT NULL,
    url                   text        NOT NULL,
    event_types           text[]      NOT NULL DEFAULT '{}',  -- empty: every type
    subjects              text[]      NOT NULL DEFAULT '{}',  -- empty: every subject
    viewer                text,                               -- an agent-bound key's agent, else NULL
    secret                text        NOT NULL,               -- whsec_...: signs every delivery
    previous_secret       text,                               -- after a rotation, also signs ...
    previous_secret_until timestamptz,                        -- ... until then
    state                 text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'dead')),
    cursor_xid            xid8        NOT NULL,
    cursor_seq            bigint      NOT NULL,
    attempts              integer     NOT NULL DEFAULT 0,     -- failed attempts of the next event
    failing_since         timestamptz,                        -- its first failed attempt
    next_attempt_at       timestamptz NOT NULL DEFAULT now(),
    last_error            text        NOT NULL DEFAULT '',
    delivered             bigint      NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL DEFAULT now(),
    dead_at               timestamptz,
    lease_holder          text        NOT NULL DEFAULT '',
    lease_until           timestamptz NOT NULL DEFAULT '-infinity',
    -- Keyed by tenant like every table (a Citus distribution column: store/test_citus_rules).
    PRIMARY KEY (tenant_id, id)
);
-- The delivery's lease statements name an endpoint by its id alone (a random UUID).
CREATE INDEX webhook_endpoints_id ON webhook_endpoints (id);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at);
-- What the servers' claim looks at: the active endpoints whose next attempt is due.
CREATE INDEX webhook_endpoints_due ON webhook_endpoints (next_attempt_at) WHERE state = 'active';
