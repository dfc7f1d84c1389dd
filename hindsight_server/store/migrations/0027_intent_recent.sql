-- A write looks for the earlier memories of its intent (store/writes.py, peers_statement): an agent that
-- writes thousands of a subject's memories under one intent made every such write read them all to sort
-- by distance. Ordered by creation within an intent, the latest few are read from this index alone.
CREATE INDEX memories_intent_recent ON memories (tenant_id, subject, kind, tier, intent, created_at DESC)
    WHERE status = 'active' AND intent <> '';
