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
# In parallel (pytest-xdist): SDS_TEST_WORKERS processes (default: twice the cores, as most tests
# wait on servers more than they compute), each with its own PostgreSQL and mosquitto on free
# ports. loadgroup keeps a module's service tests on one worker (its module-scoped database and
# servers are made once) and all chaos scenarios on one (tests/conftest.py groups them and
# orders the groups longest first, which --no-loadscope-reorder keeps). Arguments given here
# come later and win, e.g. `deploy/test.sh -n 0` for one process. The 25 slowest tests are
# printed every run, so a test that grows shows up before the suite outgrows CI's limit.
workers=${SDS_TEST_WORKERS:-$((2 * $(nproc)))}
[[ $workers =~ ^[0-9]+$ ]] || die "SDS_TEST_WORKERS must be a number of processes, not '$workers'"
rc=0
"$VENV/bin/python" -m pytest -n "$workers" --dist loadgroup --no-loadscope-reorder \
    --durations=25 "$@" || rc=$?
if ((rc == 5)); then
    # pytest's "no tests collected": never let an empty run pass for a green one.
    die "pytest collected no tests (exit 5); treating that as a failure"
fi
exit "$rc"
