# deploy/lib/ports.sh: the default port of every server the deploy scripts start, in one place
# (sourced by lib/common.sh; docs/operations.md "Ports"). Sourced, never run.
#
# Every default lies below Linux's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range,
# 32768-60999), from which the kernel takes the local port of each outgoing connection: a server
# port inside it can be found taken by some client's connection, and the server then fails with
# "Address already in use" while nothing listens there (deploy/run.sh did, twice, on 55432).
# tests/test_ports.py holds these, the ports derived from them and shared/config.py's defaults
# outside that range; the lines here that repeat a shared/config.py default must equal it.

# PostgreSQL and its hot standby (deploy/services.sh)
DEFAULT_PG_PORT=25432
DEFAULT_PG_STANDBY_PORT=25433
# The SDS_DB=patroni profile (deploy/lib/pg_patroni.sh): B .. B+PATRONI_PORT_SPAN
DEFAULT_PATRONI_PORT_BASE=25440
PATRONI_PORT_SPAN=33
# The SDS_BROKER=rabbitmq-cluster profile (deploy/rabbitmq.sh, admin/rabbit.py: 3 nodes):
# B .. B+RABBITMQ_PORT_SPAN
DEFAULT_RABBITMQ_PORT_BASE=21800
RABBITMQ_PORT_SPAN=80
# mosquitto
DEFAULT_MQTT_PORT=1883
# The edge (nginx) and API instance 1 (gunicorn; instance k: + k - 1)
DEFAULT_EDGE_BIND=127.0.0.1:8080
DEFAULT_HTTP_BIND=127.0.0.1:8081
# Prometheus metrics: the ingester (shard k: + 100 + k - 1, its standby + 150 + k - 1; the
# standby of a single ingester + 50), the scheduler, API instance 1 (k: + k - 1), the evaluator,
# the deliverer
DEFAULT_METRICS_PORT=9108
DEFAULT_AGGREGATE_METRICS_PORT=9109
DEFAULT_API_METRICS_PORT=9110
DEFAULT_ALERTS_METRICS_PORT=9112
DEFAULT_DELIVERY_METRICS_PORT=9107
# `deploy/run.sh monitor` (deploy/lib/monitoring.sh)
DEFAULT_PROMETHEUS_PORT=9190
DEFAULT_ALERTMANAGER_PORT=9193
DEFAULT_NODE_EXPORTER_PORT=9191
DEFAULT_ALERT_WEBHOOK_URL=http://127.0.0.1:9199/alerts

# The database defaults before they left the ephemeral range. A deployment made then keeps its
# ports (each cluster's own configuration in .state remembers them: services.sh reads them back)
# and is warned at each start until it moves (docs/operations.md "Ports").
OLD_PG_PORT=55432
OLD_PATRONI_PORT_BASE=55440

# in_ephemeral_range PORT: true when the kernel may hand PORT to an outgoing connection.
in_ephemeral_range() {
    local lo=32768 hi=60999
    if [[ -r /proc/sys/net/ipv4/ip_local_port_range ]]; then
        read -r lo hi </proc/sys/net/ipv4/ip_local_port_range || true
    fi
    (($1 >= lo && $1 <= hi))
}

# config_port FILE REGEX: the port a config file we wrote names (the first match of REGEX's
# group 1, a sed -E expression), or nothing.
config_port() {
    [[ -r $1 ]] || return 0
    sed -nE "s/$2/\\1/p" "$1" | head -n 1
}

# warn_ephemeral PORT WHAT VAR: a deployment's remembered port inside the range: say so (an
# explicitly set VAR is the operator's choice: no warning).
warn_ephemeral() {
    if [[ -z ${!3:-} ]] && in_ephemeral_range "$1"; then
        warn "$2 listens on $1, inside the kernel's ephemeral port range: an outgoing connection may hold it and make a start fail with \"Address already in use\"; docs/operations.md \"Ports\" says how to move it ($3)"
    fi
    return 0
}
