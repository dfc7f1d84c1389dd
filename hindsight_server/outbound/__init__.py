"""Adapters that call out of the deployment to addresses its tenants name (webhook endpoints)."""
