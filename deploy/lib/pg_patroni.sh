# deploy/lib/pg_patroni.sh: the SDS_DB=patroni part of deploy/services.sh (docs/operations.md
# "The automatic failover profile"): three etcd members, SDS_PATRONI_NODES (2 or 3) PostgreSQL 15
# nodes under Patroni with synchronous replication and pg_rewind, HAProxy in front of whichever
# node leads, WAL archived by pgBackRest from the leader. Each process runs under its own
# supervisor (deploy/lib/supervise.py). Sourced by services.sh only, after its settings and
# helpers; the state lives in .state/patroni.
#
# Ports (all on 127.0.0.1), from SDS_PATRONI_PORT_BASE (B, default 25440 (deploy/lib/ports.sh); a
# cluster keeps the base it was made with, read back from its haproxy.cfg, unless the variable is set):
#   B          HAProxy: the node Patroni's REST API says is the primary (SDS_DATABASE_URL)
#   B+k        node k's PostgreSQL (k = 1..SDS_PATRONI_NODES)
#   B+10+k     node k's Patroni REST API (/primary, /replica, /health, /metrics)
#   B+20+k     etcd member k's client port (k = 1..3)
#   B+30+k     etcd member k's peer port

PT_DIR=$STATE/patroni
PT_NODES=${SDS_PATRONI_NODES:-2}
PT_HAPROXY_CONF=$PT_DIR/haproxy.cfg
# The etcd members keep their peer addresses in their data: a cluster must keep its ports. The
# base is remembered in .state/patroni/port-base at each start (pt_remember_base), so a later
# stop or status without the setting finds the running cluster; a cluster made before that file
# has it in HAProxy's configuration, and one made before the default moved and never started as
# far as HAProxy has the old base.
PT_BASE=${SDS_PATRONI_PORT_BASE:-$(cat "$PT_DIR/port-base" 2>/dev/null || true)}
PT_BASE=${PT_BASE:-$(config_port "$PT_HAPROXY_CONF" '^ +bind 127\.0\.0\.1:([0-9]+)$')}
if [[ -z $PT_BASE && -d $PT_DIR/etcd1 ]]; then PT_BASE=$OLD_PATRONI_PORT_BASE; fi
PT_BASE=${PT_BASE:-$DEFAULT_PATRONI_PORT_BASE}
pt_remember_base() { mkdir -p "$PT_DIR" && echo "$PT_BASE" >"$PT_DIR/port-base"; }
# How the processes find the leader: haproxy (one address, HAProxy follows Patroni's REST API)
# or libpq (every node in the URL, target_session_attrs=read-write). docs/decisions.md says why
# haproxy is the default; the failover drill measures both.
PT_DISCOVERY=${SDS_PATRONI_DISCOVERY:-haproxy}
PT_SCOPE=sds
PT_ETCD_MEMBERS=3
PT_SECRETS=$PT_DIR/secrets.env
PT_BACKREST=$PT_DIR/pgbackrest
# Failover timing (Patroni's dynamic configuration, written into etcd at the cluster's
# bootstrap): the leader key lives PT_TTL seconds unless renewed every PT_LOOP_WAIT seconds; a
# lost leader is replaced within about PT_TTL + PT_LOOP_WAIT. Patroni needs
# loop_wait + 2 * retry_timeout <= ttl.
PT_TTL=15
PT_LOOP_WAIT=3
PT_RETRY_TIMEOUT=5

if [[ $DB == patroni ]]; then
    [[ $PT_NODES =~ ^[23]$ ]] || die "SDS_PATRONI_NODES must be 2 or 3, not '$PT_NODES'"
    [[ $PT_BASE =~ ^[0-9]+$ ]] && ((PT_BASE > 1024 && PT_BASE + PATRONI_PORT_SPAN < 65536)) \
        || die "SDS_PATRONI_PORT_BASE must be a port number, not '$PT_BASE'"
    [[ $PT_DISCOVERY == haproxy || $PT_DISCOVERY == libpq ]] \
        || die "SDS_PATRONI_DISCOVERY must be haproxy or libpq, not '$PT_DISCOVERY'"
fi

# As user postgres, from a directory it can enter (the default profile's .state/pg may not exist).
pt_as_postgres() { (cd "$PT_DIR" && runuser -u postgres -- "$@"); }
pt_pg_port() { echo $((PT_BASE + $1)); }
pt_rest_port() { echo $((PT_BASE + 10 + $1)); }
pt_etcd_client() { echo $((PT_BASE + 20 + $1)); }
pt_etcd_peer() { echo $((PT_BASE + 30 + $1)); }
pt_node_dir() { echo "$PT_DIR/node$1"; }
pt_etcd_hosts() {
    local k hosts=()
    for ((k = 1; k <= PT_ETCD_MEMBERS; k++)); do hosts+=("127.0.0.1:$(pt_etcd_client "$k")"); done
    local IFS=,
    echo "${hosts[*]}"
}

