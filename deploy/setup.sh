#!/usr/bin/env bash
# deploy/setup.sh: install what the service and its tests need on a Debian bookworm machine, as root.
# Installs Debian packages, builds TimescaleDB and mosquitto from Debian's own source packages of
# the next release, and makes the project's venv in <repo>/.venv. Idempotent: a rerun checks and
# skips every step.
# Used by deploy/run.sh and deploy/test.sh; runs no services (see deploy/services.sh).
set -euo pipefail

SDS_SCRIPT=setup.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_root

export DEBIAN_FRONTEND=noninteractive
SECONDS=0
mkdir -p "$LOGS"

# One setup at a time: run.sh and test.sh may be started together, and apt/pip do not share well.
exec 9>"$STATE/setup.lock"
flock 9

# What the service runs on. curl is only for the README's examples; procps gives pgrep/ps.
# nginx-light is the edge in front of the API (deploy/nginx/nginx.conf; started by run.sh with
# its own config, never Debian's default site: the policy below keeps its service from starting).
# rabbitmq-server: the replicated broker profile (SDS_BROKER=rabbitmq-cluster) and its tests; its
# own system node is never started by us (policy-rc.d below) and, if running, left alone.
# pgbackrest: the backups and WAL archive of the default profile (deploy/lib/pg_backup.sh).
RUNTIME_PKGS=(postgresql-15 postgresql-contrib mosquitto mosquitto-clients python3 python3-venv
    python3-dev build-essential ca-certificates procps curl openssl nginx-light
    rabbitmq-server logrotate pgbackrest)
# The SDS_DB=patroni profile (deploy/lib/pg_patroni.sh): Patroni, its etcd, HAProxy.
RUNTIME_PKGS+=(patroni etcd-server etcd-client haproxy)
# Monitoring (`deploy/run.sh monitor`, deploy/prometheus/; promtool and amtool check the shipped
# files in the tests): Prometheus, Alertmanager, node_exporter. Their own services never start
# (policy-rc.d below); run.sh runs them with the rendered configuration.
RUNTIME_PKGS+=(prometheus prometheus-alertmanager prometheus-node-exporter)
# What the browser tests drive (testbed/browser.py): Debian's Chromium and its WebDriver.
TEST_PKGS=(chromium chromium-driver)
# Debian's npm installs the dashboard's chart library from the npm registry (step 4). A machine
# that already has Node.js with its own npm (e.g. NodeSource's nodejs) keeps it.
command -v npm >/dev/null || RUNTIME_PKGS+=(nodejs npm)
# What the TimescaleDB build needs; only asked for while the extension is missing.
BUILD_PKGS=(postgresql-server-dev-15 cmake build-essential libssl-dev dpkg-dev)
TRIXIE_SRC=/etc/apt/sources.list.d/sds-trixie-src.sources
# mosquitto: trixie's 2.0.21 source package plus the patches in deploy/mosquitto/patches, installed
# as Debian packages whose version carries this suffix (bump it when the patches change: a machine
# whose installed version lacks it rebuilds). docs/decisions.md says why.
MQ_UPSTREAM=2.0.21
MQ_LOCAL_SUFFIX=+sds2
# The service's broker plugin (deploy/mosquitto/sds_plugin.c: only the ingester's accounts may
# subscribe; no retained messages), where mosquitto.conf loads it.
MQ_PLUGIN=/usr/local/lib/sds/mosquitto_sds.so

missing_pkgs() {
    local p
    for p in "$@"; do
        [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) == ii* ]] || printf '%s\n' "$p"
    done
}

# Debian's postinst scripts start the system PostgreSQL (5432) and mosquitto (1883) when they can.
# We run our own instances with our own config, so forbid service starts for the duration of our
# install, the way Docker images do, unless the machine already has a policy of its own.
APT_POLICY_ADDED=""
forbid_service_starts() {
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\n# temporary, from the sensor data service setup.sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        APT_POLICY_ADDED=1
    fi
}
allow_service_starts() {
    if [[ -n $APT_POLICY_ADDED ]]; then
        rm -f /usr/sbin/policy-rc.d
        APT_POLICY_ADDED=""
    fi
}
trap allow_service_starts EXIT

