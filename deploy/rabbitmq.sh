#!/usr/bin/env bash
# deploy/rabbitmq.sh {start|stop|status|reload|cli}: the RabbitMQ cluster profile's broker
# (SDS_BROKER=rabbitmq-cluster, docs/operations.md): SDS_RABBITMQ_NODES (default 3) RabbitMQ nodes
# on this machine, clustered, with the MQTT plugin keeping the ingester's session in a
# Raft-replicated quorum queue. Called by deploy/services.sh; run as root.
#   start   write each node's files, start the nodes that are not running (one after the other),
#           import the accounts (.state/rabbitmq/definitions.json), write the SDS_MQTT_* lines
#   stop    stop every node (SIGTERM: a clean stop), then the cluster's own epmd
#   status  which nodes run; exit 0 when all do, 3 otherwise
#   reload  import the accounts file again (after `sds device register --rabbitmq-definitions`)
#   cli TOOL ARGS   run rabbitmqctl / rabbitmq-queues / rabbitmq-diagnostics against the cluster
# Everything lives under .state/rabbitmq: node names sds-<i>@localhost, ports from
# SDS_RABBITMQ_PORT_BASE (default 21800, deploy/lib/ports.sh; node i: AMQP +10i+2, MQTT +10i+3,
# distribution +10i+5; epmd +69; the CLI tools +70..+80), its own Erlang cookie. Nothing of the Debian package's node (rabbit@<host>, 5672,
# 1883, 25672, /var/lib/rabbitmq) is used or touched.
set -euo pipefail

SDS_SCRIPT=rabbitmq.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_root

RMQ_DIR=$STATE/rabbitmq
# Node count and port base are remembered from the last start that set them.
NODES=${SDS_RABBITMQ_NODES:-$(cat "$RMQ_DIR/nodes" 2>/dev/null || echo 3)}
BASE=${SDS_RABBITMQ_PORT_BASE:-$(cat "$RMQ_DIR/port-base" 2>/dev/null || echo "$DEFAULT_RABBITMQ_PORT_BASE")}
RMQ_HOME=$RMQ_DIR/home
DEFS=$RMQ_DIR/definitions.json
RABBIT_BIN=/usr/lib/rabbitmq/bin
SECRETS=$STATE/secrets.env
[[ $NODES =~ ^[1-9][0-9]?$ ]] || die "SDS_RABBITMQ_NODES must be a number of nodes (got '$NODES')"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
mqtt_port() { echo $((BASE + 10 * $1 + 3)); }
node_pidfile() { echo "$RMQ_DIR/node$1/beam.pid"; }
# The VM's pid file is written by RabbitMQ itself; its command line names the node's config.
node_running() { pid_alive "$(node_pidfile "$1")" "beam"; }
node_log() { echo "$RMQ_DIR/node$1/log/sds-$1@localhost.log"; }
# Whether node I logged its boot banner (its Raft systems are up) past byte OFFSET of its log.
booted_since() { tail -c +$(($2 + 1)) "$(node_log "$1")" 2>/dev/null | grep -q ' Starting RabbitMQ '; }