# The URL every process uses (SDS_DATABASE_URL), for the password $1.
pt_url() {
    if [[ $PT_DISCOVERY == haproxy ]]; then
        echo "postgresql://sds:$1@127.0.0.1:$PT_BASE/sds"
    else
        local k hosts=()
        for ((k = 1; k <= PT_NODES; k++)); do hosts+=("127.0.0.1:$(pt_pg_port "$k")"); done
        local IFS=,
        echo "postgresql://sds:$1@${hosts[*]}/sds?target_session_attrs=read-write&connect_timeout=5"
    fi
}

# The cluster's own passwords (superuser, replication), made once, mode 600.
pt_secrets() {
    mkdir -p "$PT_DIR"
    if [[ ! -s $PT_SECRETS ]]; then
        (umask 077 && printf 'PT_SU_PW=%s\nPT_REPL_PW=%s\n' "$(new_secret)" "$(new_secret)" \
            >"$PT_SECRETS")
    fi
    PT_SU_PW=$(sed -n 's/^PT_SU_PW=//p' "$PT_SECRETS")
    PT_REPL_PW=$(sed -n 's/^PT_REPL_PW=//p' "$PT_SECRETS")
}

# ---- etcd ---------------------------------------------------------------------------------------
pt_etcd_start() {
    local k initial=() name dir
    for ((k = 1; k <= PT_ETCD_MEMBERS; k++)); do
        initial+=("etcd$k=http://127.0.0.1:$(pt_etcd_peer "$k")")
    done
    local IFS=,
    local cluster="${initial[*]}"
    unset IFS
    for ((k = 1; k <= PT_ETCD_MEMBERS; k++)); do
        name=etcd-$k
        dir=$PT_DIR/etcd$k
        if pid_alive "$PIDS/$name.pid" "$dir"; then continue; fi
        mkdir -p "$dir"
        chown etcd:etcd "$dir"
        chmod 700 "$dir"
        # Heartbeat and election a little slower than etcd's defaults (100 ms, 1 s): on a busy
        # machine the defaults elect new etcd leaders for nothing.
        supervise_start "$name" "$LOGS/$name.log" --user etcd -- etcd --name "etcd$k" \
            --data-dir "$dir/data" \
            --listen-client-urls "http://127.0.0.1:$(pt_etcd_client "$k")" \
            --advertise-client-urls "http://127.0.0.1:$(pt_etcd_client "$k")" \
            --listen-peer-urls "http://127.0.0.1:$(pt_etcd_peer "$k")" \
            --initial-advertise-peer-urls "http://127.0.0.1:$(pt_etcd_peer "$k")" \
            --initial-cluster "$cluster" --initial-cluster-state new \
            --initial-cluster-token "sds-$PT_BASE" \
            --heartbeat-interval 250 --election-timeout 2500 \
            --auto-compaction-retention 1 --logger zap --log-level warn
        say "$name: started on 127.0.0.1:$(pt_etcd_client "$k") (log $LOGS/$name.log)"
    done
    local i
    for ((i = 0; i < 600; i++)); do
        ETCDCTL_API=3 etcdctl --endpoints "$(pt_etcd_hosts)" --command-timeout=2s \
            endpoint health >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    for ((k = 1; k <= PT_ETCD_MEMBERS; k++)); do log_tail "$LOGS/etcd-$k.log" 10; done
    die "etcd did not become healthy within 60 s"
}

# ---- pgBackRest: one stanza, one pg path per node -------------------------------------------------
# Rendered by the backup configuration's own renderer (`sds backup configure`, shared/backup.py,
# from the SDS_BACKUP_* settings) into .state/patroni/pgbackrest: the cluster's config lists every
# node (pg1..pgN; a backup finds the primary among them) and is the one the scheduler, `sds
# backup` and `services.sh status` use (BK_CONF). archive-push runs on whichever node leads
# (archive_mode = on archives on the primary only) and resolves the WAL file against pg1, so
# each node gets a config of its own naming its own data directory as pg1, same repository.
if [[ $DB == patroni ]]; then
    BK_DIR=$PT_BACKREST
    BK_CONF=$BK_DIR/pgbackrest.conf
fi

