#!/usr/bin/env bash
# deploy/lib/walstream.sh PG_BIN DIR SOCKET PORT SLOT: stream PostgreSQL's WAL into DIR as it is
# written (pg_receivewal through the replication slot SLOT, each write fsynced at once), so a lost
# data directory loses what the stream had not received (milliseconds) instead of what the
# archive had not (up to SDS_BACKUP_ARCHIVE_TIMEOUT). `sds restore` reads DIR after the pgBackRest
# archive (shared/backup.py restore_command). Run as postgres by deploy/lib/pg_walstream.sh under
# its supervisor, which restarts it when it exits (the server away, the slot lost).
# Every PRUNE_EVERY seconds the segments the archive already holds are removed from DIR, so the
# stream takes no more room than the archive lag; the slot is bounded by max_slot_wal_keep_size.
set -uo pipefail

PG_BIN=$1 DIR=$2 SOCKET=$3 PORT=$4 SLOT=$5
PRUNE_EVERY=${SDS_WALSTREAM_PRUNE_EVERY:-60}
CONN="host=$SOCKET port=$PORT user=postgres dbname=postgres application_name=$SLOT"

sql() { "$PG_BIN/psql" -X -q -tA -v ON_ERROR_STOP=1 -d "$CONN" -c "$1"; }

# Wait for the server (a restart of PostgreSQL, a restore's replay) rather than exit at once: the
# supervisor's backoff would then grow, and the stream would reconnect seconds late.
for ((i = 0; i < 240; i++)); do
    "$PG_BIN/pg_isready" -q -h "$SOCKET" -p "$PORT" && break
    sleep 0.5
done

# A slot PostgreSQL gave up on (the stream was away past max_slot_wal_keep_size) cannot stream
# again: drop it and start from the server's current position (the archive has the gap).
state=$(sql "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = '$SLOT'") \
    || { echo "walstream: PostgreSQL not reachable on $SOCKET:$PORT" >&2; exit 1; }
if [[ $state == lost ]]; then
    echo "walstream: slot $SLOT was lost (away past max_slot_wal_keep_size): making it again" >&2
    sql "SELECT pg_drop_replication_slot('$SLOT')" >/dev/null || exit 1
fi
"$PG_BIN/pg_receivewal" -d "$CONN" --slot="$SLOT" --create-slot --if-not-exists || exit 1

# After a restore to an earlier moment the server's WAL ends before the stream's newest files
# (the abandoned timeline's): pg_receivewal would ask to start there and be refused. Those files
# move to DIR/superseded (the archive has their complete segments; the rest is what the restore
# left behind on purpose), and the stream starts where the server is.
current=$(sql "SELECT pg_walfile_name(pg_current_wal_flush_lsn())") || exit 1
for f in "$DIR"/*; do
    name=${f##*/}
    [[ $name =~ ^[0-9A-F]{24}(\.partial)?$ && ${name:8:16} > ${current:8:16} ]] || continue
    mkdir -p "$DIR/superseded"
    mv -f -- "$f" "$DIR/superseded/" && echo "walstream: $name is past the server's WAL ($current): moved to $DIR/superseded" >&2
done

# Remove the segments (and partial segments of old timelines) at or before the last one
# PostgreSQL archived: the archive holds them. Nothing while the archive has archived nothing yet
# (or fails): then the stream is the only copy.
prune() {
    local last f name
    last=$(sql "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver") || return 0
    [[ $last =~ ^[0-9A-F]{24}$ ]] || return 0
    for f in "$DIR"/*; do
        name=${f##*/}
        [[ $name =~ ^[0-9A-F]{24}(\.partial)?$ ]] || continue
        [[ ${name:8:16} > ${last:8:16} ]] || rm -f -- "$f"
    done
}

"$PG_BIN/pg_receivewal" -D "$DIR" -d "$CONN" --slot="$SLOT" --synchronous --no-loop &
child=$!
nap=""
trap 'kill ${nap:+"$nap"} 2>/dev/null; kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
echo "walstream: streaming into $DIR through slot $SLOT (pg_receivewal pid $child)" >&2
# Prune every PRUNE_EVERY seconds; wake at once when pg_receivewal exits (the server went away),
# so the supervisor starts the stream again within a second, not at the next prune.
rc=0
while :; do
    prune
    sleep "$PRUNE_EVERY" &
    nap=$!
    ended=""
    wait -n -p ended "$child" "$nap"
    rc=$?
    if [[ $ended != "$nap" ]]; then
        kill "$nap" 2>/dev/null
        break
    fi
done
echo "walstream: pg_receivewal exited ($rc); the supervisor starts it again" >&2
exit "$rc"