# node I's environment (KEY=VALUE lines from admin/rabbit.py, which also writes its files) into
# NODE_ENV, with the cluster's HOME (its Erlang cookie) and a plain PATH. Asked once per node and
# run: each answer starts Python (about 1 s of CPU), and every CLI call needs one (a reload makes
# about five).
declare -A NODE_ENV_OF=()
node_env() {
    [[ -n ${NODE_ENV_OF[$1]:-} ]] \
        || NODE_ENV_OF[$1]=$("$VENV/bin/sds" rabbit node "$RMQ_DIR" "$1" "$NODES" "$BASE")
    mapfile -t NODE_ENV <<<"${NODE_ENV_OF[$1]}"
    NODE_ENV+=("HOME=$RMQ_HOME" "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "LANG=C.UTF-8" "LC_ALL=C.UTF-8")
}

# A RabbitMQ CLI tool against node I, with the cluster's cookie and epmd.
cli_on() {
    local i=$1 tool=$2
    shift 2
    node_env "$i"
    (cd "$RMQ_DIR" && runuser -u rabbitmq -- env -i "${NODE_ENV[@]}" \
        "$RABBIT_BIN/$tool" -n "sds-$i@localhost" -q "$@")
}

# A RabbitMQ CLI tool (rabbitmqctl, rabbitmq-queues, rabbitmq-diagnostics...) against the first
# running node.
cli() {
    local tool=$1 i
    shift
    [[ $tool =~ ^rabbitmq(ctl|-queues|-diagnostics|-plugins|-upgrade)$ ]] || die "unknown tool '$tool'"
    for ((i = 0; i < NODES; i++)); do
        if node_running "$i"; then
            cli_on "$i" "$tool" "$@"
            return
        fi
    done
    die "no RabbitMQ node is running"
}

# A fresh node that peer discovery left on its own (it gives up after 10 x 0.5 s; seen once on
# a loaded machine) is joined to node 0's cluster by hand.
ensure_joined() {
    local i=$1 t
    for ((t = 0; t < 30; t++)); do
        if cli_on "$i" rabbitmqctl cluster_status --formatter json 2>/dev/null \
            | grep -q '"running_nodes":\[[^]]*"sds-0@localhost"'; then
            return
        fi
        sleep 1
    done
    warn "node sds-$i@localhost did not join the cluster by itself; joining it to sds-0@localhost"
    cli_on "$i" rabbitmqctl stop_app
    cli_on "$i" rabbitmqctl reset
    cli_on "$i" rabbitmqctl join_cluster sds-0@localhost
    cli_on "$i" rabbitmqctl start_app
}
ctl() { cli rabbitmqctl "$@"; }

prepare() {
    mkdir -p "$RMQ_HOME" "$LOGS"
    if [[ ! -s $RMQ_HOME/.erlang.cookie ]]; then
        # The cluster's own cookie: whoever reads it controls every node.
        (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(20), end="")' >"$RMQ_HOME/.erlang.cookie")
        say "rabbitmq: generated the cluster's Erlang cookie"
    fi
    cd "$REPO"
    # The ingester's account (password from secrets.env) and the vhost, kept with the devices';
    # demo devices made under the mosquitto profile are added from their credentials file.
    (set -a && . "$SECRETS" && set +a \
        && "$VENV/bin/sds" rabbit accounts "$DEFS" "${SDS_MQTT_CLIENT_ID:-ingester}" \
            "${SDS_TOPIC_PREFIX:-sensors}" "$STATE/demo-devices.json")
    chmod 600 "$DEFS"
    local i
    for ((i = 0; i < NODES; i++)); do node_env "$i"; done
    chown -R rabbitmq:rabbitmq "$RMQ_DIR"
    chmod 700 "$RMQ_DIR"
    chmod 400 "$RMQ_HOME/.erlang.cookie"
    ensure_traversable rabbitmq "$RMQ_DIR"
}

start_node() {
    local i=$1 port log
    port=$(mqtt_port "$i")
    log=$RMQ_DIR/node$i/stdout.log
    if node_running "$i"; then
        say "rabbitmq: node sds-$i@localhost already running (MQTT 127.0.0.1:$port)"
        return
    fi
    port_open "$port" && die "port $port is taken by another process; set SDS_RABBITMQ_PORT_BASE"
    local fresh=""
    [[ -n $(ls -A "$RMQ_DIR/node$i/mnesia" 2>/dev/null) ]] || fresh=1
    node_env "$i"
    rm -f "$(node_pidfile "$i")"
    local logsize
    logsize=$(stat -c %s "$(node_log "$i")" 2>/dev/null || echo 0)
    say "rabbitmq: starting node sds-$i@localhost (MQTT 127.0.0.1:$port)"
    # exec: no shell stays behind holding our caller's stdout; setsid: a Ctrl-C here does not
    # reach the node.
    (cd "$RMQ_DIR/node$i" && exec setsid runuser -u rabbitmq -- env -i "${NODE_ENV[@]}" \
        "$RABBIT_BIN/rabbitmq-server") >>"$log" 2>&1 </dev/null &
    # One at a time: 3.10 refuses a node's join to its MQTT client-id tracker while that Raft
    # cluster's leader is fresh, and does not retry (tests/support/rabbit.py).
    local t tries=0 rejoined=$fresh
    for ((t = 0; t < 1200; t++)); do
        if port_open "$port" && node_running "$i"; then
            if [[ -n $fresh ]] && ((i > 0)); then ensure_joined "$i"; fi
            return
        fi
        if [[ -z $rejoined ]] && booted_since "$i" "$logsize"; then
            # A node with data: start its member of the client-id tracker now. The plugin asks
            # its peers about the tracker first (100 s timeout); after a majority was lost the
            # tracker has no leader until this member votes, so the node stayed 100 s without
            # MQTT (docs/operations.md, "Two of three nodes must be up").
            if cli_on "$i" rabbitmqctl eval "$(<"$REPO/deploy/rabbitmq/mqtt-rejoin.erl")" >/dev/null 2>&1; then
                rejoined=1
            elif ((++tries == 5)); then
                warn "node sds-$i@localhost: could not start its client-id tracker member early; the MQTT plugin will (up to 100 s)"
                rejoined=1
            fi
        fi
        sleep 0.1
    done
    log_tail "$log"
    log_tail "$RMQ_DIR/node$i/log/sds-$i@localhost.log"
    die "node sds-$i@localhost did not open its MQTT port within 120 s"
}

# SDS_MQTT_* lines in secrets.env: the ingester and simulator speak MQTT 3.1.1 to node 0 and fail
# over to the others.
write_client_settings() {
    local i failover=""
    for ((i = 1; i < NODES; i++)); do failover+="${failover:+,}127.0.0.1:$(mqtt_port "$i")"; done
    local tmp
    tmp=$(grep -v -E '^SDS_MQTT_(PORT|PROTOCOL|FAILOVER)=' "$SECRETS")
    {
        printf '%s\n' "$tmp"
        printf 'SDS_MQTT_PORT=%s\nSDS_MQTT_PROTOCOL=3.1.1\nSDS_MQTT_FAILOVER=%s\n' "$(mqtt_port 0)" "$failover"
    } | write_if_changed "$SECRETS" 600 >/dev/null
}

cmd_start() {
    [[ -x $RABBIT_BIN/rabbitmq-server ]] || die "rabbitmq-server is missing: run deploy/setup.sh first"
    prepare
    warn_ephemeral "$BASE" "the RabbitMQ cluster (from $BASE to $((BASE + RABBITMQ_PORT_SPAN)))" SDS_RABBITMQ_PORT_BASE
    echo "$NODES" >"$RMQ_DIR/nodes"
    echo "$BASE" >"$RMQ_DIR/port-base"
    local i
    for ((i = 0; i < NODES; i++)); do start_node "$i"; done
    cmd_reload
    write_client_settings
}

# End the open MQTT connections of the given users (rotated or removed devices; admin/rabbit.py
# close_connections_expr says why it takes an eval).
close_mqtt_connections() {
    local conns expr
    conns=$(mktemp)
    ctl list_mqtt_connections -p sds user client_id --formatter json >"$conns" 2>/dev/null || echo "[]" >"$conns"
    expr=$(cd "$REPO" && "$VENV/bin/sds" rabbit close-expr "$conns" "$@")
    rm -f "$conns"
    if [[ -n $expr ]]; then
        ctl eval "$expr" >/dev/null
        say "rabbitmq: closed the MQTT connections of: $*"
    fi
}

cmd_reload() {
    chown rabbitmq:rabbitmq "$DEFS"
    # Before the import: which devices' passwords the file changes (sds device rotate-password).
    # After it their open connections are closed, so a stolen credential's connection does not
    # outlive the rotation; a retired device's are closed with its user (issue 20).
    local current
    local -a ended=()
    current=$(mktemp)
    chown rabbitmq:rabbitmq "$current"
    if ctl export_definitions "$current" >/dev/null 2>&1; then
        mapfile -t ended < <(cd "$REPO" && "$VENV/bin/sds" rabbit rotated-users "$DEFS" "$current")
    fi
    rm -f "$current"
    # Retried: right after a boot the CLI has once failed to reach a node whose MQTT port was
    # already open (seen once in tests on a loaded machine).
    local try
    for ((try = 1; ; try++)); do
        if ctl import_definitions "$DEFS" >"$LOGS/rabbitmq-import.log" 2>&1; then break; fi
        if ((try == 10)); then
            log_tail "$LOGS/rabbitmq-import.log"
            die "could not import $DEFS into the cluster"
        fi
        sleep 2
    done
    say "rabbitmq: imported the accounts in $DEFS"
    # An import only adds and updates: delete the users the file no longer has (retired devices).
    local users user
    users=$(mktemp)
    ctl list_users --formatter json >"$users"
    for user in $(cd "$REPO" && "$VENV/bin/sds" rabbit stale-users "$DEFS" "$users"); do
        ctl delete_user "$user" >/dev/null
        say "rabbitmq: deleted user $user (no longer in $DEFS)"
        ended+=("$user")  # its open connections go too
    done
    rm -f "$users"
    ((${#ended[@]} == 0)) || close_mqtt_connections "${ended[@]}"
}

cmd_stop() {
    local i pid any=0
    for ((i = NODES - 1; i >= 0; i--)); do
        if node_running "$i"; then
            any=1
            read_line pid "$(node_pidfile "$i")" || pid=gone  # RabbitMQ removes it as it stops
            say "rabbitmq: stopping node sds-$i@localhost (pid $pid)"
            stop_pidfile "$(node_pidfile "$i")" "beam" 60 || true
        fi
    done
    ((any)) || say "rabbitmq: not running"
    # epmd was started by the first node, on the cluster's own port; it outlives the nodes.
    ERL_EPMD_PORT=$((BASE + 69)) epmd -kill >/dev/null 2>&1 || true
}

cmd_status() {
    local i rc=0
    for ((i = 0; i < NODES; i++)); do
        if node_running "$i"; then
            say "rabbitmq: node sds-$i@localhost running, pid $(pid_in "$(node_pidfile "$i")"), MQTT 127.0.0.1:$(mqtt_port "$i"), log $RMQ_DIR/node$i/log"
        else
            say "rabbitmq: node sds-$i@localhost stopped"
            rc=3
        fi
    done
    return $rc
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
reload) cmd_reload ;;
cli)
    shift
    (($#)) || die "usage: $0 cli rabbitmqctl|rabbitmq-queues|rabbitmq-diagnostics ARGS..."
    cli "$@"
    ;;
*)
    echo "usage: $0 {start|stop|status|reload|cli TOOL ARGS...}" >&2
    exit 2
    ;;
esac
