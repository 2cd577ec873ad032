#!/usr/bin/env bash
# deploy/run.sh [start|stop|status]: README command 1, install and run the whole service locally.
#   start (default)  setup.sh, services.sh start, `sds db upgrade`, the demo data (first run only),
#                    then the ingester, the scheduler, SDS_API_INSTANCES API instances (gunicorn),
#                    the edge in front of them (nginx) and the device simulator in the background,
#                    each under its supervisor (deploy/lib/supervise.py), which restarts it with
#                    backoff when it dies (docs/operations.md "Supervision").
#                    Anything already running is left alone, so a rerun changes nothing and takes
#                    seconds; a changed instance count starts or stops instances and reloads the
#                    edge without dropping a request.
#   recover          whole machine lost: a fresh .state from the backup repository named by the
#                    SDS_BACKUP_* settings, with SDS_RECOVERY_KEY (docs/operations.md), then start
#   stop             stops the processes at once, in the order the data needs (the edge drained
#                    before the API instances, the simulator before the ingesters), then the
#                    broker and PostgreSQL
#   status           what is running, with each process's restarts and last exit, the last
#                    backup's age and the WAL archive's state (deploy/lib/pg_backup.sh), the
#                    cold tier (sds cold status)
#   monitor [off]    also run Prometheus, Alertmanager and node_exporter with deploy/prometheus/
#                    (remembered: later starts include them; `monitor off` stops and forgets;
#                    docs/operations.md "Monitoring and alerts")
# Broker profile (docs/operations.md): SDS_BROKER=mosquitto (default, one broker) or
#   SDS_BROKER=rabbitmq-cluster deploy/run.sh   a 3-node RabbitMQ cluster on this machine whose
#   quorum queues survive a node crash (deploy/rabbitmq.sh); the ingester and simulator then
#   speak MQTT 3.1.1 and fail over between the nodes. The choice is remembered until changed.
# Database profile: SDS_DB=patroni deploy/run.sh   three etcd members and two PostgreSQL nodes
#   under Patroni with automatic failover, behind HAProxy (deploy/lib/pg_patroni.sh,
#   docs/operations.md "The automatic failover profile"); remembered like the broker's.
# Run as root. State, logs and pids live under <repo>/.state (docs/operations.md).
set -euo pipefail

SDS_SCRIPT=run.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=deploy/lib/monitoring.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/monitoring.sh"

SECRETS=$STATE/secrets.env
DEMO_STAMP=$STATE/demo.done
DEMO_OUT=$STATE/demo-credentials.txt
DEMO_DEVICES=$STATE/demo-devices.json
# Days of 5-minute history the demo starts with (first run only). The default, 500, is older
# than the default SDS_HOT_DAYS (430), so the cold tier fills at once; a smaller number makes a
# first run quicker (a demo with 0 days starts empty and fills from the simulator).
DEMO_HISTORY_DAYS=${SDS_DEMO_HISTORY_DAYS:-500}
MQ_PASSWD=$STATE/mosquitto/passwd
RMQ_DEFS=$STATE/rabbitmq/definitions.json
EDGE_DIR=$STATE/nginx
EDGE_CONF=$EDGE_DIR/nginx.conf

