-- A second, English-only embedding beside the multilingual one (domain.model.VectorSpace).
-- {{ENGLISH_EMBEDDING_DIM}} is the English model's dimension, fixed when the column is created.
-- `language` is the content's language at write time; rows written before this migration have none
-- and keep only their multilingual vector.
ALTER TABLE memories
    ADD COLUMN language text,
    ADD COLUMN embedding_en vector({{ENGLISH_EMBEDDING_DIM}});

-- Rows without an English vector (NULL) are not in the index.
CREATE INDEX memories_embedding_en ON memories USING hnsw (embedding_en vector_cosine_ops);