# If a system broker did get started anyway (it holds 1883, our default port), stop that one only:
# it is recognised by Debian's config path on its command line.
stop_system_mosquitto() {
    local pid
    for pid in $(pgrep -x mosquitto || true); do
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF /etc/mosquitto/mosquitto.conf; then
            say "stopping the system mosquitto (pid $pid) started by its Debian package"
            kill -TERM "$pid" || true
        fi
    done
}

# The deb-src entry for trixie, reusing this machine's own Debian mirror and key (the repo names no
# host), and apt's lists refreshed once per run: only called when something must be built.
TRIXIE_LISTS_FRESH=""
ensure_trixie_src() {
    local stanza
    [[ -z $TRIXIE_LISTS_FRESH ]] || return 0
    stanza=$(python3 "$REPO/deploy/lib/apt_mirror.py" --suite trixie) \
        || die "could not find this machine's Debian mirror in /etc/apt to add trixie sources"
    printf '%s\n' "$stanza" | write_if_changed "$TRIXIE_SRC" 644 >/dev/null
    say "deb-src entry for trixie in $TRIXIE_SRC"
    apt-get update -qq || die "apt-get update failed after adding $TRIXIE_SRC"
    TRIXIE_LISTS_FRESH=1
}

# A scratch directory apt can download into as user _apt (else it warns and fetches as root).
apt_build_dir() {
    local dir
    dir=$(mktemp -d "/tmp/sds-$1.XXXXXX")
    chmod 755 "$dir"
    chown _apt:root "$dir" 2>/dev/null || true
    printf '%s\n' "$dir"
}

apt_install() {
    say "installing: $*"
    forbid_service_starts
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" \
        || die "apt-get install failed for: $*"
    allow_service_starts
    stop_system_mosquitto
}