# The API layout, from the settings (shared/config.py documents them): clients talk to the edge
# on SDS_EDGE_BIND; API instance k (1..SDS_API_INSTANCES) listens on SDS_HTTP_BIND's port + k - 1.
api_layout() {
    EDGE_BIND=${SDS_EDGE_BIND:-$DEFAULT_EDGE_BIND}
    local bind=${SDS_HTTP_BIND:-$DEFAULT_HTTP_BIND}
    API_HOST=${bind%:*}
    API_PORT0=${bind##*:}
    API_INSTANCES=${SDS_API_INSTANCES:-1}
    [[ $API_INSTANCES =~ ^[1-9][0-9]*$ ]] || die "SDS_API_INSTANCES must be a positive integer, not '$API_INSTANCES'"
    [[ $API_PORT0 =~ ^[0-9]+$ ]] || die "SDS_HTTP_BIND must be host:port, not '$bind'"
    ingest_layout
    # alerts-evaluate: the alert evaluator (docs/alerts.md), one active per database;
    # alerts-deliver: the deliverer (webhooks, email, the MQTT alerts topic).
    PROCS=("${INGEST_PROCS[@]}" aggregate alerts-evaluate alerts-deliver)
    local k
    for ((k = 1; k <= API_INSTANCES; k++)); do PROCS+=("serve-$k"); done
    # logrotate: rotates every log under .state (deploy/logrotate, docs/operations.md "Log files").
    PROCS+=(edge simulate logrotate)
    API_METRICS0=${SDS_API_METRICS_PORT:-$DEFAULT_API_METRICS_PORT}
    [[ $API_METRICS0 =~ ^[0-9]+$ ]] || die "SDS_API_METRICS_PORT must be a port number, not '$API_METRICS0'"
    if monitoring_on; then PROCS+=("${MON_PROCS[@]}"); fi
    return 0
}

# The ingesters, from the settings: SDS_INGEST_SHARDS (default: one per core, at most 16, with
# mosquitto; 1 with the RabbitMQ cluster profile, whose MQTT 3.1.1 has no shared subscriptions)
# shards sharing the stream (ingest/shards.py), each with a standby (SDS_INGEST_STANDBY, default
# 1 with several shards, 0 with one) that takes the shard's broker session over when its leader
# dies. One shard runs as "ingest" with a plain subscription, as before shards existed.
default_shards() {
    local broker cores
    broker=${SDS_BROKER:-$(cat "$STATE/broker-profile" 2>/dev/null || echo mosquitto)}
    if [[ $broker == rabbitmq-cluster ]]; then
        echo 1
        return
    fi
    cores=$(nproc 2>/dev/null || echo 1)
    echo $((cores > 16 ? 16 : cores))
}

# The password file the API writes device logins into (the dashboard's fleet forms): the
# mosquitto profile's; empty with the RabbitMQ cluster, whose accounts stay with sds device.
api_passwd_file() {
    local broker
    broker=${SDS_BROKER:-$(cat "$STATE/broker-profile" 2>/dev/null || echo mosquitto)}
    [[ $broker == rabbitmq-cluster ]] || echo "$MQ_PASSWD"
}

ingest_layout() {
    INGEST_SHARDS=${SDS_INGEST_SHARDS:-$(default_shards)}
    [[ $INGEST_SHARDS =~ ^[1-9][0-9]*$ ]] && ((INGEST_SHARDS <= 16)) \
        || die "SDS_INGEST_SHARDS must be 1..16, not '$INGEST_SHARDS'"
    local standby=${SDS_INGEST_STANDBY:-$((INGEST_SHARDS > 1 ? 1 : 0))} k
    INGEST_PROCS=()
    if ((INGEST_SHARDS == 1)); then
        INGEST_PROCS=(ingest)
        ((standby)) && INGEST_PROCS+=(ingest-standby)
    else
        for ((k = 1; k <= INGEST_SHARDS; k++)); do
            INGEST_PROCS+=("ingest-$k")
            ((standby)) && INGEST_PROCS+=("ingest-$k-standby")
        done
    fi
    return 0
}

standby_metrics_port() {
    local base=${SDS_METRICS_PORT:-$DEFAULT_METRICS_PORT}
    if ((base == 0)); then echo 0; else echo $((base + 50)); fi
}

# Ingester pid files present (of any earlier layout too).
ingest_pidfiles() {
    local f
    for f in "$PIDS"/ingest.pid "$PIDS"/ingest-*.pid; do
        [[ -e $f ]] && basename "$f" .pid
    done
    return 0
}

# The shards of an old layout (count $1) whose sessions a new layout (count $2) no longer uses;
# 0 names the session of an unsharded ingester.
retire_targets() {
    local prev=$1 new=$2 k
    if ((prev == new)); then
        return 0
    elif ((prev == 1)); then
        echo 0
    elif ((new == 1)); then
        for ((k = 1; k <= prev; k++)); do echo "$k"; done
    else
        for ((k = new + 1; k <= prev; k++)); do echo "$k"; done
    fi
}

# When the shard count changed since the last start, the sessions of shards that no longer exist
# would keep receiving their share of the stream (mosquitto queues to an offline shared
# subscriber) and lose it when they expire: drain and end each of them with `--retire`, after
# the new layout is running. The old count is kept in .state/ingest-shards.
retire_old_shards() {
    local prev_file=$STATE/ingest-shards prev k
    prev=$(cat "$prev_file" 2>/dev/null || true)
    if [[ -n $prev && $prev != "$INGEST_SHARDS" ]]; then
        for k in $(retire_targets "$prev" "$INGEST_SHARDS"); do
            say "ingest: retiring the session of shard $k of $prev (drain, then end it)"
            env "SDS_INGEST_SHARDS=$prev" "SDS_INGEST_SHARD=$k" timeout 600 \
                "$VENV/bin/python" -m ingest --retire >>"$LOGS/ingest-retire.log" 2>&1 \
                || die "retiring shard $k failed (see $LOGS/ingest-retire.log); rerun to retry"
        done
    fi
    echo "$INGEST_SHARDS" >"$prev_file"
}

# The command line of each background process, into ARGV. They run from the repo root.
proc_argv() {
    case $1 in
    # A standby serves its metrics 50 ports above its shard's (both may run at once).
    ingest) ARGV=(env SDS_INGEST_SHARDS=1 SDS_INGEST_SHARD=0 "$VENV/bin/python" -m ingest) ;;
    ingest-standby) ARGV=(env SDS_INGEST_SHARDS=1 SDS_INGEST_SHARD=0
        "SDS_METRICS_PORT=$(standby_metrics_port)" "$VENV/bin/python" -m ingest) ;;
    ingest-*-standby) local k=${1#ingest-}
        ARGV=(env "SDS_INGEST_SHARDS=$INGEST_SHARDS" "SDS_INGEST_SHARD=${k%-standby}"
            "SDS_METRICS_PORT=$(standby_metrics_port)" "$VENV/bin/python" -m ingest) ;;
    ingest-*) ARGV=(env "SDS_INGEST_SHARDS=$INGEST_SHARDS" "SDS_INGEST_SHARD=${1#ingest-}"
        "$VENV/bin/python" -m ingest) ;;
    aggregate) ARGV=("$VENV/bin/python" -m aggregate) ;;
    alerts-evaluate) ARGV=("$VENV/bin/python" -m alerts.evaluator) ;;
    # The alert deliverer (docs/alerts.md): webhooks, email, the MQTT alerts topic.
    alerts-deliver) ARGV=("$VENV/bin/python" -m alerts.delivery) ;;
    # env execs gunicorn, so the pid is gunicorn's master. Behind the edge, the API trusts one
    # proxy hop of X-Forwarded-For for the client address (login throttling, rate limits).
    serve-*) ARGV=(env "SDS_HTTP_BIND=$API_HOST:$((API_PORT0 + ${1#serve-} - 1))"
        "SDS_TRUSTED_PROXY_HOPS=${SDS_TRUSTED_PROXY_HOPS:-1}"
        "SDS_API_METRICS_PORT=$(metrics_port_of "$1")"
        "PROMETHEUS_MULTIPROC_DIR=$STATE/api-metrics/$1"
        "SDS_BROKER_PASSWD_FILE=${SDS_BROKER_PASSWD_FILE-$(api_passwd_file)}"
        "$VENV/bin/gunicorn" -c deploy/gunicorn.conf.py serve.wsgi:app) ;;
    edge) ARGV=(nginx -c "$EDGE_CONF" -e "$EDGE_DIR/error.log") ;;
    # The demo devices only (demo-devices.json has their passwords; devices added later are
    # skipped), and never a failure a supervisor would restart in a loop.
    simulate) ARGV=("$VENV/bin/sds" simulate --credentials "$DEMO_DEVICES" --backfill-days 3
        --keep-running) ;;
    logrotate) ARGV=(bash deploy/logrotate/rotate-loop.sh "$STATE") ;;
    node-exporter | alertmanager | prometheus) monitoring_argv "$1" ;;
    esac
}

