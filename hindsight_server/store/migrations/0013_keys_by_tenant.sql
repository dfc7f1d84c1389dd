-- Every key of a tenant's table leads with tenant_id, so Citus can distribute each of them by tenant
-- and colocate them with memories (0012): the purge audit's key was its serial id alone. (A key is
-- rebuilt; no row is rewritten.)
ALTER TABLE purge_audit DROP CONSTRAINT purge_audit_pkey, ADD PRIMARY KEY (tenant_id, id);

-- Tables that no tenant owns, read without naming one: a Citus reference table each (or left on the
-- coordinator). tests/store/test_citus_rules.py reads these comments.
COMMENT ON TABLE api_keys IS 'hindsight: shared by all tenants (looked up by key_id before the tenant is known)';
COMMENT ON TABLE job_runs IS 'hindsight: shared by all tenants (one row per lifecycle job)';
COMMENT ON TABLE schema_migrations IS 'hindsight: shared by all tenants (the schema''s own history)';
