-- A third vector space: Chinese memories also get multilingual-e5-small's vector (domain.model
-- VectorSpace.CHINESE), which a Chinese query's cosines combine with the first multilingual model's.
-- {{CHINESE_EMBEDDING_DIM}} is that model's dimension, fixed when the column is created. Rows already
-- here get theirs from the background worker (the `language` column says which rows are Chinese).
ALTER TABLE memories ADD COLUMN embedding_zh vector({{CHINESE_EMBEDDING_DIM}});
-- In the row, as the other vectors (0011): an exact scan of a subject then reads no TOAST page.
ALTER TABLE memories ALTER COLUMN embedding_zh SET STORAGE MAIN;
-- Rows without a Chinese vector (NULL) are not in the index.
CREATE INDEX memories_embedding_zh ON memories USING hnsw (embedding_zh vector_cosine_ops);

-- A held index of a subject (0022) reads a memory again when its Chinese vector arrives.
DROP TRIGGER memories_changed ON memories;
CREATE TRIGGER memories_changed
    BEFORE UPDATE OF subject, agent_id, session_id, tier, kind, intent, entities, content,
        confidence, status, supersedes, superseded_by, valid_from, valid_to, created_at, updated_at,
        expires_at, idempotency_key, embedding_state, version, seen_count, last_seen_at, derived_from,
        provenance, visibility, embedding, embedding_en, embedding_zh, lexical, lexical_terms
    ON memories FOR EACH ROW EXECUTE FUNCTION memories_changed();

-- Pending again: the Chinese rows the worker marked ready before this column existed, so that it
-- gives them their Chinese vector (it claims pending rows only).
UPDATE memories SET embedding_state = 'pending'
WHERE language = 'zh' AND embedding_state = 'ready' AND embedding_zh IS NULL;
