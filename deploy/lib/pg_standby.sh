# deploy/lib/pg_standby.sh: the hot standby part of deploy/services.sh (standby-init, promote,
# its start and stop). Sourced by services.sh only, after its settings and helpers.

sb_conf() {
    write_if_changed "$SB_DATA/sds.conf" 600 <<EOF
# Written by deploy/services.sh on each start: edit that script, not this file.
listen_addresses = '127.0.0.1'
port = $SB_PORT
unix_socket_directories = '$SB_RUN'
shared_preload_libraries = 'timescaledb'
timescaledb.telemetry_level = off
max_slot_wal_keep_size = '8GB'
# Streaming from the primary through its slot; the password is in the passfile (mode 600).
primary_conninfo = 'host=127.0.0.1 port=$PG_PORT user=sds_replica application_name=$SB_SLOT passfile=$SB_DIR/pgpass'
primary_slot_name = '$SB_SLOT'
# Tell the primary which rows the standby's queries still read, so its vacuum does not cancel
# API reads here (they are bounded by SDS_STATEMENT_TIMEOUT_MS).
hot_standby_feedback = on
EOF
    chown postgres:postgres "$SB_DATA/sds.conf"
}

sb_passfile() {
    (umask 077 && printf '127.0.0.1:%s:replication:sds_replica:%s\n' "$PG_PORT" "$REPL_PW" \
        >"$SB_DIR/pgpass")
    chown postgres:postgres "$SB_DIR/pgpass"
}

sb_start() {
    sb_exists || return 0
    if sb_supervised || sb_running; then
        say "postgresql standby: already running on port $(sed -n 4p "$SB_DATA/postmaster.pid")"
        return
    fi
    mkdir -p "$SB_RUN"
    chown postgres:postgres "$SB_DIR" "$SB_RUN"
    sb_passfile
    sb_conf >/dev/null
    warn_ephemeral "$SB_PORT" "the PostgreSQL standby" SDS_PG_STANDBY_PORT
    say "postgresql standby: starting on 127.0.0.1:$SB_PORT"
    pg_launch postgresql-standby "$SB_DATA" "$SB_LOG" "$SB_PORT" "$SB_RUN" \
        || die "the standby did not start (is port $SB_PORT free?)"
}

sb_stop() {
    if sb_supervised || sb_running; then
        say "postgresql standby: stopping (fast)"
        pg_halt postgresql-standby "$SB_DATA"
    fi
}

sb_init() {
    pg_running || die "the primary is not running: $0 start first"
    ! sb_exists || die "a standby already exists in $SB_DATA"
    local exists
    exists=$(psql_su -d postgres -tA -c "SELECT count(*) FROM pg_roles WHERE rolname = 'sds_replica'")
    if [[ $exists == 0 ]]; then
        say "postgresql: creating the replication role sds_replica"
        psql_su -d postgres -v pw="$REPL_PW" <<<"CREATE ROLE sds_replica LOGIN REPLICATION PASSWORD :'pw';"
    else
        psql_su -d postgres -v pw="$REPL_PW" <<<"ALTER ROLE sds_replica LOGIN REPLICATION PASSWORD :'pw';"
    fi
    # A slot left by an earlier standby would hold WAL for nobody.
    psql_su -d postgres -tA -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$SB_SLOT' AND NOT active" >/dev/null
    mkdir -p "$SB_DIR" "$SB_RUN"
    chown postgres:postgres "$SB_DIR" "$SB_RUN"
    chmod 700 "$SB_DIR"
    ensure_traversable postgres "$SB_DIR"
    sb_passfile
    say "pg_basebackup of 127.0.0.1:$PG_PORT into $SB_DATA (slot $SB_SLOT)"
    as_postgres "$PG_BIN/pg_basebackup" -d "host=127.0.0.1 port=$PG_PORT user=sds_replica passfile=$SB_DIR/pgpass" \
        -D "$SB_DATA" -X stream -C -S "$SB_SLOT" --checkpoint=fast >"$LOGS/pg_basebackup.log" 2>&1 \
        || { log_tail "$LOGS/pg_basebackup.log"; rm -rf "$SB_DATA"; die "pg_basebackup failed"; }
    as_postgres touch "$SB_DATA/standby.signal"
    sb_start
    # Now that the standby exists: the multi-host URLs and (unless off) synchronous commits.
    load_secrets
    pg_start
}

sb_promote() {
    sb_exists && sb_is_standby || die "there is no standby to promote in $SB_DATA"
    sb_running || sb_start
    say "promoting the standby on port $SB_PORT"
    as_postgres "$PG_BIN/pg_ctl" -D "$SB_DATA" -w -t 120 promote >/dev/null
    if pg_supervised || pg_running; then
        say "stopping the old primary (fast)"
        pg_halt postgresql "$PGDATA" || true
    fi
    # The WAL stream followed the old primary (it does not move to the promoted standby).
    ws_stop
    if [[ -f $PGDATA/PG_VERSION ]]; then
        echo "retired by deploy/services.sh promote at $(date -u +%FT%TZ)" >"$RETIRED"
        say "the old primary in $PGDATA is retired: it will not start again (see docs/operations.md)"
    fi
    say "the standby on port $SB_PORT is the primary now; processes reconnect to it through SDS_DATABASE_URL"
}