# ---- 1. Debian packages -------------------------------------------------------------------------
want=("${RUNTIME_PKGS[@]}" "${TEST_PKGS[@]}")
[[ -f $TIMESCALEDB_CONTROL ]] || want+=("${BUILD_PKGS[@]}")
mapfile -t missing < <(missing_pkgs "${want[@]}")
if ((${#missing[@]})); then
    apt_install "${missing[@]}"
    apt_step="installed ${#missing[@]} package(s)"
else
    apt_step="all ${#want[@]} packages already installed"
fi
say "apt: $apt_step"

# ---- 2. TimescaleDB from Debian trixie's source package ----------------------------------------
# bookworm has no TimescaleDB binary package; trixie's source package (Apache-2 edition) builds
# against bookworm's postgresql-server-dev-15 in well under a minute.
if [[ -f $TIMESCALEDB_CONTROL ]]; then
    tsdb_step="already installed"
else
    build_start=$SECONDS
    ensure_trixie_src
    build_log=$LOGS/timescaledb-build.log
    build_dir=$(apt_build_dir timescaledb)
    say "building TimescaleDB in $build_dir (log: $build_log)"
    (
        cd "$build_dir"
        apt-get source -q timescaledb/trixie
        src=$(find . -mindepth 1 -maxdepth 1 -type d -name 'timescaledb-*' | head -n 1)
        [[ -n $src ]] || { echo "apt-get source produced no timescaledb-* directory"; exit 1; }
        cd "$src"
        # Apache-2 edition only; no test suites; a newer compiler's warnings must not stop us.
        ./bootstrap -DAPACHE_ONLY=1 -DREGRESS_CHECKS=OFF -DTAP_CHECKS=OFF \
            -DWARNINGS_AS_ERRORS=OFF -DPG_CONFIG="$PG_BIN/pg_config"
        make -C build -j"$(nproc)" install
    ) >"$build_log" 2>&1 || { log_tail "$build_log" 40; die "TimescaleDB build failed (full log: $build_log)"; }
    [[ -f $TIMESCALEDB_CONTROL ]] || die "TimescaleDB build finished but $TIMESCALEDB_CONTROL is missing"
    rm -rf "$build_dir"
    tsdb_step="built and installed in $((SECONDS - build_start)) s"
fi
tsdb_version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$TIMESCALEDB_CONTROL")
say "TimescaleDB $tsdb_version: $tsdb_step"

# ---- 3. mosquitto 2.0.21 from Debian trixie's source package, patched ---------------------------
# bookworm's mosquitto 2.0.11 crashed after a password rotation (issue 20 items 6 and 7); 2.0.21
# carries upstream's later fixes but not the one for that crash, which deploy/mosquitto/patches
# adds, nor one for the shared subscriptions its store never saved (a broker start dropped the
# readings acked before the shards were back; docs/decisions.md). Built as Debian packages with
# bookworm's build dependencies and installed over bookworm's, so /usr/sbin/mosquitto,
# mosquitto_passwd and mosquitto_pub/sub are this build for services.sh, the tests and the CLI.
# About 2 minutes on 2 cores, once.
mq_installed=$(dpkg-query -W -f='${Version}' mosquitto 2>/dev/null || true)
if [[ $mq_installed == "$MQ_UPSTREAM"-*"$MQ_LOCAL_SUFFIX" ]]; then
    mq_step="already installed"
else
    build_start=$SECONDS
    ensure_trixie_src
    build_log=$LOGS/mosquitto-build.log
    build_dir=$(apt_build_dir mosquitto)
    say "building mosquitto $MQ_UPSTREAM$MQ_LOCAL_SUFFIX in $build_dir (log: $build_log)"
    forbid_service_starts
    bash "$REPO/deploy/mosquitto/build-deb.sh" "$build_dir" "$MQ_UPSTREAM" "$MQ_LOCAL_SUFFIX" \
        >"$build_log" 2>&1 \
        || { allow_service_starts; log_tail "$build_log" 40; die "mosquitto build failed (log: $build_log)"; }
    allow_service_starts
    stop_system_mosquitto
    rm -rf "$build_dir"
    mq_installed=$(dpkg-query -W -f='${Version}' mosquitto)
    [[ $mq_installed == "$MQ_UPSTREAM"-*"$MQ_LOCAL_SUFFIX" ]] \
        || die "mosquitto build finished but the installed version is $mq_installed"
    mq_step="built and installed in $((SECONDS - build_start)) s"
fi
# What PATH finds is what services.sh and the tests run (`mosquitto -h` exits 3 after its banner).
mq_banner=$(mosquitto -h 2>&1 | head -n 1 || true)
[[ $mq_banner == "mosquitto version $MQ_UPSTREAM" ]] \
    || die "the mosquitto on PATH is not $MQ_UPSTREAM ($(command -v mosquitto): $mq_banner)"
say "mosquitto $mq_installed: $mq_step"

# ---- 4. The broker's plugin ---------------------------------------------------------------------
# deploy/mosquitto/sds_plugin.c (why: docs/security.md), rebuilt when its source or the broker
# changed; the stamp next to it holds both.
plugin_stamp="$MQ_PLUGIN.stamp"
plugin_want="$(sha256sum <"$REPO/deploy/mosquitto/sds_plugin.c" | cut -d' ' -f1) $mq_installed"
if [[ -f $MQ_PLUGIN && -f $plugin_stamp && $(<"$plugin_stamp") == "$plugin_want" ]]; then
    plugin_step="up to date"
else
    mkdir -p "$(dirname "$MQ_PLUGIN")"
    gcc -Wall -Wextra -Werror -O2 -fPIC -shared -o "$MQ_PLUGIN.tmp" \
        "$REPO/deploy/mosquitto/sds_plugin.c" || die "could not build the broker plugin sds_plugin.c"
    chmod 644 "$MQ_PLUGIN.tmp"
    mv -f "$MQ_PLUGIN.tmp" "$MQ_PLUGIN"
    echo "$plugin_want" >"$plugin_stamp"
    plugin_step="built"
fi
say "broker plugin $MQ_PLUGIN: $plugin_step"

# ---- 5. Python venv -------------------------------------------------------------------------------
# The stamp holds a hash of what decides the install: the pins, the project metadata, and which
# top-level packages exist (setuptools' editable finder maps only the packages present at install).
install_hash() {
    {
        cat "$REPO/constraints.txt" "$REPO/pyproject.toml" "$REPO/client/pyproject.toml"
        (cd "$REPO" && ls -d -- */__init__.py 2>/dev/null || true)
    } | sha256sum | cut -d' ' -f1
}
stamp=$VENV/.sds-install-stamp
want_hash=$(install_hash)
if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import sys' 2>/dev/null \
    && [[ -f $stamp && $(<"$stamp") == "$want_hash" ]]; then
    venv_step="up to date"
else
    if ! { [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; }; then
        say "creating $VENV with Debian's /usr/bin/python3"
        /usr/bin/python3 -m venv "$VENV" || die "could not create the venv in $VENV"
    fi
    pip_log=$LOGS/pip-install.log
    # The service with its test tools, and the Python client (client/, its own package) with
    # its pandas and parquet extras, which its tests in tests/client use.
    say "pip install -c constraints.txt -e '.[test]' -e './client[pandas,parquet]' (log: $pip_log)"
    (cd "$REPO" && "$VENV/bin/pip" install --disable-pip-version-check -c constraints.txt \
        -e '.[test]' -e './client[pandas,parquet]') \
        >"$pip_log" 2>&1 || { log_tail "$pip_log" 40; die "pip install failed (full log: $pip_log)"; }
    echo "$want_hash" >"$stamp"
    venv_step="installed"
fi
say "venv $VENV: $venv_step"

# ---- 5b. The tests' S3-compatible server ------------------------------------------------------------
# moto's server mode (S3 only) in a venv of its own, pinned in deploy/s3server-constraints.txt:
# testbed/s3.py runs it for the cold tier's tests (docs/decisions.md "Cold tier"). Its own venv
# because botocore needs python-dateutil < 3 and the service pins 4.0.0.
S3_VENV=$REPO/.venv-s3
s3_stamp=$S3_VENV/.sds-install-stamp
s3_hash=$(sha256sum "$REPO/deploy/s3server-constraints.txt" | cut -d' ' -f1)
if [[ -x $S3_VENV/bin/moto_server && -f $s3_stamp && $(<"$s3_stamp") == "$s3_hash" ]]; then
    s3_step="up to date"
else
    [[ -x $S3_VENV/bin/python ]] || /usr/bin/python3 -m venv "$S3_VENV" \
        || die "could not create the venv in $S3_VENV"
    s3_log=$LOGS/pip-install-s3.log
    "$S3_VENV/bin/pip" install --disable-pip-version-check -r "$REPO/deploy/s3server-constraints.txt" \
        >"$s3_log" 2>&1 || { log_tail "$s3_log" 40; die "pip install failed (full log: $s3_log)"; }
    echo "$s3_hash" >"$s3_stamp"
    s3_step="installed"
fi
say "S3 test server venv $S3_VENV: $s3_step"

# ---- 6. Dashboard assets --------------------------------------------------------------------------
# The chart library (uPlot) from npm into serve/web/static/vendor (docs/dashboard.md).
bash "$REPO/deploy/lib/web_assets.sh"

# ---- 7. Summary -----------------------------------------------------------------------------------
pg_version=$("$PG_BIN/postgres" --version | awk '{print $3}')
mq_version=$(dpkg-query -W -f='${Version}' mosquitto)
rmq_version=$(dpkg-query -W -f='${Version}' rabbitmq-server)
py_version=$("$VENV/bin/python" -c 'import platform; print(platform.python_version())')
say "ready in ${SECONDS}s: PostgreSQL $pg_version, TimescaleDB $tsdb_version, mosquitto $mq_version, RabbitMQ $rmq_version, Python $py_version"
