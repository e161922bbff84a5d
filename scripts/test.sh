#!/usr/bin/env bash
# `make test`: the static checks, then the whole pytest suite against real services, in
# parallel (pytest-xdist, three workers, --dist loadgroup: the tests on real services run in
# three serial groups, one per worker; unit and ORM tests run beside them; see
# tests/run_isolation.py).
#   scripts/test.sh [--no-checks] [PYTEST ARGS...]
# --no-checks skips the static checks (.ci/run's PostgreSQL pass: they ran once already).
#
# Every process of the run carries DASHBOARD_TEST_RUN (devstack/runguard.py): leftovers of
# an earlier, interrupted run are stopped first, and whatever this run started is stopped
# when it ends, also on SIGTERM, SIGINT or SIGHUP (to this script or to make, which passes
# SIGTERM on). Redis is a private redis-server of this run on a free port, so no other run's
# worker can take this run's jobs (TEST_REDIS_URL names another one instead).
set -o errexit -o pipefail -o nounset
cd "$(dirname "$0")/.."
VENV_BIN=.venv/bin

checks=1
if [ "${1:-}" = "--no-checks" ]; then
  checks=0
  shift
fi

bash scripts/ensure_system_packages.sh
# perf_analyzer, the reference load generator (from the tritonclient 2.48.0 wheel).
$VENV_BIN/python scripts/install_perf_analyzer.py
# Plotly's basic bundle, which the pages load (offline: the plotly wheel's full one instead).
$VENV_BIN/python scripts/install_plotly_basic.py --offline-ok

export DJANGO_SETTINGS_MODULE=dashboard.settings
export VAR_DIR="${TEST_VAR_DIR:-$PWD/var/test}"
mkdir -p "$VAR_DIR"

$VENV_BIN/python -m devstack.runguard leftovers --var-dir "$VAR_DIR"
DASHBOARD_TEST_RUN=$($VENV_BIN/python -c 'import os; from devstack.runguard import run_id; print(run_id(os.getppid()))')
export DASHBOARD_TEST_RUN

pytest_pid=""
redis_dir=""
finish() {
  # Whatever of this run is still there (a service a crashed pytest left, its redis-server).
  $VENV_BIN/python -m devstack.runguard stop-run "$DASHBOARD_TEST_RUN" || true
  [ -z "$redis_dir" ] || rm -rf "$redis_dir"
}
on_signal() {
  trap - TERM INT HUP
  echo "scripts/test.sh: $1: stopping this test run" >&2
  if [ -n "$pytest_pid" ]; then
    # SIGTERM, whatever came: an asynchronous command ignores SIGINT in a script. pytest
    # (tests/run_isolation.py) turns it into an interruption and tears its fixtures down;
    # what is still there after 4 s is stopped by finish.
    pkill -TERM -P "$pytest_pid" 2>/dev/null || true  # xdist's workers, each tearing down its own
    kill -TERM "$pytest_pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pytest_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  exit "$2"
}
trap finish EXIT
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGHUP 129' HUP

# Dies with this script even if it is killed outright (SIGKILL): the parent-death signal.
die_with_me=(setpriv --pdeathsig TERM --)

if [ -n "${TEST_REDIS_URL:-}" ]; then
  export REDIS_URL="$TEST_REDIS_URL"
else
  port=$($VENV_BIN/python -c 'from devstack.services import free_port; print(free_port())')
  redis_dir="$VAR_DIR/redis-$port"
  mkdir -p "$redis_dir"
  "${die_with_me[@]}" redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$redis_dir" >"$redis_dir/redis.log" 2>&1 &
  export REDIS_URL="redis://127.0.0.1:$port/0"
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$port" ping >/dev/null || { cat "$redis_dir/redis.log" >&2; echo "redis-server did not start" >&2; exit 1; }
fi
export CELERY_BROKER_URL="$REDIS_URL"

if [ $checks -eq 1 ]; then
  bash scripts/checks.sh
fi

echo "== pytest (database: ${DATABASE_URL:-SQLite under $VAR_DIR}; Redis: $REDIS_URL)"
set +o errexit
"${die_with_me[@]}" $VENV_BIN/pytest -n "${TEST_WORKERS:-3}" --dist loadgroup "$@" &
pytest_pid=$!
wait "$pytest_pid"
status=$?
set -o errexit
if [ $status -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $status