# What a live process's command line contains (besides its pid file): guards against a pid
# recycled after a reboot being mistaken for ours.
proc_marker() {
    case $1 in
    edge) echo "$EDGE_CONF" ;;
    logrotate) echo deploy/logrotate/rotate-loop.sh ;;
    node-exporter | alertmanager | prometheus) monitoring_marker "$1" ;;
    *) echo "$VENV/bin/" ;;
    esac
}

# Pid files hold the process's own pid; liveness also checks the command line (proc_marker).
proc_alive() { pid_alive "$PIDS/$1.pid" "$(proc_marker "$1")"; }

start_proc() {
    local name=$1 log=$LOGS/$1.log
    if proc_alive "$name"; then
        say "$name: already running (pid $(pid_in "$PIDS/$name.pid"))"
        return
    fi
    proc_argv "$name"
    # Under its supervisor (deploy/lib/supervise.py), which restarts it when it dies. It stops
    # the process within STOP_WAIT - 5 s of a stop signal, before stop_one's own SIGKILL.
    local as=()
    case $name in node-exporter | alertmanager | prometheus) as=(--user prometheus) ;; esac
    supervise_start "$name" "$log" "${as[@]}" --stop-timeout $((STOP_WAIT - 5)) -- "${ARGV[@]}"
    say "$name: started under supervision (pid $(pid_in "$PIDS/$name.pid"), log $log)"
}
# How long stop waits for each process (gunicorn's graceful_timeout is 20 s).
STOP_WAIT=30

