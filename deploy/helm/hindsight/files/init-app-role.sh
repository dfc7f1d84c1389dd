#!/bin/sh
# The role the memory servers connect as: the owner of the database, not a superuser (a superuser can run
# programs on the database host with COPY ... TO PROGRAM, so a compromised server or a SQL injection
# would be code execution there). The image's own superuser (POSTGRES_USER, default postgres) is for
# administration only. Mounted into /docker-entrypoint-initdb.d, which the image runs only while it
# initialises a new data volume; for an older volume run it once by hand (README.md, "Least privilege in
# the database"). Running it again is harmless.
#
# pgvector is not a trusted extension: only a superuser may create it, so it is created here, before
# the migrations, whose CREATE EXTENSION IF NOT EXISTS then finds it in place. btree_gin is trusted
# (the owner could create it) and comes here too, so the migrations need no privilege at all.
set -e

app_user="${HINDSIGHT_DB_USER:-hindsight}"
: "${HINDSIGHT_DB_PASSWORD:?set POSTGRES_PASSWORD in .env (see .env.example)}"

# psql's variables quote the role name (:"user") and the password (:'password') as SQL, whatever they hold.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v user="$app_user" -v password="$HINDSIGHT_DB_PASSWORD" -v db="$POSTGRES_DB" <<'SQL'
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user')
\gexec
ALTER ROLE :"user" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
    PASSWORD :'password';
ALTER DATABASE :"db" OWNER TO :"user";
-- Since PostgreSQL 15 the public schema belongs to pg_database_owner: the role above, from now on.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS btree_gin;
SQL
