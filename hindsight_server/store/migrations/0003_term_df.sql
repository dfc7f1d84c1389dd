-- Document frequency per tenant and term for BM25, maintained by the writes: a query reads its terms'
-- df by primary key instead of counting matches (which grew with the tenant: 70-90 ms at 3.6k rows).
CREATE TABLE lexical_df (
    tenant_id  text   NOT NULL,
    term       text   NOT NULL,
    df         bigint NOT NULL,
    PRIMARY KEY (tenant_id, term)
);
INSERT INTO lexical_df (tenant_id, term, df)
    SELECT tenant_id, term, count(*) FROM memories, unnest(tsvector_to_array(lexical)) AS term
    GROUP BY tenant_id, term;
