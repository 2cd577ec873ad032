#!/usr/bin/env bash
# deploy/test.sh [pytest args]: README command 2, run the tests. Installs what they need (setup.sh),
# then runs pytest from the repo root. The tests start their own PostgreSQL and mosquitto on free
# loopback ports (testbed/), so no service has to be running. CI runs this.
set -euo pipefail

SDS_SCRIPT=test.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

bash "$REPO/deploy/setup.sh"
cd "$REPO"
# `python -m pytest` puts the repo root on sys.path, so `tests.support` imports without installs.
# In parallel (pytest-xdist): `-n auto` is SDS_TEST_WORKERS processes, by default twice the
# cores, and none for `-m quick` (tests/conftest.py, pytest_xdist_auto_num_workers); each worker
# has its own PostgreSQL and mosquitto on free ports. loadfile keeps a module's tests on one
# worker, so its module-scoped database and servers are made once; tests/conftest.py orders the
# modules, the longest first (tests/durations.json), which --no-loadscope-reorder keeps. Arguments given
# here come later and win, e.g. `deploy/test.sh -n 0` for one process. The 25 slowest tests are
# printed every run, so a test that grows shows up before the suite outgrows CI's limit.
[[ ${SDS_TEST_WORKERS:-1} =~ ^[0-9]+$ ]] \
    || die "SDS_TEST_WORKERS must be a number of processes, not '$SDS_TEST_WORKERS'"
rc=0
"$VENV/bin/python" -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=25 \
    "$@" || rc=$?
if ((rc == 5)); then
    # pytest's "no tests collected": never let an empty run pass for a green one.
    die "pytest collected no tests (exit 5); treating that as a failure"
fi
exit "$rc"
