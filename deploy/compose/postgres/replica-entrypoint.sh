#!/bin/sh
# postgres-replica's entrypoint: a hot standby of the primary (PRIMARY_HOST), streaming its WAL.
#
# An empty volume is first cloned from the primary with pg_basebackup: -X stream copies the WAL written
# during the copy, -R writes standby.signal and primary_conninfo (so postgres starts as a standby of
# the primary), -C -S creates the physical replication slot REPLICATION_SLOT on the primary, which keeps
# the WAL this replica has not received yet while it is stopped or restarting. The clone is made in a
# side directory and renamed into PGDATA once complete: a clone cut short is made again, never started.
# Then the image's own entrypoint starts postgres on the existing data directory (it runs no initdb).
set -eu

: "${PGDATA:?}" "${PRIMARY_HOST:?}" "${REPLICATION_SLOT:?}" "${PGPASSWORD:?PGPASSWORD: the replication role's password}"
replication_user="${POSTGRES_REPLICATION_USER:-replicator}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    partial="$PGDATA.partial"
    rm -rf "$partial"
    mkdir -p "$partial"
    chown postgres:postgres "$partial"
    chmod 700 "$partial"
    # A slot of this name left by an earlier clone (the volume was removed, or a clone was cut short)
    # holds WAL for nobody now: drop it so that -C creates it afresh. Absent (the usual case): nothing to do.
    gosu postgres pg_receivewal -h "$PRIMARY_HOST" -U "$replication_user" -w --drop-slot \
        -S "$REPLICATION_SLOT" 2>/dev/null || true
    echo "postgres-replica: cloning $PRIMARY_HOST (replication slot $REPLICATION_SLOT)"
    gosu postgres pg_basebackup -h "$PRIMARY_HOST" -U "$replication_user" -w -D "$partial" \
        -R -X stream -C -S "$REPLICATION_SLOT" --checkpoint=fast
    rm -rf "$PGDATA"
    mv "$partial" "$PGDATA"
fi

exec docker-entrypoint.sh "$@"
