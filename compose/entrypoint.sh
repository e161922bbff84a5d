#!/usr/bin/env bash
# Entry point of the web/worker image: wait for PostgreSQL, then run the chosen role.
set -o errexit -o pipefail -o nounset

role="${1:-web}"
python - <<'PY'
import sys, time
import django
from django.db import connection
django.setup()
for attempt in range(60):
    try:
        connection.ensure_connection()
        break
    except Exception as exc:  # the database container may still be starting
        print(f"waiting for the database: {exc}", file=sys.stderr)
        time.sleep(1)
else:
    sys.exit("database unreachable after 60 s (DATABASE_URL)")
PY

case "$role" in
  web)
    python manage.py migrate --noinput
    mkdir -p "$MODEL_REPOSITORY"
    # Remove what interrupted uploads left in staging (recorded in the audit log).
    python manage.py reconcile_uploads --startup
    exec python -m dashboard.serve -b 0.0.0.0 -p 8080 --proxy-headers dashboard.asgi:application
    ;;
  worker)
    args=(--loglevel=INFO --concurrency="${CELERY_CONCURRENCY:-2}")
    # A GPU host's worker consumes its server's queue only, triton.<name> (compose/gpu-host.yml);
    # without CELERY_QUEUES the worker consumes the default queue, as before.
    if [[ -n "${CELERY_QUEUES:-}" ]]; then args+=(--queues="$CELERY_QUEUES"); fi
    if [[ -n "${CELERY_HOSTNAME:-}" ]]; then args+=(--hostname="$CELERY_HOSTNAME"); fi
    exec celery -A dashboard worker "${args[@]}"
    ;;
  *)
    exec "$@"
    ;;
esac
