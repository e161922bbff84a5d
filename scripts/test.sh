#!/usr/bin/env bash
# `make test`: static checks, then the whole pytest suite against real services.
# Redis: the one at TEST_REDIS_URL when it answers (a test database number, flushed by the
# fixtures), otherwise a private redis-server on a free port, stopped on exit.
set -o errexit -o pipefail -o nounset
cd "$(dirname "$0")/.."
VENV_BIN=.venv/bin

bash scripts/ensure_system_packages.sh
# perf_analyzer, the reference load generator (from the tritonclient 2.48.0 wheel).
$VENV_BIN/python scripts/install_perf_analyzer.py

export DJANGO_SETTINGS_MODULE=dashboard.settings
export VAR_DIR="${TEST_VAR_DIR:-$PWD/var/test}"
mkdir -p "$VAR_DIR"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
export CELERY_BROKER_URL="$REDIS_URL"

redis_pid=""
cleanup() { [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true; }
trap cleanup EXIT
if ! $VENV_BIN/python - <<'PY'
import os, redis, sys
try:
    redis.Redis.from_url(os.environ["REDIS_URL"], socket_connect_timeout=1).ping()
except redis.RedisError:
    sys.exit(1)
PY
then
  port=$($VENV_BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  echo "No Redis at $REDIS_URL: starting a private redis-server on port $port"
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$VAR_DIR" >"$VAR_DIR/redis.log" 2>&1 &
  redis_pid=$!
  export REDIS_URL="redis://127.0.0.1:$port/15" CELERY_BROKER_URL="redis://127.0.0.1:$port/15"
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

echo "== Django checks"
$VENV_BIN/python manage.py check --fail-level WARNING
$VENV_BIN/python manage.py makemigrations --check --dry-run
echo "== OpenAPI schema"
$VENV_BIN/python manage.py spectacular --validate --fail-on-warn --file /dev/null
echo "== ruff"
$VENV_BIN/ruff check .
$VENV_BIN/ruff format --check .
echo "== mypy (the application packages; tests and benchmarks are not checked yet)"
$VENV_BIN/mypy dashboard repository_app profiler_app team devstack
echo "== docker-compose config"
POSTGRES_PASSWORD=check DJANGO_SECRET_KEY=check TRITON_API_KEY=check docker-compose -f docker-compose.yml config --quiet

echo "== pytest (database: ${DATABASE_URL:-SQLite under $VAR_DIR})"
set +o errexit
$VENV_BIN/pytest "$@"
status=$?
set -o errexit
if [ $status -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $status
