#!/usr/bin/env bash
# deploy/logrotate/rotate-loop.sh STATE_DIR: render deploy/logrotate/logrotate.conf for STATE_DIR
# and run Debian's logrotate on it every LOGROTATE_INTERVAL seconds (default 60), until stopped
# (SIGTERM). A long-running process of its own so that the process supervisor that starts the
# service's other processes keeps it running too (docs/operations.md "Log files").
set -euo pipefail
state=${1:?usage: rotate-loop.sh STATE_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
interval=${LOGROTATE_INTERVAL:-60}
conf=$state/logrotate.conf
sed "s#@STATE@#$state#g" "$here/logrotate.conf" >"$conf"
trap 'exit 0' TERM INT
while :; do
    # A failed run (a log directory missing) is reported and retried at the next interval.
    logrotate -s "$state/logrotate.status" "$conf" || echo "rotate-loop: logrotate failed ($?)" >&2
    sleep "$interval" &
    wait $!
done
