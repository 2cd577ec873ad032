#!/usr/bin/env bash
# deploy/test.sh [pytest args]: README command 2, run the tests. Installs what they need (setup.sh),
# then runs pytest from the repo root. The tests start their own PostgreSQL and mosquitto on free
# loopback ports (testbed/services.py), so no service has to be running. CI runs this.
set -euo pipefail

SDS_SCRIPT=test.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

bash "$REPO/deploy/setup.sh"
cd "$REPO"
# `python -m pytest` puts the repo root on sys.path, so `tests.support` imports without installs.
rc=0
"$VENV/bin/python" -m pytest "$@" || rc=$?
if ((rc == 5)); then
    # pytest's "no tests collected": never let an empty run pass for a green one.
    die "pytest collected no tests (exit 5); treating that as a failure"
fi
exit "$rc"
