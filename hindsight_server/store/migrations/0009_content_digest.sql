-- The peers index held the normalised content itself: a long memory that does not compress passed
-- PostgreSQL's B-tree row limit (~2.7 KB) and could not be stored. It now holds the content's MD5 (an
-- expression index: no row is rewritten, so the migration is quick on a large table; MD5 only narrows
-- the look-up, the rows found are compared in full).
DROP INDEX memories_peers;
CREATE INDEX memories_peers ON memories (tenant_id, subject, kind, tier, md5(content_key))
    WHERE status = 'active';
