# deploy/lib/pg_backup.sh: the backup part of deploy/services.sh (pgBackRest, docs/operations.md
# "Backups and restore"). Sourced by services.sh only, after its settings and helpers.
# The configuration is rendered from the SDS_BACKUP_* settings by `sds backup configure`
# (shared/backup.py) into .state/pgbackrest/, with the repository there unless the settings put
# it on a second disk, a second host or S3; PostgreSQL's archive settings come from the same
# place into sds.conf. The scheduler (aggregate/backups.py) takes the backups.

BK_DIR=$STATE/pgbackrest
BK_CONF=$BK_DIR/pgbackrest.conf
BK_PG_SETTINGS=$BK_DIR/archive.conf

# Render pgbackrest.conf and the archive settings for the primary in $PGDATA (before its
# start, so that archive_command names a configuration that exists).
# Without the project's venv (services.sh run on its own before setup.sh) there is no `sds`:
# the server then runs without archiving, and says so.
bk_configure() {
    if [[ ! -x $VENV/bin/sds ]]; then
        warn "BACKUPS ARE OFF: $VENV/bin/sds is missing (run deploy/setup.sh, or deploy/run.sh)"
        mkdir -p "$BK_DIR"
        : >"$BK_PG_SETTINGS"
        return 0
    fi
    mkdir -p "$BK_DIR"
    ensure_traversable postgres "$BK_DIR"
    "$VENV/bin/sds" backup configure --config "$BK_CONF" --base-dir "$BK_DIR" \
        --pg "$PGDATA:$PG_PORT:$PG_RUN" --pg-settings "$BK_PG_SETTINGS" >/dev/null \
        || die "could not render the pgBackRest configuration (check the SDS_BACKUP_* settings)"
    # A posix repository elsewhere (SDS_BACKUP_REPO_PATH): postgres must reach it.
    if grep -q '^repo1-type=posix' "$BK_CONF"; then
        ensure_traversable postgres "$(sed -n 's/^repo1-path=//p' "$BK_CONF")"
    fi
}

# The lines sds.conf includes (archive_mode, archive_command, archive_timeout).
bk_pg_lines() { grep -v '^#' "$BK_PG_SETTINGS" || true; }

# archive_mode only changes with a restart: an installation from before backups runs without.
bk_check_archive_mode() {
    local mode
    mode=$(psql_su -d postgres -tA -c 'SHOW archive_mode' 2>/dev/null || true)
    if [[ $mode == off ]]; then
        warn "WAL ARCHIVING IS OFF until PostgreSQL restarts (archive_mode changed): run deploy/run.sh stop && deploy/run.sh"
    fi
}

# The stanza (idempotent: a later run checks it). A failure is loud but does not stop the
# service: `deploy/run.sh status` and the metrics keep saying so.
# A rerun with the same configuration skips it (stanza.done holds the checksum of the
# configuration it was made with), so an unchanged start stays fast.
bk_setup() {
    [[ -f $RETIRED || ! -x $VENV/bin/sds ]] && return 0
    bk_check_archive_mode
    local stamp=$BK_DIR/stanza.done sum
    sum=$(sha256sum <"$BK_CONF")
    if [[ -f $stamp && $(<"$stamp") == "$sum" ]]; then return 0; fi
    if (cd "$REPO" && SDS_BACKUP_CONFIG=$BK_CONF "$VENV/bin/sds" backup setup) >>"$LOGS/backup.log" 2>&1; then
        echo "$sum" >"$stamp"
    else
        rm -f "$stamp"
        log_tail "$LOGS/backup.log" 10
        warn "BACKUPS ARE NOT SET UP: pgBackRest could not create its stanza (see $LOGS/backup.log and $BK_DIR/log)"
    fi
}

# Before a stop: start a new WAL segment, so that the shutdown's last archiver round ships the
# one holding the latest commits (a restore then reaches the moment of the stop).
bk_switch_wal() {
    pg_running && [[ $(psql_su -d postgres -tA -c 'SHOW archive_mode' 2>/dev/null) == on ]] || return 0
    psql_su -d postgres -tA -c 'SELECT pg_switch_wal()' >/dev/null 2>&1 || true
}

# After `sds restore`, the server replays archived WAL before it accepts writes; it removes
# recovery.signal when it promotes itself. Wait for that, so the schema check and the processes
# that follow find a writable database. PENDING=1: the file was there before the server started
# (a short replay may be over before this runs; it is still reported).
bk_wait_recovery() {
    local pending=${1:-0}
    [[ -f $PGDATA/recovery.signal ]] && pending=1
    ((pending)) || return 0
    say "postgresql: recovering from the backup repository (replaying archived WAL; see $PG_LOG)"
    local i
    for ((i = 0; i < 36000; i++)); do
        # recovery.signal goes before the end-of-recovery checkpoint: writes wait for that.
        if [[ ! -f $PGDATA/recovery.signal ]] \
            && [[ $(psql_su -d postgres -tA -c 'SELECT pg_is_in_recovery()' 2>/dev/null) == f ]]; then
            say "postgresql: recovery done, accepting writes"
            return 0
        fi
        pg_supervised || pg_running || die "PostgreSQL stopped during recovery (see $PG_LOG)"
        sleep 0.1
    done
    die "recovery still runs after an hour (see $PG_LOG); rerun when it is done"
}

# The status line of `deploy/run.sh status`: the last backup's age, the WAL archive's state.
bk_status() {
    [[ -x $VENV/bin/sds && -f $BK_CONF ]] || { say "backup: not configured (deploy/run.sh sets it up)"; return 0; }
    # The secrets name the database (for pg_stat_archiver) and the configuration.
    (set -a && . "$SECRETS" && set +a && SDS_BACKUP_CONFIG=$BK_CONF SDS_LOG_LEVEL=WARNING \
        "$VENV/bin/sds" backup status --short 2>&1) | sed "s/^/$SDS_SCRIPT: /" || true
}
