# deploy/lib/pg_walstream.sh: the WAL stream part of deploy/services.sh (docs/operations.md
# "RPO and RTO of the default profile"). Sourced by services.sh only, after pg_backup.sh.
# Default database profile: pg_receivewal (deploy/lib/walstream.sh) streams every WAL write into
# the directory `sds backup configure` chose (beside a posix repository, else under
# .state/pgbackrest), supervised like the servers; `sds restore` and `recover` replay it after
# the archive. Its slot, sds_walstream, keeps WAL for it while it is away, up to
# max_slot_wal_keep_size (sds.conf); past that PostgreSQL drops the WAL and the stream starts over.

WS_NAME=walstream
WS_SLOT=sds_walstream
WS_LOG=$LOGS/walstream.log

ws_dir() { cat "$BK_DIR/walstream.dir" 2>/dev/null || true; }
ws_supervised() { pid_alive "$PIDS/$WS_NAME.pid" deploy/lib/walstream.sh; }

ws_start() {
    [[ $DB == postgres && ! -f $RETIRED ]] || return 0
    local dir
    dir=$(ws_dir)
    [[ -n $dir && -d $dir ]] || { warn "WAL STREAM IS OFF: no stream directory (backups not configured)"; return 0; }
    if ws_supervised; then
        say "walstream: already running (into $dir)"
        return 0
    fi
    ensure_traversable postgres "$dir"
    # The script is read by postgres from the work tree.
    ensure_traversable postgres "$REPO/deploy/lib"
    (cd "$PG_DIR" && supervise_start "$WS_NAME" "$WS_LOG" --user postgres --stop-timeout 20 -- \
        bash "$REPO/deploy/lib/walstream.sh" "$PG_BIN" "$dir" "$PG_RUN" "$(pg_live_port)" "$WS_SLOT")
    # Until it is connected, so that a status right after the start tells the truth.
    local i
    for ((i = 0; i < 150; i++)); do
        if [[ -n $(ws_connected) ]]; then
            say "walstream: streaming WAL into $dir (slot $WS_SLOT, log $WS_LOG)"
            return 0
        fi
        ws_supervised || break
        sleep 0.2
    done
    log_tail "$WS_LOG" 10
    warn "WAL STREAM NOT CONNECTED (see $WS_LOG): until it is, a lost data directory loses up to the archive lag"
}

# How far behind the server's WAL the stream has flushed; nothing when it is not connected.
ws_connected() {
    psql_su -d postgres -tA -c "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_flush_lsn(), flush_lsn)) FROM pg_stat_replication WHERE application_name = '$WS_SLOT' AND state = 'streaming'" 2>/dev/null || true
}

ws_stop() {
    if stop_pidfile "$PIDS/$WS_NAME.pid" deploy/lib/walstream.sh 25; then
        say "walstream: stopped"
    fi
    return 0
}

# The status line: running or not, and how far behind the server's WAL the stream has flushed.
ws_status() {
    [[ $DB == postgres && ! -f $RETIRED && -f $BK_DIR/walstream.dir ]] || return 0
    if ! ws_supervised; then
        say "walstream: stopped (the RPO is the archive lag until it runs: deploy/run.sh)"
        return 3
    fi
    local st behind
    st=$(supervised_status "$WS_NAME")
    behind=$(ws_connected)
    if [[ -z $behind ]]; then
        say "walstream: ${st%%$'\t'*}, NOT CONNECTED (see $WS_LOG)$(sup_note "$WS_NAME")"
        return 3
    fi
    say "walstream: ${st%%$'\t'*}, connected, ${behind} behind, into $(ws_dir), log $WS_LOG$(sup_note "$WS_NAME")"
}
