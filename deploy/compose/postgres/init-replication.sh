#!/bin/sh
# The primary's side of streaming replication: the role postgres-replica connects as and the
# pg_hba.conf entry that lets it in. Mounted into /docker-entrypoint-initdb.d, which the image runs only
# while it initialises a new data volume; for a volume made before the replica existed, run it once by
# hand (README.md, "The streaming replica"). Running it again is harmless: the role is created once,
# its password is set to POSTGRES_REPLICATION_PASSWORD, and the entry is added once.
set -e

replication_user="${POSTGRES_REPLICATION_USER:-replicator}"
: "${POSTGRES_REPLICATION_PASSWORD:?set POSTGRES_REPLICATION_PASSWORD in .env (see .env.example)}"

# psql's variables quote the role name (:"user") and the password (:'password') as SQL, whatever they hold.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v user="$replication_user" -v password="$POSTGRES_REPLICATION_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user')
\gexec
ALTER ROLE :"user" WITH LOGIN REPLICATION PASSWORD :'password';
SQL

# A replication connection matches only entries for the `replication` database (the image's
# `host all all all` entry does not cover it). samenet: the networks this container is attached to, i.e.
# the compose project's network, whatever subnet Docker gave it; the password is checked (SCRAM).
entry="host replication \"${replication_user}\" samenet scram-sha-256"
hba="${PGDATA:?}/pg_hba.conf"
if ! grep -qxF "$entry" "$hba"; then
    printf '%s\n' "$entry" >>"$hba"
fi
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -qAtc 'SELECT pg_reload_conf()' >/dev/null
