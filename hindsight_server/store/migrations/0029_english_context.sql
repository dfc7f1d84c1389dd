-- A fourth vector: an English memory of a session read by the English model together with the turn
-- before it (domain.model VectorSpace.ENGLISH_CONTEXT). A turn that answers ("We named him Biscuit")
-- seldom says what it answers; with the question before it, its vector does. An English query's cosine
-- there joins its cosine with the memory's own vector (LoCoMo dev: R@5 +2, BENCHMARKS.md). Same model,
-- so the English dimension.
-- Out of the row (the type's default storage), unlike the other vectors (0011): in the row it made a
-- memory of a session ~6 KB, and the updates of a recalled memory's access counters then cost the
-- database 2.6-3.4 ms of CPU a recall at 250 recalls/s (one user's 10k LoCoMo turns, c8) against 0.8
-- out of it. It is read for a recall's candidates and by a held index's loads, never scanned.
ALTER TABLE memories ADD COLUMN embedding_en_ctx vector({{ENGLISH_EMBEDDING_DIM}});
-- The lease of the background worker that computes it (store/embeddings.py): not a change of the memory.
ALTER TABLE memories ADD COLUMN context_retry_at timestamptz;
CREATE INDEX memories_embedding_en_ctx ON memories USING hnsw (embedding_en_ctx vector_cosine_ops);
-- The rows waiting for theirs, oldest first: what the worker claims, and what the backlog counts. A
-- memory gets one once its own English vector is in; a memory outside a session never gets one.
CREATE INDEX memories_context_due ON memories (created_at)
    WHERE embedding_en_ctx IS NULL AND embedding_en IS NOT NULL AND session_id <> '';

-- A held index of a subject (0022) reads a memory again when its context vector arrives.
DROP TRIGGER memories_changed ON memories;
CREATE TRIGGER memories_changed
    BEFORE UPDATE OF subject, agent_id, session_id, tier, kind, intent, entities, content,
        confidence, status, supersedes, superseded_by, valid_from, valid_to, created_at, updated_at,
        expires_at, idempotency_key, embedding_state, version, seen_count, last_seen_at, derived_from,
        provenance, visibility, embedding, embedding_en, embedding_zh, embedding_en_ctx, lexical,
        lexical_terms
    ON memories FOR EACH ROW EXECUTE FUNCTION memories_changed();

-- A context vector holds the words of the turn before it. When memories leave the table (an erasure,
-- the purge) the other memories of their sessions lose theirs, and the worker computes them again from
-- the turns left: no vector keeps the words of a memory that is gone. Locked in (tenant_id, id) order,
-- as every statement that updates many memories (store/sql.locked_in_order).
CREATE FUNCTION memories_context_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH sessions AS (SELECT DISTINCT tenant_id, session_id FROM gone WHERE session_id <> ''),
    locked AS MATERIALIZED (
        SELECT m.tenant_id, m.id FROM memories m JOIN sessions s
            ON m.tenant_id = s.tenant_id AND m.session_id = s.session_id
        WHERE m.session_id <> '' AND m.embedding_en_ctx IS NOT NULL
        ORDER BY m.tenant_id, m.id FOR UPDATE OF m)
    UPDATE memories m SET embedding_en_ctx = NULL, context_retry_at = NULL
    FROM locked l WHERE m.tenant_id = l.tenant_id AND m.id = l.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER memories_context_gone AFTER DELETE ON memories REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION memories_context_gone();
