#!/usr/bin/env bash
# deploy/services.sh {start|stop|status|reload-broker|psql|standby-init|promote|switchover}: the running
# service's own PostgreSQL 15 (+ TimescaleDB), its optional hot standby, and the broker, with all
# their state under <repo>/.state. Not the system ones, and no systemd: each server runs in the
# foreground under its own supervisor (deploy/lib/supervise.py: restarted with backoff when it
# dies), tracked by pid files .state/pids/{postgresql,postgresql-standby,broker}.pid. Run as root.
#   start          initdb / first-run setup if needed, then start whatever is not running
#   stop           SIGTERM to the broker (it saves its store), then PostgreSQL's fast shutdown (SIGINT)
#   status         what is running; exit 0 when all are, 3 otherwise
#   recover        whole machine lost: a fresh .state from the backup repository (restore, then
#                  the recovery kit: secrets, broker accounts; deploy/run.sh recover runs it)
#   reload-broker  make the broker reread its accounts (after `sds device register`): SIGHUP to
#                  mosquitto, or an import of the definitions file into the RabbitMQ cluster
#   psql [args]    psql as the superuser into database sds, over the unix socket
#   standby-init   make a hot standby of the running primary (pg_basebackup through the
#                  replication slot sds_standby) and start it; start/stop/status include it
#   promote        promote the standby to primary and retire the old primary (docs/operations.md
#                  "Hot standby and promotion")
# Broker profile: SDS_BROKER=mosquitto (default) or rabbitmq-cluster (deploy/rabbitmq.sh); the
# choice is remembered in .state/broker-profile for later stop/status/reload-broker calls.
# Database profile: SDS_DB=postgres (default) or patroni (deploy/lib/pg_patroni.sh: automatic
# failover; switchover [NODE] moves the leader), remembered in .state/db-profile.
# Ports: SDS_PG_PORT (default 25432), SDS_PG_STANDBY_PORT (25433), SDS_MQTT_PORT (1883, mosquitto); all
# listen on 127.0.0.1 only (defaults: deploy/lib/ports.sh). A database server keeps the port it was
# last started on unless the variable is set (docs/operations.md "Ports").
# SDS_PG_STANDBY_SYNC=off makes the standby asynchronous.
# The WAL stream (deploy/lib/pg_walstream.sh) starts and stops with PostgreSQL (default profile).
set -euo pipefail

SDS_SCRIPT=services.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_root

MQTT_PORT=${SDS_MQTT_PORT:-$DEFAULT_MQTT_PORT}
PG_DIR=$STATE/pg
PGDATA=$PG_DIR/data
PG_RUN=$PG_DIR/run
PG_LOG=$PG_DIR/postgres.log
SB_SYNC=${SDS_PG_STANDBY_SYNC:-on}
SB_DIR=$STATE/pg-standby
SB_DATA=$SB_DIR/data
# A server's port: the variable when set, else the port its sds.conf (rewritten on each start)
# names, else the default. So an existing cluster keeps its port across upgrades and default
# changes: a standby's primary_conninfo, pgBackRest and the clients all know it by that port.
SDS_PORT_RE='^port = ([0-9]+)$'
PG_PORT=${SDS_PG_PORT:-$(config_port "$PGDATA/sds.conf" "$SDS_PORT_RE")}
PG_PORT=${PG_PORT:-$DEFAULT_PG_PORT}
SB_PORT=${SDS_PG_STANDBY_PORT:-$(config_port "$SB_DATA/sds.conf" "$SDS_PORT_RE")}
SB_PORT=${SB_PORT:-$DEFAULT_PG_STANDBY_PORT}
SB_RUN=$SB_DIR/run
SB_LOG=$SB_DIR/postgres.log
SB_SLOT=sds_standby
# Left in the old primary's data directory by `promote`: it must never start as a second primary.
RETIRED=$PGDATA/RETIRED
MQ_DIR=$STATE/mosquitto
MQ_CONF=$MQ_DIR/mosquitto.conf
MQ_PID=$MQ_DIR/mosquitto.pid
SECRETS=$STATE/secrets.env
PROFILE_FILE=$STATE/broker-profile
BROKER=${SDS_BROKER:-$(cat "$PROFILE_FILE" 2>/dev/null || echo mosquitto)}
case $BROKER in
mosquitto | rabbitmq-cluster) ;;
*) die "SDS_BROKER must be mosquitto or rabbitmq-cluster (got '$BROKER')" ;;
esac
RABBIT=("bash" "$REPO/deploy/rabbitmq.sh")
DB=${SDS_DB:-$(cat "$STATE/db-profile" 2>/dev/null || echo postgres)}
[[ $DB == postgres || $DB == patroni ]] || die "SDS_DB must be postgres or patroni (got '$DB')"

