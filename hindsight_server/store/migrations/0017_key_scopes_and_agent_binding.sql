-- What an API key may do (domain/principal.py: read, write, export, erase, admin) and the agent it acts
-- as ('' : none, the whole tenant). Keys made before scopes existed could do everything, so they keep
-- every scope and no binding: an existing deployment behaves as before until its keys are replaced.
-- New keys always name their scopes (`hindsight tenants create --scopes`), so the column keeps no
-- default once the old rows have theirs.
ALTER TABLE api_keys
    ADD COLUMN scopes text[] NOT NULL DEFAULT ARRAY['read', 'write', 'export', 'erase', 'admin'],
    ADD COLUMN agent_id text NOT NULL DEFAULT '',
    ADD CONSTRAINT api_keys_known_scopes
        CHECK (scopes <@ ARRAY['read', 'write', 'export', 'erase', 'admin'] AND cardinality(scopes) > 0);
ALTER TABLE api_keys ALTER COLUMN scopes DROP DEFAULT;
