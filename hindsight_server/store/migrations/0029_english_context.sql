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
-- the purge) the memory after each in its session (the next its readers read too: store/embeddings.py's
-- turn before, seen from the other side) loses its context vector, and the worker computes it again
-- from the turns left: no vector keeps the words of a memory that is gone. One memory for each one
-- deleted, never a whole session: deleting one turn of a long session costs one recomputation. Locked in
-- (tenant_id, id) order, as every statement that updates many memories (store/sql.locked_in_order).
CREATE FUNCTION memories_context_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH after_gone AS (
        SELECT n.tenant_id, n.id FROM gone g
        CROSS JOIN LATERAL (
            SELECT m.tenant_id, m.id FROM memories m
            WHERE m.tenant_id = g.tenant_id AND m.session_id = g.session_id AND m.session_id <> ''
              AND (m.created_at, m.id) > (g.created_at, g.id)
              AND m.agent_id = g.agent_id AND m.visibility = g.visibility
            ORDER BY m.created_at, m.id LIMIT 1) AS n
        WHERE g.session_id <> ''),
    locked AS MATERIALIZED (
        SELECT m.tenant_id, m.id FROM memories m JOIN after_gone a ON m.tenant_id = a.tenant_id AND m.id = a.id
        WHERE m.embedding_en_ctx IS NOT NULL
        ORDER BY m.tenant_id, m.id FOR UPDATE OF m)
    UPDATE memories m SET embedding_en_ctx = NULL, context_retry_at = NULL
    FROM locked l WHERE m.tenant_id = l.tenant_id AND m.id = l.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER memories_context_gone AFTER DELETE ON memories REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION memories_context_gone();
