# One image for web (Daphne) and worker (Celery); Triton runs in NVIDIA's own image.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    VAR_DIR=/app/var MODEL_REPOSITORY=/models/repository
WORKDIR /app

RUN apt-get update \
    && apt-get install -y --no-install-recommends libb64-0d \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md ./
RUN pip install --no-cache-dir .
COPY . .
# Plotly's basic bundle, checked against its pinned sha256, before collectstatic hashes and
# compresses it (without the registry, the image serves the plotly wheel's full bundle).
RUN python scripts/install_plotly_basic.py --offline-ok \
    && DJANGO_SECRET_KEY=build-only python manage.py collectstatic --noinput \
    && useradd --system --uid 1000 dashboard && mkdir -p /app/var && chown dashboard /app/var

USER dashboard
EXPOSE 8080
ENTRYPOINT ["/app/compose/entrypoint.sh"]
CMD ["web"]
