# deploy/lib/monitoring.sh: the monitoring part of deploy/run.sh (sourced by it, after
# lib/common.sh): which port each process serves its metrics on, the configuration rendered for
# the running layout, and the command lines of Prometheus, Alertmanager and node_exporter.
# docs/operations.md "Monitoring and alerts".

# Monitoring (docs/operations.md "Monitoring and alerts"): on once `deploy/run.sh monitor` ran.
# Prometheus, Alertmanager and node_exporter (Debian's packages) run as user prometheus on
# SDS_METRICS_BIND, with the configuration deploy/lib/monitoring_conf.py renders into .state.
MON_STAMP=$STATE/monitoring
MON_PROCS=(node-exporter alertmanager prometheus)
monitoring_on() { [[ -f $MON_STAMP ]]; }
MBIND=${SDS_METRICS_BIND:-127.0.0.1}
PROM_PORT=${SDS_PROMETHEUS_PORT:-$DEFAULT_PROMETHEUS_PORT}
AM_PORT=${SDS_ALERTMANAGER_PORT:-$DEFAULT_ALERTMANAGER_PORT}
NODE_PORT=${SDS_NODE_EXPORTER_PORT:-$DEFAULT_NODE_EXPORTER_PORT}

# The metrics port of a process run.sh starts (0: none), as the process computes it.
metrics_port_of() {
    local base=${SDS_METRICS_PORT:-$DEFAULT_METRICS_PORT} k
    case $1 in
    ingest) echo "$base" ;;
    ingest-standby) echo "$(standby_metrics_port)" ;;
    ingest-*-standby) k=${1#ingest-}; k=${k%-standby}
        ((base == 0)) && echo 0 || echo $((base + 150 + k - 1)) ;;
    ingest-*) ((base == 0)) && echo 0 || echo $((base + 100 + ${1#ingest-} - 1)) ;;
    aggregate) echo "${SDS_AGGREGATE_METRICS_PORT:-$DEFAULT_AGGREGATE_METRICS_PORT}" ;;
    alerts-evaluate) echo "${SDS_ALERTS_METRICS_PORT:-$DEFAULT_ALERTS_METRICS_PORT}" ;;
    alerts-deliver) echo "${SDS_DELIVERY_METRICS_PORT:-$DEFAULT_DELIVERY_METRICS_PORT}" ;;
    serve-*) ((API_METRICS0 == 0)) && echo 0 || echo $((API_METRICS0 + ${1#serve-} - 1)) ;;
    esac
}

# Render the monitoring configuration for the current layout into .state/prometheus and
# .state/alertmanager; a running Prometheus or Alertmanager rereads a changed file (SIGHUP;
# target lists are reread by Prometheus itself).
monitoring_config() {
    local scrape=$MBIND args=() names=("${INGEST_PROCS[@]}" aggregate alerts-evaluate alerts-deliver) name port changed k
    [[ $scrape == 0.0.0.0 ]] && scrape=127.0.0.1
    for ((k = 1; k <= API_INSTANCES; k++)); do names+=("serve-$k"); done
    for name in "${names[@]}"; do
        port=$(metrics_port_of "$name")
        ((port)) || continue
        case $name in
        ingest*) args+=(--ingest "$name=$scrape:$port") ;;
        aggregate) args+=(--aggregate "$scrape:$port") ;;
        alerts-evaluate) args+=(--alerts "$scrape:$port") ;;
        alerts-deliver) args+=(--delivery "$scrape:$port") ;;
        serve-*) args+=(--api "$name=$scrape:$port") ;;
        esac
    done
    # The SDS_DB=patroni profile's node configurations, when it made them.
    [[ -d $STATE/patroni ]] && args+=(--patroni-dir "$STATE/patroni")
    changed=$(python3 "$REPO/deploy/lib/monitoring_conf.py" --out "$STATE" \
        --webhook "${SDS_ALERT_WEBHOOK_URL:-$DEFAULT_ALERT_WEBHOOK_URL}" \
        --prometheus "$scrape:$PROM_PORT" --alertmanager "$scrape:$AM_PORT" \
        --node "$scrape:$NODE_PORT" "${args[@]}") || die "rendering the monitoring configuration failed"
    mkdir -p "$STATE/prometheus/data" "$STATE/alertmanager/data"
    chown -R prometheus: "$STATE/prometheus/data" "$STATE/alertmanager/data"
    ensure_traversable prometheus "$STATE/prometheus/data"
    ensure_traversable prometheus "$STATE/alertmanager/data"
    ensure_traversable prometheus "$SUPERVISE"
    if [[ $changed == *prometheus.yml* || $changed == *sds.rules.yml* ]] && proc_alive prometheus; then
        kill -HUP "$(pid_in "$PIDS/prometheus.pid")"
        say "prometheus: configuration changed, reloaded (SIGHUP)"
    fi
    if [[ $changed == *alertmanager.yml* ]] && proc_alive alertmanager; then
        kill -HUP "$(pid_in "$PIDS/alertmanager.pid")"
        say "alertmanager: configuration changed, reloaded (SIGHUP)"
    fi
}

# The command line of a monitoring process, into ARGV (run.sh's proc_argv).
monitoring_argv() {
    case $1 in
    node-exporter) ARGV=(prometheus-node-exporter "--web.listen-address=$MBIND:$NODE_PORT"
        --collector.disable-defaults --collector.filesystem --collector.textfile
        "--collector.textfile.directory=$SUPERVISE") ;;
    alertmanager) ARGV=(prometheus-alertmanager "--config.file=$STATE/alertmanager/alertmanager.yml"
        "--storage.path=$STATE/alertmanager/data" "--web.listen-address=$MBIND:$AM_PORT"
        --cluster.listen-address=) ;;
    prometheus) ARGV=(prometheus "--config.file=$STATE/prometheus/prometheus.yml"
        "--storage.tsdb.path=$STATE/prometheus/data" "--web.listen-address=$MBIND:$PROM_PORT") ;;
    esac
}

# What a live monitoring process's command line contains (run.sh's proc_marker).
monitoring_marker() {
    case $1 in
    node-exporter) echo "--collector.textfile.directory=$SUPERVISE" ;;
    alertmanager) echo "$STATE/alertmanager/alertmanager.yml" ;;
    prometheus) echo "$STATE/prometheus/prometheus.yml" ;;
    esac
}
