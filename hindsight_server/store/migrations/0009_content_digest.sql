-- The peers index held the normalised content itself: a long memory that does not compress passed
-- PostgreSQL's B-tree row limit (~2.7 KB) and could not be stored. It now holds its SHA-256 (hex).
DROP INDEX memories_peers;
UPDATE memories SET content_key = encode(sha256(convert_to(content_key, 'UTF8')), 'hex')
    WHERE content_key IS NOT NULL;
CREATE INDEX memories_peers ON memories (tenant_id, subject, kind, tier, content_key)
    WHERE status = 'active';