# PostgreSQL refuses to run as root. Run from a directory postgres can enter, so that neither
# pg_ctl nor psql complains about the caller's (root's) working directory.
as_postgres() { (cd "$PG_DIR" && runuser -u postgres -- "$@"); }
pg_running() { [[ -f $PGDATA/PG_VERSION ]] && as_postgres "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }
sb_exists() { [[ -f $SB_DATA/PG_VERSION ]]; }
sb_running() { sb_exists && as_postgres "$PG_BIN/pg_ctl" -D "$SB_DATA" status >/dev/null 2>&1; }
sb_is_standby() { [[ -f $SB_DATA/standby.signal ]]; }
# Supervised servers (a supervisor's command line holds -D <data>); pg_running/sb_running are
# false during a supervisor's restart backoff, these are not.
pg_supervised() { pid_alive "$PIDS/postgresql.pid" "$PGDATA"; }
sb_supervised() { pid_alive "$PIDS/postgresql-standby.pid" "$SB_DATA"; }

# pg_launch NAME DATA LOG PORT SOCKET: postgres in the foreground under its supervisor as user
# postgres (SIGTERM becomes SIGINT, the fast shutdown; never started again once a promotion
# retired DATA), then pg_wait. A server that does not come up within PG_START_WAIT seconds (or
# START_DEATHS deaths) is stopped: no retry loop is left.
PG_START_WAIT=120
pg_launch() {
    local name=$1 data=$2 log=$3
    (cd "$PG_DIR" && supervise_start "$name" "$log" --user postgres --stop-signal INT \
        --stop-timeout 60 --unless "$data/RETIRED" -- "$PG_BIN/postgres" -D "$data")
    SUP_SEEN[$name]=0 SUP_BASE[$name]=0 # started in a subshell: count its deaths from here
    pg_wait "$name" "$4" "$5" "$PG_START_WAIT" "$log" && return 0
    stop_pidfile "$PIDS/$name.pid" "$data" 65 || true
    log_tail "$log"
    return 1
}

# pg_wait NAME PORT SOCKET SECONDS [LOG]: until the server accepts connections (crash recovery
# first), through its supervisor's restarts: a server that dies at its start (its port held for
# a moment by another program's connection) is started again by the supervisor after its
# backoff, and each death is reported with the end of LOG.
pg_wait() {
    local i
    for ((i = 0; i < $4 * 10; i++)); do
        as_postgres "$PG_BIN/pg_isready" -q -h "$3" -p "$2" && return 0
        pid_alive "$PIDS/$1.pid" supervise.py || return 1
        supervised_note_deaths "$1" "${5:-/dev/null}" || return 1
        sleep 0.1
    done
    return 1
}

# pg_halt NAME DATA: stop a server, through its supervisor when it has one.
pg_halt() {
    if pid_alive "$PIDS/$1.pid" "$2"; then
        stop_pidfile "$PIDS/$1.pid" "$2" 65 || true
    else
        as_postgres "$PG_BIN/pg_ctl" -D "$2" -m fast -w -t 60 stop >/dev/null
    fi
}
# The port the running server actually listens on (line 4 of postmaster.pid), which differs from
# $PG_PORT if SDS_PG_PORT changed since it started.
pg_live_port() { sed -n 4p "$PGDATA/postmaster.pid" 2>/dev/null; }
psql_su() {
    PGOPTIONS='-c client_min_messages=warning' as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
        -h "$PG_RUN" -p "$(pg_live_port)" "$@"
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A supervised broker (pid file of its supervisor), or one an older version started with -d.
mq_supervised() { pid_alive "$PIDS/broker.pid" "$MQ_CONF"; }
mq_running() { mq_supervised || pid_alive "$MQ_PID" "$MQ_CONF"; }

secret_get() { [[ -f $SECRETS ]] && sed -n "s/^$1=//p" "$SECRETS" | tail -n 1 || true; }
new_secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(24))'; }

# ---- secrets ------------------------------------------------------------------------------------
# Passwords are generated once and kept in .state/secrets.env; the derived lines (URL, ports) are
# rewritten on each start, so the file always matches the running ports. KEY=value lines: both
# `set -a; . .state/secrets.env` and systemd's EnvironmentFile= read them.
load_secrets() {
    DB_PW=$(secret_get SDS_DB_PASSWORD)
    MQ_PW=$(secret_get SDS_MQTT_PASSWORD)
    CURSOR_KEY=$(secret_get SDS_CURSOR_SECRET)
    REPL_PW=$(secret_get SDS_REPLICA_PASSWORD)
    SEAL_KEYS=$(secret_get SDS_APIKEY_SEAL_KEYS)
    SHARE_GROUP=$(secret_get SDS_INGEST_SHARE_GROUP)
    RECOVERY_KEY=$(secret_get SDS_RECOVERY_KEY)
    DB_PW_NEW="" MQ_PW_NEW=""
    if [[ -z $DB_PW ]]; then DB_PW=$(new_secret); DB_PW_NEW=1; fi
    if [[ -z $MQ_PW ]]; then MQ_PW=$(new_secret); MQ_PW_NEW=1; fi
    # Every API worker (and host) must sign /data cursors with the same key.
    if [[ -z $CURSOR_KEY ]]; then CURSOR_KEY=$(new_secret); fi
    # With a standby both servers are listed: libpq connects to whichever accepts writes
    # (target_session_attrs), so after a promotion every process finds the new primary on its
    # next reconnect; the API reads from the standby while it is current enough.
    local url="postgresql://sds:$DB_PW@127.0.0.1:$PG_PORT/sds" read_lines=""
    if [[ $DB == patroni ]]; then
        url=$(pt_url "$DB_PW")
    elif sb_exists; then
        url="postgresql://sds:$DB_PW@127.0.0.1:$PG_PORT,127.0.0.1:$SB_PORT/sds?target_session_attrs=read-write"
        read_lines="SDS_DATABASE_READ_URL=postgresql://sds:$DB_PW@127.0.0.1:$SB_PORT,127.0.0.1:$PG_PORT/sds?target_session_attrs=prefer-standby"
    fi
    # The ingester shards' shared subscription group: a secret, because mosquitto lets any
    # client that can name a group join it (ingest/shards.py, docs/security.md). Kept once made:
    # the shards' persistent sessions would stay subscribed to an old name as well.
    if [[ -z $SHARE_GROUP ]]; then SHARE_GROUP="sds-$(new_secret)"; fi
    # The replication role's password (role sds_replica, made by standby-init).
    if [[ -z $REPL_PW ]]; then REPL_PW=$(new_secret); fi
    # The key sealing the stored copy of each API key (a Fernet key: 32 random bytes, url-safe
    # base64). Kept once made: losing it makes existing keys unreadable to their owners (they
    # still work). Rotation prepends a new key: docs/auth.md "Key retrieval".
    if [[ -z $SEAL_KEYS ]]; then
        SEAL_KEYS=$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')
    fi
    # The key sealing the recovery kit in the database (shared/recovery.py): kept once made;
    # the operator keeps a copy off the machine (`recover` needs it after losing .state).
    if [[ -z $RECOVERY_KEY ]]; then
        RECOVERY_KEY=${SDS_RECOVERY_KEY:-$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')}
    fi
    mkdir -p "$STATE"
    if write_if_changed "$SECRETS" 600 <<EOF | grep -q changed; then say "wrote $SECRETS (mode 600)"; fi
# Generated by deploy/services.sh. Private: mode 600, git-ignored. Delete it together with
# .state/pg and .state/mosquitto to start over; on its own, new passwords are generated and set.
SDS_DB_PASSWORD=$DB_PW
SDS_DATABASE_URL=$url${read_lines:+
$read_lines}
SDS_MQTT_HOST=127.0.0.1
SDS_MQTT_PORT=$MQTT_PORT
SDS_MQTT_USERNAME=ingester
SDS_MQTT_PASSWORD=$MQ_PW
SDS_ALERTS_MQTT_PASSWORD=$MQ_PW
SDS_INGEST_SHARE_GROUP=$SHARE_GROUP
SDS_CURSOR_SECRET=$CURSOR_KEY
SDS_REPLICA_PASSWORD=$REPL_PW
SDS_APIKEY_SEAL_KEYS=$SEAL_KEYS
SDS_BACKUP_CONFIG=$BK_CONF
SDS_STATE_DIR=$STATE
SDS_RECOVERY_KEY=$RECOVERY_KEY
EOF
}

# ---- PostgreSQL ---------------------------------------------------------------------------------
pg_start() {
    if [[ -f $RETIRED ]]; then
        warn "the PostgreSQL in $PGDATA was retired by a promotion: not starting it ($(<"$RETIRED"))"
        return
    fi
    mkdir -p "$PG_RUN"
    chown postgres:postgres "$PG_DIR" "$PG_RUN"
    chmod 700 "$PG_DIR"
    # The work tree may sit under directories postgres cannot enter (e.g. a clone in /root).
    ensure_traversable postgres "$PG_DIR"

    if [[ ! -f $PGDATA/PG_VERSION ]]; then
        say "initdb $PGDATA"
        as_postgres "$PG_BIN/initdb" -D "$PGDATA" -U postgres --auth-local=peer \
            --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$LOGS/initdb.log" 2>&1 \
            || { log_tail "$LOGS/initdb.log"; die "initdb failed"; }
        # Our settings live in their own file, rewritten on each start (below).
        printf "\n# Project settings, rewritten by deploy/services.sh on each start.\ninclude 'sds.conf'\n" \
            >>"$PGDATA/postgresql.conf"
    fi

    bk_configure
    warn_ephemeral "$PG_PORT" PostgreSQL SDS_PG_PORT
    local changed
    changed=$(write_if_changed "$PGDATA/sds.conf" 600 <<EOF
# Written by deploy/services.sh on each start: edit that script, not this file.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_RUN'
shared_preload_libraries = 'timescaledb'
timescaledb.telemetry_level = off
# A replication slot keeps WAL for a standby that is away; past this much it gives up on it
# (the standby must then be made again) rather than fill the disk.
max_slot_wal_keep_size = '8GB'
$(sync_line)
$(bk_pg_lines)
EOF
)
    chown postgres:postgres "$PGDATA/sds.conf"

    if pg_supervised || pg_running; then
        pg_wait postgresql "$PG_PORT" "$PG_RUN" 60 || pg_running \
            || die "the supervised PostgreSQL does not come back (see $PG_LOG, $SUPERVISE/postgresql.status)"
        say "postgresql: already running on port $(pg_live_port)"
        if [[ -n $changed ]]; then
            # synchronous_standby_names and the WAL limit apply on reload; port and preload do not.
            as_postgres "$PG_BIN/pg_ctl" -D "$PGDATA" reload >/dev/null
            warn "postgresql settings changed (reloaded); a port change needs: $0 stop && $0 start"
        fi
    else
        mkdir -p "$LOGS"
        say "postgresql: starting on 127.0.0.1:$PG_PORT"
        pg_launch postgresql "$PGDATA" "$PG_LOG" "$PG_PORT" "$PG_RUN" \
            || die "PostgreSQL did not start (is port $PG_PORT free?)"
    fi
}

# With a synchronous standby every commit waits until the standby has flushed it, so a reading
# the ingester acknowledged survives the loss of the primary (the promotion drill). The price:
# while the standby is down, commits wait (ingest stalls, nothing is lost) until it is back or
# SDS_PG_STANDBY_SYNC=off and a start (reload) of this script.
sync_line() {
    if sb_exists && sb_is_standby && [[ $SB_SYNC != off ]]; then
        echo "synchronous_standby_names = '$SB_SLOT'"
    else
        echo "synchronous_standby_names = ''"
    fi
}

# ---- the hot standby: deploy/lib/pg_standby.sh --------------------------------------------------
# shellcheck source=deploy/lib/pg_standby.sh
. "$REPO/deploy/lib/pg_standby.sh"
# ---- backups: deploy/lib/pg_backup.sh ----------------------------------------------------------
# shellcheck source=deploy/lib/pg_backup.sh
. "$REPO/deploy/lib/pg_backup.sh"
# ---- the WAL stream into the backup side: deploy/lib/pg_walstream.sh ------------------------------
# shellcheck source=deploy/lib/pg_walstream.sh
. "$REPO/deploy/lib/pg_walstream.sh"
# ---- the automatic failover profile (SDS_DB=patroni): deploy/lib/pg_patroni.sh -------------------
# (after pg_backup.sh: under Patroni the backup configuration is the cluster's)
# shellcheck source=deploy/lib/pg_patroni.sh
. "$REPO/deploy/lib/pg_patroni.sh"

# Role sds (login, not superuser) owns database sds; the roles and the extensions come from
# deploy/db/roles.sql and deploy/db/extensions.sql, the same files the tests provision their
# databases from (testbed/database.py), so the suite runs on the topology that ships.
pg_bootstrap() {
    local exists
    if [[ -f $RETIRED ]]; then return; fi
    exists=$(psql_su -d postgres -tA -c "SELECT count(*) FROM pg_roles WHERE rolname = 'sds'")
    psql_su -d postgres <"$REPO/deploy/db/roles.sql"
    if [[ $exists == 0 ]]; then
        say "postgresql: created role sds"
        psql_su -d postgres -v pw="$DB_PW" <<<"ALTER ROLE sds LOGIN PASSWORD :'pw';"
    elif [[ -n $DB_PW_NEW ]]; then
        say "postgresql: setting a new password for role sds (secrets.env was missing)"
        psql_su -d postgres -v pw="$DB_PW" <<<"ALTER ROLE sds LOGIN PASSWORD :'pw';"
    fi
    exists=$(psql_su -d postgres -tA -c "SELECT count(*) FROM pg_database WHERE datname = 'sds'")
    if [[ $exists == 0 ]]; then
        say "postgresql: creating database sds"
        psql_su -d postgres -c 'CREATE DATABASE sds OWNER sds'
    fi
    psql_su -d sds <"$REPO/deploy/db/extensions.sql"
}

pg_stop() {
    sb_stop
    if pg_supervised || pg_running; then
        bk_switch_wal
        say "postgresql: stopping (fast)"
        pg_halt postgresql "$PGDATA"
    else
        say "postgresql: not running"
    fi
}

# ---- whole-machine recovery (docs/operations.md "Whole machine lost") ----------------------------
# recover: a fresh .state from the backup repository the SDS_BACKUP_* settings name. Restores the
# newest backup, starts PostgreSQL (it replays the archived WAL), then writes back the recovery
# kit sealed in the restored database (secrets.env, the broker's accounts, the stamps:
# shared/recovery.py), opened with SDS_RECOVERY_KEY. deploy/run.sh recover then starts the rest.
# A rerun after a failure resumes (.state/recover.pending).
recover() {
    local pending=$STATE/recover.pending
    [[ $DB == postgres ]] || die "recover: the default database profile only (a Patroni node is rebuilt from the leader)"
    [[ -n ${SDS_RECOVERY_KEY:-} ]] || die "recover needs SDS_RECOVERY_KEY: the recovery key kept off the machine (it was in .state/secrets.env)"
    if [[ -f $PGDATA/PG_VERSION && ! -f $pending ]]; then
        die "recover makes a fresh .state, but $PGDATA holds a database: to go back in time use sds restore (docs/operations.md \"Restore, step by step\")"
    fi
    mkdir -p "$LOGS" "$PIDS" "$PG_RUN"
    touch "$pending"
    if [[ ! -f $PGDATA/PG_VERSION ]]; then
        chown postgres:postgres "$PG_DIR" "$PG_RUN"
        chmod 700 "$PG_DIR"
        ensure_traversable postgres "$PG_DIR"
        bk_configure
        say "recover: restoring the newest backup from the repository into $PGDATA"
        (cd "$REPO" && SDS_BACKUP_CONFIG=$BK_CONF "$VENV/bin/sds" restore) \
            || die "recover: the restore failed (above); check the SDS_BACKUP_* settings"
    fi
    db_start
    say "recover: writing back the recovery kit from the restored database"
    psql_su -d sds -tA -c "COPY (SELECT name, translate(encode(sealed, 'base64'), E'\n', '') FROM recovery_files) TO STDOUT" \
        | "$VENV/bin/sds" recovery unpack --state "$STATE" \
        || die "recover: the recovery kit could not be written back (above)"
    rm -f "$pending"
}

# ---- mosquitto ----------------------------------------------------------------------------------
mq_render() {
    local conf
    conf=$(<"$REPO/deploy/mosquitto/mosquitto.conf")
    conf=${conf//@BIND@/127.0.0.1}
    conf=${conf//@PORT@/$MQTT_PORT}
    conf=${conf//@DIR@/$MQ_DIR}
    printf '%s\n\n' "$conf"
    cat "$REPO/deploy/mosquitto/durable.conf"
}

# The broker drops to user mosquitto and must write its store and log, and reread passwd and acl
# on SIGHUP. Root (the CLI, this script) can still write them.
mq_fix_perms() {
    chown -R mosquitto:mosquitto "$MQ_DIR"
    chmod 700 "$MQ_DIR"
    chmod 600 "$MQ_DIR/passwd" "$MQ_DIR/acl"
}

MQ_START_WAIT=30
mq_start() {
    mkdir -p "$MQ_DIR/data"
    local changed
    changed=$(mq_render | write_if_changed "$MQ_CONF" 600)
    write_if_changed "$MQ_DIR/acl" 600 <"$REPO/deploy/mosquitto/acl" >/dev/null
    if [[ ! -f $MQ_DIR/passwd ]]; then
        say "mosquitto: creating passwd with user ingester"
        mosquitto_passwd -c -b "$MQ_DIR/passwd" ingester "$MQ_PW"
    elif [[ -n $MQ_PW_NEW ]] || ! grep -q '^ingester:' "$MQ_DIR/passwd"; then
        # Keeps the devices' entries; only the ingester's password is (re)set.
        say "mosquitto: setting the ingester's password in passwd"
        mosquitto_passwd -b "$MQ_DIR/passwd" ingester "$MQ_PW"
        changed=changed
    fi
    # The shard users (ingest/shards.py, SDS_INGEST_SHARDS > 1) share the ingester's password;
    # the shipped ACL grants each of them read access.
    local k
    for ((k = 1; k <= 16; k++)); do
        if [[ -n $MQ_PW_NEW ]] || ! grep -q "^ingester-$k:" "$MQ_DIR/passwd"; then
            mosquitto_passwd -b "$MQ_DIR/passwd" "ingester-$k" "$MQ_PW"
            changed=changed
        fi
    done
    # The alert deliverer's account (alerts.delivery, SDS_ALERTS_MQTT_USERNAME) shares it too;
    # the shipped ACL lets it write alerts/# only.
    if [[ -n $MQ_PW_NEW ]] || ! grep -q "^alerts-publisher:" "$MQ_DIR/passwd"; then
        mosquitto_passwd -b "$MQ_DIR/passwd" alerts-publisher "$MQ_PW"
        changed=changed
    fi
    mq_fix_perms
    ensure_traversable mosquitto "$MQ_DIR"

    if mq_running; then
        say "mosquitto: already running (pid $(pid_in "$MQ_PID"))"
        [[ -z $changed ]] || warn "broker config changed; apply it with: $0 stop && $0 start"
        return
    fi
    if port_open "$MQTT_PORT"; then
        die "port $MQTT_PORT is taken by another process (a system mosquitto?); stop it or set SDS_MQTT_PORT"
    fi
    say "mosquitto: starting on 127.0.0.1:$MQTT_PORT"
    rm -f "$MQ_PID"
    # In the foreground under its supervisor; it still drops to user mosquitto and writes pid_file.
    supervise_start broker "$LOGS/broker.log" -- mosquitto -c "$MQ_CONF"
    # Through the supervisor's restarts (0.5, 1, 2, 4, 8 s apart), as PostgreSQL's pg_wait.
    local i
    for ((i = 0; i < MQ_START_WAIT * 10; i++)); do
        if supervised_running broker && port_open "$MQTT_PORT"; then return; fi
        supervised_note_deaths broker "$MQ_DIR/mosquitto.log" || break
        sleep 0.1
    done
    stop_pidfile "$PIDS/broker.pid" "$MQ_CONF" 30 || true
    log_tail "$LOGS/broker.log"
    log_tail "$MQ_DIR/mosquitto.log"
    die "mosquitto did not start listening on $MQTT_PORT"
}

mq_stop() {
    if mq_running; then
        say "mosquitto: stopping (SIGTERM, saves its store)"
        stop_pidfile "$PIDS/broker.pid" "$MQ_CONF" 30 || stop_pidfile "$MQ_PID" "$MQ_CONF" 30 || true
    else
        say "mosquitto: not running"
    fi
}

mq_reload() {
    if [[ -f $MQ_DIR/passwd ]]; then mq_fix_perms; fi
    local pid
    # mosquitto removes its pid file as it exits: read once, and a kill that finds no process
    # is the "restarting" case.
    if pid_alive "$MQ_PID" "$MQ_CONF" && read_line pid "$MQ_PID" && kill -HUP "$pid" 2>/dev/null; then
        say "mosquitto: reloaded passwd and acl (SIGHUP to pid $pid)"
    else
        say "mosquitto: not running (or restarting); it reads passwd and acl when it starts"
    fi
}

# ", <its supervisor's words>" (restarts, last exit) for a supervised server.
sup_note() {
    local st
    st=$(supervised_status "$1")
    if [[ -n $st ]]; then echo ", ${st#*$'\t'}"; else echo ", not supervised (started by an older services.sh: stop, then start)"; fi
}

status() {
    local rc=0
    if [[ $DB == patroni ]]; then
        pt_status || rc=3
    elif [[ -f $RETIRED ]]; then
        say "postgresql: retired by a promotion (the standby is the primary)"
    elif pg_running; then
        say "postgresql: running, port $(pg_live_port), data $PGDATA, log $PG_LOG$(sup_note postgresql)"
    else
        say "postgresql: $(pg_supervised && echo restarting || echo stopped)$(pg_supervised && sup_note postgresql)"
        rc=3
    fi
    ws_status || rc=3
    if sb_exists; then
        if sb_running; then
            say "postgresql standby: running$(sb_is_standby || echo ' (promoted: the primary)'), port $(sed -n 4p "$SB_DATA/postmaster.pid"), data $SB_DATA, log $SB_LOG$(sup_note postgresql-standby)"
        else
            say "postgresql standby: $(sb_supervised && echo restarting || echo stopped)$(sb_supervised && sup_note postgresql-standby)"
            rc=3
        fi
    fi
    if [[ $BROKER == rabbitmq-cluster ]]; then
        "${RABBIT[@]}" status || rc=3
    elif mq_running && { ! mq_supervised || supervised_running broker; }; then
        # The port from the config it runs with, which SDS_MQTT_PORT may no longer match.
        local mq_port
        mq_port=$(awk '$1 == "listener" {print $2; exit}' "$MQ_CONF")
        say "mosquitto: running, pid $(pid_in "$MQ_PID"), port $mq_port, log $MQ_DIR/mosquitto.log$(sup_note broker)"
    else
        say "mosquitto: $(mq_supervised && echo restarting || echo stopped)$(mq_supervised && sup_note broker)"
        rc=3
    fi
    return $rc
}

case ${1:-} in
start)
    command -v mosquitto >/dev/null && [[ -x $PG_BIN/initdb && -f $TIMESCALEDB_CONTROL ]] \
        || die "PostgreSQL 15, TimescaleDB or mosquitto is missing: run deploy/setup.sh first"
    mkdir -p "$LOGS" "$PIDS"
    load_secrets
    db_start
    pg_bootstrap
    bk_setup
    ws_start
    [[ $DB == patroni ]] || sb_start
    echo "$DB" >"$STATE/db-profile"
    echo "$BROKER" >"$PROFILE_FILE"
    if [[ $BROKER == rabbitmq-cluster ]]; then
        mq_stop >/dev/null # one broker at a time: devices must not split between two
        "${RABBIT[@]}" start
    else
        [[ ! -d $STATE/rabbitmq ]] || "${RABBIT[@]}" stop >/dev/null
        mq_start
    fi
    status
    say "connection settings: $SECRETS (source it with: set -a; . $SECRETS; set +a)"
    ;;
stop)
    # One after the other. (A concurrent stop was tried and taken back after `rabbitmq.sh stop`
    # exited non-zero; the cause turned out to be stop_pidfile's read of a vanished
    # /proc/PID/stat, fixed in read_line, not the concurrency, which gained about a second.)
    mq_stop
    [[ ! -d $STATE/rabbitmq ]] || "${RABBIT[@]}" stop
    pt_stop
    pg_stop
    # After the server: the shutdown sends its last WAL (the shutdown checkpoint) to the stream.
    ws_stop
    ;;
status)
    rc=0
    status || rc=$?
    bk_status
    exit $rc
    ;;
recover)
    command -v mosquitto >/dev/null && [[ -x $PG_BIN/initdb && -f $TIMESCALEDB_CONTROL ]] \
        || die "PostgreSQL 15, TimescaleDB or mosquitto is missing: run deploy/setup.sh first"
    recover
    ;;
reload-broker)
    if [[ $BROKER == rabbitmq-cluster ]]; then "${RABBIT[@]}" reload; else mq_reload; fi
    ;;
standby-init)
    [[ $DB != patroni ]] || die "the Patroni profile has its own replicas (SDS_PATRONI_NODES)"
    mkdir -p "$LOGS"
    load_secrets
    sb_init
    status || true
    ;;
promote)
    [[ $DB != patroni ]] || die "under Patroni, use: $0 switchover [NODE]"
    load_secrets
    sb_promote
    ;;
switchover) pt_switchover "${2:-}" ;;
psql)
    shift
    [[ $DB != patroni ]] || pt_use_leader
    pg_running || die "postgresql is not running"
    PGOPTIONS='' as_postgres "$PG_BIN/psql" -X -h "$PG_RUN" -p "$(pg_live_port)" -d sds "$@"
    ;;
*)
    echo "usage: $0 {start|stop|status|recover|reload-broker|psql [args]|standby-init|promote|switchover [NODE]}" >&2
    exit 2
    ;;
esac