pt_backrest_files() {
    [[ -x $VENV/bin/sds ]] || die "the Patroni profile needs the project's venv for its archive settings: run deploy/setup.sh (or deploy/run.sh)"
    mkdir -p "$PT_BACKREST"
    ensure_traversable postgres "$PT_BACKREST"
    local k spec all=()
    for ((k = 1; k <= PT_NODES; k++)); do
        mkdir -p "$(pt_node_dir "$k")"
        spec="$(pt_node_dir "$k")/data:$(pt_pg_port "$k"):$(pt_node_dir "$k")/run"
        all+=(--pg "$spec")
        "$VENV/bin/sds" backup configure --config "$(pt_node_dir "$k")/pgbackrest.conf" \
            --base-dir "$PT_BACKREST" --pg "$spec" \
            --pg-settings "$(pt_node_dir "$k")/archive.conf" >/dev/null \
            || die "could not render node $k's pgBackRest configuration (check the SDS_BACKUP_* settings)"
    done
    "$VENV/bin/sds" backup configure --config "$BK_CONF" --base-dir "$PT_BACKREST" "${all[@]}" \
        >/dev/null || die "could not render the cluster's pgBackRest configuration"
}

# Node $1's archive settings (archive.conf's "name = 'value'" lines) as YAML mapping entries.
pt_archive_yaml() {
    local file
    file=$(pt_node_dir "$1")/archive.conf
    [[ -s $file ]] || die "$file is missing (pt_backrest_files renders it)"
    sed -n "s/^\([a-z_]*\) = '\(.*\)'\$/    \1: '\2'/p" "$file"
}

# ---- Patroni ------------------------------------------------------------------------------------
pt_node_yml() {
    local k=$1 dir
    dir=$(pt_node_dir "$k")
    cat <<EOF
# Written by deploy/services.sh (deploy/lib/pg_patroni.sh) on each start: edit that script.
scope: $PT_SCOPE
namespace: /sds/
name: node$k
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(pt_rest_port "$k")
  connect_address: 127.0.0.1:$(pt_rest_port "$k")
etcd3:
  hosts: $(pt_etcd_hosts)
bootstrap:
  # Written into etcd once, when the cluster is made; later changes: patronictl edit-config.
  dcs:
    ttl: $PT_TTL
    loop_wait: $PT_LOOP_WAIT
    retry_timeout: $PT_RETRY_TIMEOUT
    maximum_lag_on_failover: 1048576
    # A commit returns after the synchronous replica flushed it: the replica promoted after a
    # crash holds every reading the ingester acknowledged. Not strict: with the replica gone the
    # leader goes on alone (availability) and says so in patronictl list.
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        wal_log_hints: 'on'
        hot_standby: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        max_slot_wal_keep_size: 8GB
        archive_mode: 'on'
        shared_preload_libraries: timescaledb
        timescaledb.telemetry_level: 'off'
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - data-checksums
postgresql:
  listen: 127.0.0.1:$(pt_pg_port "$k")
  connect_address: 127.0.0.1:$(pt_pg_port "$k")
  data_dir: $dir/data
  bin_dir: $PG_BIN
  pgpass: $dir/pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: postgres
      password: '$PT_SU_PW'
    replication:
      username: sds_replica
      password: '$PT_REPL_PW'
  parameters:
    unix_socket_directories: '$dir/run'
    # Archiving through this node's own pgBackRest config (its data directory as pg1); only
    # the leader archives.
$(pt_archive_yaml "$k")
  pg_hba:
    - local all all peer
    - host replication sds_replica 127.0.0.1/32 scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
EOF
}

pt_node_alive() { pid_alive "$PIDS/patroni-$1.pid" "$(pt_node_dir "$1")/patroni.yml"; }

pt_node_start() {
    local k=$1 dir name=patroni-$1
    dir=$(pt_node_dir "$k")
    mkdir -p "$dir/run"
    pt_node_yml "$k" | write_if_changed "$dir/patroni.yml" 600 >/dev/null
    chown postgres:postgres "$dir" "$dir/run" "$dir/patroni.yml"
    chmod 700 "$dir"
    if pt_node_alive "$k"; then
        say "$name: already running (REST API 127.0.0.1:$(pt_rest_port "$k"))"
        return
    fi
    # SIGTERM: Patroni stops its PostgreSQL (fast) and, on the leader, hands the lock over.
    (cd "$dir" && supervise_start "$name" "$LOGS/$name.log" --user postgres --stop-timeout 90 \
        -- patroni "$dir/patroni.yml")
    say "$name: started (PostgreSQL 127.0.0.1:$(pt_pg_port "$k"), REST API 127.0.0.1:$(pt_rest_port "$k"), log $LOGS/$name.log)"
}

