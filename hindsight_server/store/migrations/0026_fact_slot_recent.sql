-- A write looks for the earlier facts filed under its slots and facets (store/writes.py, _peers). A
-- facet can hold thousands of a subject's live facts ("facet:work" for a user who talks of work), and
-- reading them all to sort by distance cost every such write tens of milliseconds of the database's
-- CPU. Ordered by creation within a key, the latest few of each key are read from this index alone.
CREATE INDEX memories_fact_slot_recent ON memories (tenant_id, subject, kind, tier, fact_slot, created_at DESC)
    WHERE status = 'active' AND fact_slot IS NOT NULL;
DROP INDEX memories_fact_slot;
