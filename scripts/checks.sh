#!/usr/bin/env bash
# The static checks, once per `make test` (and so once per `.ci/run`): Django's system
# checks, migrations, the OpenAPI schema, ruff, mypy and docker-compose config.
set -o errexit -o pipefail -o nounset
cd "$(dirname "$0")/.."
VENV_BIN=.venv/bin
export DJANGO_SETTINGS_MODULE=dashboard.settings

echo "== Django checks"
$VENV_BIN/python manage.py check --fail-level WARNING
$VENV_BIN/python manage.py makemigrations --check --dry-run
echo "== OpenAPI schema"
$VENV_BIN/python manage.py spectacular --validate --fail-on-warn --file /dev/null
echo "== ruff"
$VENV_BIN/ruff check .
$VENV_BIN/ruff format --check .
echo "== mypy (the application packages; tests and benchmarks are not checked yet)"
$VENV_BIN/mypy dashboard common jobs registry repository_app profiler_app inference fleet team devstack triton_api
echo "== docker-compose config"
POSTGRES_PASSWORD=check DJANGO_SECRET_KEY=check TRITON_API_KEY=check REDIS_PASSWORD=check docker-compose -f docker-compose.yml config --quiet