# pt_rest K PATH: the HTTP status of node K's REST API at PATH (000: no answer).
pt_rest() {
    curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$(pt_rest_port "$1")$2" || true
}

# The node that leads (its number), or nothing.
pt_leader() {
    local k
    for ((k = 1; k <= PT_NODES; k++)); do
        if [[ $(pt_rest "$k" /primary) == 200 ]]; then echo "$k"; return; fi
    done
}

# Point services.sh's PostgreSQL helpers (psql_su, pg_bootstrap) at the leader.
pt_use_leader() {
    local k
    k=$(pt_leader)
    [[ -n $k ]] || die "no Patroni node leads (deploy/services.sh status; patronictl -c $(pt_node_dir 1)/patroni.yml list)"
    PGDATA=$(pt_node_dir "$k")/data
    PG_RUN=$(pt_node_dir "$k")/run
    PG_DIR=$PT_DIR  # as_postgres's working directory
    RETIRED=$PT_DIR/none
}

pt_wait_leader() {
    local i
    for ((i = 0; i < $1 * 2; i++)); do
        [[ -n $(pt_leader) ]] && return 0
        sleep 0.5
    done
    return 1
}

# ---- HAProxy ------------------------------------------------------------------------------------
# Sends each new connection to the node whose REST API answers 200 on /primary (checked every
# second); connections to a node marked down are cut, so clients reconnect to the new leader.
pt_haproxy_conf() {
    local k
    cat <<EOF
# Written by deploy/services.sh (deploy/lib/pg_patroni.sh) on each start: edit that script.
global
    maxconn 2000
defaults
    mode tcp
    timeout connect 3s
    # Longer than the pools' idle lifetime: HAProxy never cuts a healthy idle session itself.
    timeout client 2h
    timeout server 2h
    timeout check 2s
listen sds_primary
    bind 127.0.0.1:$PT_BASE
    option httpchk GET /primary
    http-check expect status 200
    default-server inter 1s fastinter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
EOF
    for ((k = 1; k <= PT_NODES; k++)); do
        echo "    server node$k 127.0.0.1:$(pt_pg_port "$k") check port $(pt_rest_port "$k")"
    done
}

pt_haproxy_start() {
    local changed
    changed=$(pt_haproxy_conf | write_if_changed "$PT_HAPROXY_CONF" 644)
    haproxy -c -q -f "$PT_HAPROXY_CONF" || die "the HAProxy config $PT_HAPROXY_CONF does not pass haproxy -c"
    if pid_alive "$PIDS/haproxy.pid" "$PT_HAPROXY_CONF"; then
        if [[ -n $changed ]]; then
            stop_pidfile "$PIDS/haproxy.pid" "$PT_HAPROXY_CONF" 10 || true
        else
            say "haproxy: already running on 127.0.0.1:$PT_BASE"
            return
        fi
    fi
    supervise_start haproxy "$LOGS/haproxy.log" --user haproxy -- haproxy -db -f "$PT_HAPROXY_CONF"
    say "haproxy: started on 127.0.0.1:$PT_BASE (the Patroni leader)"
}

# ---- the profile --------------------------------------------------------------------------------
# The database part of `services.sh start`, for either profile (one database at a time).
db_start() {
    if [[ $DB == patroni ]]; then
        pt_start
        pt_use_leader
    else
        pt_stop
        local recovering=0
        [[ -f $PGDATA/recovery.signal ]] && recovering=1
        pg_start
        bk_wait_recovery "$recovering"
    fi
}

pt_start() {
    command -v patroni >/dev/null && command -v etcd >/dev/null && command -v haproxy >/dev/null \
        && command -v pgbackrest >/dev/null \
        || die "patroni, etcd, haproxy or pgbackrest is missing: run deploy/setup.sh first"
    # One database at a time: the default profile's server (if any) is stopped, its data kept.
    if pg_supervised || pg_running || sb_supervised || sb_running; then
        say "stopping the default profile's PostgreSQL (SDS_DB=patroni; its data stays in $PG_DIR)"
        pg_stop
    fi
    pt_secrets
    warn_ephemeral "$PT_BASE" "the Patroni profile (from $PT_BASE to $((PT_BASE + PATRONI_PORT_SPAN)))" SDS_PATRONI_PORT_BASE
    mkdir -p "$PT_DIR"
    chmod 755 "$PT_DIR"
    pt_remember_base
    ensure_traversable postgres "$PT_DIR"
    ensure_traversable etcd "$PT_DIR"
    pt_etcd_start
    local k
    for ((k = 1; k <= PT_NODES; k++)); do mkdir -p "$(pt_node_dir "$k")"; done
    pt_backrest_files
    for ((k = 1; k <= PT_NODES; k++)); do pt_node_start "$k"; done
    pt_haproxy_start
    # The first start bootstraps node 1 (initdb) and clones the others from it: about a minute.
    pt_wait_leader 180 || {
        for ((k = 1; k <= PT_NODES; k++)); do log_tail "$LOGS/patroni-$k.log" 15; done
        die "no Patroni node became the leader within 180 s"
    }
    pt_use_leader
    pt_as_postgres "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$(pg_live_port)" -t 60 \
        || die "the Patroni leader does not accept connections"
}

