-- The slot a fact fills (domain/facts.py: "self:residence", "sister:employer"), so a write finds the
-- earlier fact of the same slot however far apart their wording is ("lives in Lisbon", "moved to
-- Porto"). NULL for a memory that fills none. Rows stored before this column have none: they are still
-- found by content, intent and meaning as before, and a rewrite of their content sets it.
ALTER TABLE memories ADD COLUMN fact_slot text;
CREATE INDEX memories_fact_slot ON memories (tenant_id, subject, kind, tier, fact_slot)
    WHERE status = 'active' AND fact_slot IS NOT NULL;