# Running, and not in a restart's backoff (an unsupervised process of an older version: alive).
proc_up() {
    proc_alive "$1" || return 1
    local st
    st=$(supervised_status "$1")
    [[ -z $st || $st == running$'\t'* ]]
}

# Up for SETTLE seconds since its supervisor last started it (the status file is rewritten at
# each start and death, so its age is the running child's).
SETTLE=2
settled() {
    proc_up "$1" || return 1
    if [[ -z $(supervised_status "$1") ]]; then
        # Not written yet by a supervisor started now; none at all: an older, unsupervised one.
        [[ -z ${SUP_BASE[$1]+set} ]]
        return
    fi
    (($(date +%s) - $(stat -c %Y "$SUPERVISE/$1.status") >= SETTLE))
}

# wait_settled NAME...: wait through their supervisors' restarts (START_DEATHS deaths each at
# most) until every one has settled, reporting each death as it happens, for at most START_WAIT
# seconds; the others in UNSETTLED.
START_WAIT=60
wait_settled() {
    local deadline=$((SECONDS + START_WAIT)) name waiting
    local -A gave_up=()
    while :; do
        UNSETTLED=() waiting=0
        for name in "$@"; do
            if [[ -z ${gave_up[$name]:-} ]] && ! supervised_note_deaths "$name" "$LOGS/$name.log"; then
                gave_up[$name]=1
            fi
            if ! settled "$name"; then
                UNSETTLED+=("$name")
                [[ -n ${gave_up[$name]:-} ]] || waiting=1
            fi
        done
        ((${#UNSETTLED[@]})) || return 0
        ((waiting && SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# answering URL...: wait until every URL answers HTTP 200 (for at most START_WAIT seconds);
# prints the ones that never did. A settled process is not yet a serving one: the edge answered
# 502 for about a second after run.sh returned, so the "Try:" commands below failed if pasted
# at once.
answering() {
    "$VENV/bin/python" - "$START_WAIT" "$@" <<'PY'
import sys
import time
import urllib.request

deadline = time.monotonic() + float(sys.argv[1])
waiting = sys.argv[2:]
while waiting and time.monotonic() < deadline:
    for url in list(waiting):
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (loopback)
                if resp.status == 200:
                    waiting.remove(url)
        except OSError:  # refused, or an HTTP error such as the edge's 502
            pass
    if waiting:
        time.sleep(0.2)
if waiting:
    print(*waiting, sep="\n")
sys.exit(1 if waiting else 0)
PY
}

# API instances that have a pid file, in order (those of an earlier, larger SDS_API_INSTANCES too).
serve_pidfiles() {
    local f
    for f in "$PIDS"/serve-*.pid; do
        [[ -e $f ]] && basename "$f" .pid
    done | sort -t- -k2 -n
}

# Every process at once, each with its own timeout, SIGKILL fallback and "NAME: stopped" line,
# in the order the data needs (docs/operations.md "Stopping"): the API instances only once the
# edge has drained (it passes the requests in flight on to them), the ingesters only once the
# simulator has stopped publishing, and all of them before services.sh stops the broker (the
# ingesters finish and acknowledge what they took from it) and PostgreSQL. The scheduler, the
# alerts processes, logrotate and the monitoring processes depend on nothing that stops here.
stop_all() {
    local name
    (
        # The edge first, with SIGQUIT: it stops accepting and finishes the requests in flight.
        if stop_pidfile "$PIDS/edge.pid" "$EDGE_CONF" $STOP_WAIT QUIT; then
            say "edge: stopped (drained)"
        else
            say "edge: not running"
        fi
        # gunicorn's SIGTERM is graceful too: workers finish their request (up to 20 s).
        # "serve" is the single instance of versions before the edge.
        for name in $(serve_pidfiles) serve; do
            [[ $name == serve && ! -e $PIDS/serve.pid ]] && continue
            stop_one "$name" &
        done
        wait
    ) &
    (
        stop_one simulate
        for name in $(ingest_pidfiles); do stop_one "$name" & done
        wait
    ) &
    for name in "${MON_PROCS[@]}"; do
        if [[ -e $PIDS/$name.pid ]]; then stop_one "$name" & fi
    done
    for name in aggregate alerts-evaluate alerts-deliver logrotate; do stop_one "$name" & done
    wait
    bash "$REPO/deploy/services.sh" stop
}

stop_one() {
    if stop_pidfile "$PIDS/$1.pid" "$(proc_marker "$1")" $STOP_WAIT; then
        say "$1: stopped"
    else
        say "$1: not running"
    fi
}

# Each process's line: its supervisor's state (running, or restarting after a death), the
# child's pid, its restarts and last exit (docs/operations.md "Supervision").
status_all() {
    local name rc=0 st
    for name in "${PROCS[@]}"; do
        if proc_alive "$name"; then
            st=$(supervised_status "$name")
            if [[ -z $st ]]; then
                say "$name: running (pid $(pid_in "$PIDS/$name.pid"), not supervised: started by an older run.sh; run.sh stop && run.sh)"
            else
                say "$name: ${st%%$'\t'*} (supervisor pid $(pid_in "$PIDS/$name.pid"), ${st#*$'\t'}; log $LOGS/$name.log)"
                [[ $st == running$'\t'* ]] || rc=3
            fi
        else
            say "$name: stopped"
            rc=3
        fi
    done
    bash "$REPO/deploy/services.sh" status || rc=3
    # The cold tier: files, bytes, rows, the oldest hot day, the last mover run; exit 3 names a
    # problem (a stuck file, a failing mover).
    if [[ -f $SECRETS && -x $VENV/bin/sds ]]; then
        say "cold tier (sds cold status):"
        # Its settings and relative SDS_COLD_PATH as the processes have them (run from $REPO).
        # shellcheck source=/dev/null
        (cd "$REPO" && set -a && . "$SECRETS" && set +a && "$VENV/bin/sds" cold status) 2>&1 \
            | sed 's/^/  /'
        ((PIPESTATUS[0] == 0)) || rc=3
    fi
    return $rc
}

# Where the processes reach PostgreSQL, for the banner: the address(es) of SDS_DATABASE_URL
# (services.sh wrote it for the ports the servers run on), the Patroni profile's through HAProxy.
db_line() {
    local hosts=${SDS_DATABASE_URL:-}
    hosts=${hosts#*@}
    hosts=${hosts%%/*}
    if [[ $(cat "$STATE/db-profile" 2>/dev/null) == patroni ]]; then
        echo "Patroni leader via $hosts (deploy/services.sh status lists the nodes)"
    else
        echo "$hosts"
    fi
}

# db_files postgres.log|pgbackrest: where the database's log and backup configuration are.
db_files() {
    if [[ $(cat "$STATE/db-profile" 2>/dev/null) != patroni ]]; then
        [[ $1 == pgbackrest ]] && echo "$STATE/pgbackrest" || echo "$STATE/pg/postgres.log"
    else
        [[ $1 == pgbackrest ]] && echo "$STATE/patroni/pgbackrest" || echo "$LOGS/patroni-*.log"
    fi
}

# First demo device name and the API key, for the example commands. The demo prints
# "api key: <key>"; demo-devices.json maps device name -> MQTT password.
demo_key() { sed -n 's/^api key: *\([^ ]*\).*/\1/p' "$DEMO_OUT" 2>/dev/null | head -n 1; }
demo_device() {
    "$VENV/bin/python" -c 'import json, sys; print(next(iter(json.load(open(sys.argv[1])))))' \
        "$DEMO_DEVICES" 2>/dev/null || echo "A000101"
}

# Render the edge's config from deploy/nginx/nginx.conf into $EDGE_CONF; EDGE_CHANGED is set
# when the file changed. The workers (www-data) write request bodies and large answers to tmp/.
edge_config() {
    local upstreams=() k
    for ((k = 1; k <= API_INSTANCES; k++)); do upstreams+=("$API_HOST:$((API_PORT0 + k - 1))"); done
    mkdir -p "$EDGE_DIR/tmp"
    local conf
    # The server lines' options have one home: deploy/lib/edge_conf.py (also the tests' edge).
    conf=$(python3 "$REPO/deploy/lib/edge_conf.py" "$EDGE_DIR" "$EDGE_BIND" "${upstreams[@]}") \
        || die "could not render the edge's config from deploy/nginx/nginx.conf"
    EDGE_CHANGED=$(printf '%s\n' "$conf" | write_if_changed "$EDGE_CONF" 644)
    ensure_traversable www-data "$EDGE_DIR/tmp"
    nginx -t -q -c "$EDGE_CONF" -e "$EDGE_DIR/error.log" 2>>"$LOGS/edge.log" \
        || { log_tail "$LOGS/edge.log"; die "the edge's config $EDGE_CONF does not pass nginx -t"; }
}

# A running edge rereads a changed config on SIGHUP: new workers take new connections, the old
# ones finish theirs. Nothing is dropped.
edge_reload_if_changed() {
    if [[ -n $EDGE_CHANGED ]] && proc_alive edge; then
        kill -HUP "$(pid_in "$PIDS/edge.pid")"
        say "edge: config changed, reloaded (SIGHUP)"
    fi
}

start_all() {
    need_root
    bash "$REPO/deploy/setup.sh"
    bash "$REPO/deploy/services.sh" start
    mkdir -p "$LOGS" "$PIDS"
    cd "$REPO"
    set -a
    # shellcheck source=/dev/null
    . "$SECRETS"
    set +a

    [[ -x $VENV/bin/sds ]] || die "$VENV/bin/sds is missing: the project is not installed in the venv (see $LOGS/pip-install.log)"
    "$VENV/bin/sds" --help >/dev/null 2>"$LOGS/sds-check.log" \
        || { log_tail "$LOGS/sds-check.log"; die "the sds command does not run (admin/cli.py broken or missing?)"; }

    say "sds db upgrade"
    "$VENV/bin/sds" db upgrade || die "sds db upgrade failed"

    local broker accounts=(--mqtt-passwd-file "$MQ_PASSWD") broker_logs
    broker=$(cat "$STATE/broker-profile" 2>/dev/null || echo mosquitto)
    broker_logs=$STATE/mosquitto/mosquitto.log
    if [[ $broker == rabbitmq-cluster ]]; then
        accounts=(--rabbitmq-definitions "$RMQ_DEFS")
        broker_logs="$STATE/rabbitmq/node*/log/"
    fi
    if [[ ! -f $DEMO_STAMP ]]; then
        [[ $DEMO_HISTORY_DAYS =~ ^[0-9]+$ ]] \
            || die "SDS_DEMO_HISTORY_DAYS must be a number of days, not '$DEMO_HISTORY_DAYS'"
        say "creating the demo organisation, devices, API key and $DEMO_HISTORY_DAYS days of history (first run only)"
        # 500 days by default: older than the default SDS_HOT_DAYS (430), so the scheduler's
        # mover puts the oldest months in the cold tier at once (docs/operations.md "Cold tier").
        (umask 077 && "$VENV/bin/sds" demo --credentials-out "$DEMO_DEVICES" \
            --history-days "$DEMO_HISTORY_DAYS" \
            "${accounts[@]}" >"$DEMO_OUT") || die "sds demo failed"
        touch "$DEMO_STAMP"
        cat "$DEMO_OUT"
        # The demo added the devices' passwords to the broker's password file.
        bash "$REPO/deploy/services.sh" reload-broker
    fi
    # The recovery kit (secrets, broker accounts, stamps, settings) sealed into the database,
    # so that its backups carry it (shared/recovery.py; the account commands save it too).
    "$VENV/bin/sds" recovery save >/dev/null || warn "the recovery kit was not saved (sds recovery save)"

    api_layout
    # Before the edge, one gunicorn ("serve") held the edge's port: replace it.
    if proc_alive serve; then
        stop_one serve
    fi
    edge_config
    if monitoring_on; then monitoring_config; fi
    local name
    # A changed shard count: the old layout's ingesters stop before the new one starts.
    if [[ -f $STATE/ingest-shards && $(<"$STATE/ingest-shards") != "$INGEST_SHARDS" ]]; then
        for name in $(ingest_pidfiles); do stop_one "$name"; done
    fi
    for name in "${PROCS[@]}"; do
        [[ $name == edge ]] && edge_reload_if_changed
        start_proc "$name"
    done
    retire_old_shards
    # Instances beyond a lowered SDS_API_INSTANCES: the reloaded edge no longer sends them
    # requests; stop them gracefully now.
    for name in $(serve_pidfiles); do
        if ((${name#serve-} > API_INSTANCES)); then stop_one "$name"; fi
    done
    # A process that dies at once (bad config, import error) should be reported now, not found
    # later in a log; one that comes up on a retry (a port held for a moment) is no failure.
    local failed=0
    if ! wait_settled "${PROCS[@]}"; then
        for name in "${UNSETTLED[@]}"; do
            warn "$name did not stay up within $START_WAIT s of its start (its supervisor retries with backoff)"
            log_tail "$LOGS/$name.log" 20
        done
        failed=1
    fi
    # Each API instance, then the edge in front of them, answers before "running" is printed.
    local -a urls=()
    local k silent
    for ((k = 1; k <= API_INSTANCES; k++)); do
        urls+=("http://$API_HOST:$((API_PORT0 + k - 1))/api/v2/")
    done
    urls+=("http://$EDGE_BIND/api/v2/")
    if ! silent=$(answering "${urls[@]}"); then
        warn "not answering within $START_WAIT s: ${silent//$'\n'/ } (see $LOGS/serve-*.log, $EDGE_DIR/error.log)"
        failed=1
    fi

    local key device bind
    key=$(demo_key)
    device=$(demo_device)
    bind=$EDGE_BIND
    local headline="Sensor data service is running."
    ((failed == 0)) || headline="Sensor data service started, but some processes exited (see above)."
    cat <<EOF

$headline
  API           http://$bind/api/v2/   (docs: /api/v2/doc; nginx edge in front of $API_INSTANCES API instance(s) from $API_HOST:$API_PORT0)
  dashboard     http://$bind/   (sign in with the demo user's email and password in $DEMO_OUT)
  PostgreSQL    $(db_line), database sds   (superuser shell: deploy/services.sh psql)
  MQTT broker   127.0.0.1:$SDS_MQTT_PORT   ($broker${SDS_MQTT_FAILOVER:+; other nodes $SDS_MQTT_FAILOVER})
  secrets       $SECRETS
  demo login    $DEMO_OUT
  logs          $LOGS/{ingest*,aggregate,alerts-evaluate,alerts-deliver,serve-*,simulate,access}.log, $EDGE_DIR/{access,error}.log, $(db_files postgres.log), $broker_logs
  supervision   every process is restarted when it dies: $SUPERVISE/supervise.log, $SUPERVISE/*.prom
  backups       pgBackRest into $(db_files pgbackrest) (the scheduler takes the first full backup now); sds backup status
  cold tier     readings older than SDS_HOT_DAYS (${SDS_HOT_DAYS:-430} days) as Parquet in ${SDS_COLD_PATH:-$REPO/.state/cold}; sds cold status
  monitoring    $(monitoring_on && echo "Prometheus http://$MBIND:$PROM_PORT/alerts, Alertmanager http://$MBIND:$AM_PORT (alerts to ${SDS_ALERT_WEBHOOK_URL:-$DEFAULT_ALERT_WEBHOOK_URL}); off: deploy/run.sh monitor off" || echo "off (deploy/run.sh monitor: Prometheus, Alertmanager, node_exporter)")
  pids          $PIDS
  stop          deploy/run.sh stop        status: deploy/run.sh status

Try:
  KEY=${key:-"<the api key in $DEMO_OUT>"}
  curl -s -H "Authorization: Apikey \$KEY" http://$bind/api/v2/schemas
  curl -s -H "Authorization: Apikey \$KEY" "http://$bind/api/v2/devices?limit=10"
  curl -s -H "Authorization: Apikey \$KEY" "http://$bind/api/v2/data/calibrated?device=$device&order=desc&limit=3"
  curl -s -H "Authorization: Apikey \$KEY" -H "Accept: text/csv" "http://$bind/api/v2/data/hourly?device=$device&order=desc&limit=5"
EOF
    ((failed == 0)) || die "some processes did not stay up; see the logs above"
}

# The operator's SDS_* settings of the recovery kit (.state/settings.env), exported where the
# environment does not set them.
recovered_settings() {
    local line key
    [[ -f $STATE/settings.env ]] || return 0
    while IFS= read -r line; do
        [[ $line == SDS_*=* ]] || continue
        key=${line%%=*}
        [[ -n ${!key+x} ]] || export "${line?}"
    done <"$STATE/settings.env"
    return 0
}

# Sourced (by the tests of its functions), it only defines them.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case ${1:-start} in
start) start_all ;;
recover)
    # Whole machine lost (docs/operations.md): a fresh .state from the repository, then a start
    # with the operator's settings saved in the kit wherever the environment does not set them.
    need_root
    bash "$REPO/deploy/setup.sh"
    bash "$REPO/deploy/services.sh" recover
    recovered_settings
    start_all
    ;;
stop) need_root; stop_all ;;
status) need_root; api_layout; status_all ;;
monitor)
    need_root
    if [[ ${2:-on} == off ]]; then
        for name in "${MON_PROCS[@]}"; do stop_one "$name" & done
        wait
        rm -f "$MON_STAMP"
        say "monitoring off (its data stays in $STATE/prometheus/data)"
    else
        mkdir -p "$STATE"
        touch "$MON_STAMP"
        start_all
    fi
    ;;
*)
    echo "usage: $0 [start|recover|stop|status|monitor [off]]" >&2
    exit 2
    ;;
esac
