#!/usr/bin/env bash
# deploy/run.sh [start|stop|status]: README command 1, install and run the whole service locally.
#   start (default)  setup.sh, services.sh start, `sds db upgrade`, the demo data (first run only),
#                    then the ingester, the scheduler, the API (gunicorn) and the device simulator
#                    in the background. Anything already running is left alone, so a rerun
#                    changes nothing and takes seconds.
#   stop             stops the four processes, then PostgreSQL and mosquitto
#   status           what is running
# Run as root. State, logs and pids live under <repo>/.state (docs/operations.md).
set -euo pipefail

SDS_SCRIPT=run.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

SECRETS=$STATE/secrets.env
DEMO_STAMP=$STATE/demo.done
DEMO_OUT=$STATE/demo-credentials.txt
DEMO_DEVICES=$STATE/demo-devices.json
MQ_PASSWD=$STATE/mosquitto/passwd
PROCS=(ingest aggregate serve simulate)

# The command line of each background process, into ARGV. They run from the repo root.
proc_argv() {
    case $1 in
    ingest) ARGV=("$VENV/bin/python" -m ingest) ;;
    aggregate) ARGV=("$VENV/bin/python" -m aggregate) ;;
    serve) ARGV=("$VENV/bin/gunicorn" -c deploy/gunicorn.conf.py serve.wsgi:app) ;;
    simulate) ARGV=("$VENV/bin/sds" simulate --credentials "$DEMO_DEVICES" --backfill-days 3) ;;
    esac
}

# Pid files hold the process's own pid; liveness also checks the command line mentions our venv,
# so a pid recycled after a reboot is not mistaken for ours.
proc_alive() { pid_alive "$PIDS/$1.pid" "$VENV/bin/"; }

STARTED=0
start_proc() {
    local name=$1 log=$LOGS/$1.log
    if proc_alive "$name"; then
        say "$name: already running (pid $(<"$PIDS/$name.pid"))"
        return
    fi
    proc_argv "$name"
    # setsid: its own session, so closing this terminal or a Ctrl-C here does not reach it.
    # (In a script, a background child is never a process-group leader, so setsid does not fork
    # and $! is the process itself.)
    setsid "${ARGV[@]}" >>"$log" 2>&1 </dev/null &
    echo $! >"$PIDS/$name.pid"
    STARTED=$((STARTED + 1))
    say "$name: started (pid $!, log $log)"
}

stop_all() {
    local name
    # Producers first, so the ingester can drain what is already queued before it stops.
    for name in simulate serve ingest aggregate; do
        if stop_pidfile "$PIDS/$name.pid" "$VENV/bin/" 20; then
            say "$name: stopped"
        else
            say "$name: not running"
        fi
    done
    bash "$REPO/deploy/services.sh" stop
}

status_all() {
    local name rc=0
    for name in "${PROCS[@]}"; do
        if proc_alive "$name"; then
            say "$name: running (pid $(<"$PIDS/$name.pid"), log $LOGS/$name.log)"
        else
            say "$name: stopped"
            rc=3
        fi
    done
    bash "$REPO/deploy/services.sh" status || rc=3
    return $rc
}

# First demo device name and the API key, for the example commands. The demo prints
# "api key: <key>"; demo-devices.json maps device name -> MQTT password.
demo_key() { sed -n 's/^api key: *\([^ ]*\).*/\1/p' "$DEMO_OUT" 2>/dev/null | head -n 1; }
demo_device() {
    "$VENV/bin/python" -c 'import json, sys; print(next(iter(json.load(open(sys.argv[1])))))' \
        "$DEMO_DEVICES" 2>/dev/null || echo "A000101"
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
        || { log_tail "$LOGS/sds-check.log"; die "the sds command does not run (shared/cli.py broken or missing?)"; }

    say "sds db upgrade"
    "$VENV/bin/sds" db upgrade || die "sds db upgrade failed"

    if [[ ! -f $DEMO_STAMP ]]; then
        say "creating the demo organisation, devices and API key (first run only)"
        (umask 077 && "$VENV/bin/sds" demo --credentials-out "$DEMO_DEVICES" \
            --mqtt-passwd-file "$MQ_PASSWD" >"$DEMO_OUT") || die "sds demo failed"
        touch "$DEMO_STAMP"
        cat "$DEMO_OUT"
        # The demo added the devices' passwords to the broker's password file.
        bash "$REPO/deploy/services.sh" reload-broker
    fi

    local name
    for name in "${PROCS[@]}"; do
        start_proc "$name"
    done
    # A process that dies at once (bad config, import error) should be reported now, not found
    # later in a log.
    ((STARTED == 0)) || sleep 2
    local failed=0
    for name in "${PROCS[@]}"; do
        if ! proc_alive "$name"; then
            warn "$name exited right after start"
            log_tail "$LOGS/$name.log" 20
            failed=1
        fi
    done

    local key device bind
    key=$(demo_key)
    device=$(demo_device)
    bind=${SDS_HTTP_BIND:-127.0.0.1:8080}
    local headline="Sensor data service is running."
    ((failed == 0)) || headline="Sensor data service started, but some processes exited (see above)."
    cat <<EOF

$headline
  API           http://$bind/api/v2/   (docs: /api/v2/doc)
  PostgreSQL    127.0.0.1:${SDS_PG_PORT:-55432}, database sds   (superuser shell: deploy/services.sh psql)
  MQTT broker   127.0.0.1:$SDS_MQTT_PORT
  secrets       $SECRETS
  demo login    $DEMO_OUT
  logs          $LOGS/{ingest,aggregate,serve,simulate,access}.log, $STATE/pg/postgres.log, $STATE/mosquitto/mosquitto.log
  pids          $PIDS
  stop          deploy/run.sh stop        status: deploy/run.sh status

Try:
  KEY=${key:-"<the api key in $DEMO_OUT>"}
  curl -s -H "Authorization: Apikey \$KEY" http://$bind/api/v2/schemas
  curl -s -H "Authorization: Apikey \$KEY" "http://$bind/api/v2/devices?limit=10"
  curl -s -H "Authorization: Apikey \$KEY" "http://$bind/api/v2/data/calibrated?device=$device&limit=3"
  curl -s -H "Authorization: Apikey \$KEY" -H "Accept: text/csv" "http://$bind/api/v2/data/hourly?device=$device&limit=5"
EOF
    ((failed == 0)) || die "some processes did not stay up; see the logs above"
}

case ${1:-start} in
start) start_all ;;
stop) need_root; stop_all ;;
status) need_root; status_all ;;
*)
    echo "usage: $0 [start|stop|status]" >&2
    exit 2
    ;;
esac
