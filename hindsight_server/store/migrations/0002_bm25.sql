-- BM25 for the lexical channel: each row's length in terms, and per-tenant totals for the average length
-- and the document count. Term document frequencies are counted at query time (bounded), so writes stay
-- one statement and never contend on per-term rows.
ALTER TABLE memories ADD COLUMN lexical_terms integer NOT NULL DEFAULT 0;
UPDATE memories SET lexical_terms = length(lexical);

CREATE TABLE lexical_stats (
    tenant_id  text   PRIMARY KEY,
    documents  bigint NOT NULL,
    terms      bigint NOT NULL
);
INSERT INTO lexical_stats (tenant_id, documents, terms)
    SELECT tenant_id, count(*), sum(lexical_terms) FROM memories GROUP BY tenant_id;
