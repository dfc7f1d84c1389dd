-- What changed in a subject's memories since a server last looked (pipelines/hot_scopes.py): a server
-- that holds a subject's memories in its own index asks, at each recall, only for what changed.
--
-- change_xid: the transaction that last changed what a recall reads of the memory (its default on
-- insert; a trigger on an update of any column but the access counters, which every recall's hits
-- update and no search reads). A reader that looked with the snapshot horizon H (pg_snapshot_xmin:
-- every transaction below it had ended) has seen every change of a transaction below H; next time it
-- reads the rows with change_xid >= H, and nothing committed in between is missed, whatever order
-- transactions commit in (store/feed.py makes the same argument for the change feed).
--
-- A memory that leaves a subject (purged, erased, or moved to another subject by an Update) leaves no
-- row to read: scope_removals keeps, per tenant, the last transaction that took one away, and a reader
-- that finds it at or above its horizon builds its index again. Per tenant, not per subject: removals
-- are rare (the purge job, an erasure), and a subject's name kept here would outlive its erasure.
ALTER TABLE memories ADD COLUMN change_xid xid8;
-- Set apart from the column's creation: a volatile default given with it would rewrite the table to
-- fill the rows already there, which keep NULL instead (a reader reads them when it first loads).
ALTER TABLE memories ALTER COLUMN change_xid SET DEFAULT pg_current_xact_id();
CREATE INDEX memories_scope_changes ON memories (tenant_id, subject, change_xid);

CREATE TABLE scope_removals (
    tenant_id   text PRIMARY KEY,
    removed_xid xid8 NOT NULL
);

CREATE FUNCTION memories_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    IF NEW.subject IS DISTINCT FROM OLD.subject THEN
        INSERT INTO scope_removals (tenant_id, removed_xid) VALUES (OLD.tenant_id, pg_current_xact_id())
        ON CONFLICT (tenant_id) DO UPDATE SET removed_xid = excluded.removed_xid;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION memories_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scope_removals (tenant_id, removed_xid) VALUES (OLD.tenant_id, pg_current_xact_id())
    ON CONFLICT (tenant_id) DO UPDATE SET removed_xid = excluded.removed_xid;
    RETURN OLD;
END
$$;

CREATE TRIGGER memories_changed
    BEFORE UPDATE OF subject, agent_id, session_id, tier, kind, intent, entities, content,
        confidence, status, supersedes, superseded_by, valid_from, valid_to, created_at, updated_at,
        expires_at, idempotency_key, embedding_state, version, seen_count, last_seen_at, derived_from,
        provenance, visibility, embedding, embedding_en, lexical, lexical_terms
    ON memories FOR EACH ROW EXECUTE FUNCTION memories_changed();
CREATE TRIGGER memories_removed
    AFTER DELETE ON memories FOR EACH ROW EXECUTE FUNCTION memories_removed();