pt_stop() {
    [[ -d $PT_DIR ]] || return 0
    stop_pidfile "$PIDS/haproxy.pid" "$PT_HAPROXY_CONF" 10 && say "haproxy: stopped"
    local k
    # Replicas first, the leader last: it does not fail over while the others stop.
    local leader
    leader=$(pt_leader)
    for ((k = PT_NODES; k >= 1; k--)); do
        [[ $k == "$leader" ]] && continue
        stop_pidfile "$PIDS/patroni-$k.pid" "$(pt_node_dir "$k")/patroni.yml" 95 && say "patroni-$k: stopped"
    done
    if [[ -n $leader ]]; then
        # As in the default profile: the segment holding the last commits goes to the archive
        # with the shutdown.
        pt_use_leader && bk_switch_wal
        stop_pidfile "$PIDS/patroni-$leader.pid" "$(pt_node_dir "$leader")/patroni.yml" 95 \
            && say "patroni-$leader: stopped (it led)"
    fi
    for ((k = 1; k <= PT_ETCD_MEMBERS; k++)); do
        stop_pidfile "$PIDS/etcd-$k.pid" "$PT_DIR/etcd$k" 20 && say "etcd-$k: stopped"
    done
    return 0
}

# One line per process; the nodes' roles from Patroni. Exit 3 when something is down or no
# node leads.
pt_status() {
    local rc=0 k role lag
    for ((k = 1; k <= PT_ETCD_MEMBERS; k++)); do
        if pid_alive "$PIDS/etcd-$k.pid" "$PT_DIR/etcd$k"; then
            say "etcd-$k: running, client port $(pt_etcd_client "$k")$(sup_note "etcd-$k")"
        else
            say "etcd-$k: stopped"; rc=3
        fi
    done
    for ((k = 1; k <= PT_NODES; k++)); do
        if ! pt_node_alive "$k"; then
            say "patroni-$k: stopped"; rc=3; continue
        fi
        role=$({ curl -s -m 2 "http://127.0.0.1:$(pt_rest_port "$k")/patroni" 2>/dev/null || true; } \
            | python3 -c 'import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    print("no answer"); raise SystemExit
print(d.get("role", "?"), d.get("state", "?"), "timeline", d.get("timeline", "?"))' || echo "no answer")
        say "patroni-$k: $role, PostgreSQL port $(pt_pg_port "$k"), REST API $(pt_rest_port "$k")$(sup_note "patroni-$k")"
        [[ $role == "no answer" ]] && rc=3
    done
    if [[ -z $(pt_leader) ]]; then
        say "patroni: NO LEADER (writes fail until one is elected)"; rc=3
    fi
    if pid_alive "$PIDS/haproxy.pid" "$PT_HAPROXY_CONF"; then
        say "haproxy: running, port $PT_BASE$(sup_note haproxy)"
    else
        say "haproxy: stopped"; rc=3
    fi
    return $rc
}

# A planned switch of the leader (docs/operations.md): Patroni promotes the synchronous replica
# and the old leader follows it; with the candidate $1 (node number) or any.
pt_switchover() {
    [[ $DB == patroni ]] || die "switchover is for the Patroni profile (SDS_DB=patroni); the standby has: services.sh promote"
    local leader
    leader=$(pt_leader)
    [[ -n $leader ]] || die "no node leads: a switchover needs a leader (a failover happens by itself)"
    local args=(--leader "node$leader" --force)
    [[ -z ${1:-} ]] || args+=(--candidate "node$1")
    pt_as_postgres patronictl -c "$(pt_node_dir "$leader")/patroni.yml" switchover "${args[@]}"
    pt_wait_leader 60 || die "no leader 60 s after the switchover"
    say "node$(pt_leader) leads now"
}
