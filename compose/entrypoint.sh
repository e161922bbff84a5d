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
    exec celery -A dashboard worker --loglevel=INFO --concurrency="${CELERY_CONCURRENCY:-2}"
    ;;
  *)
    exec "$@"
    ;;
esac
