"""The Celery application shared by the web process (to queue) and the worker (to run)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("dashboard")
# Every CELERY_* Django setting configures Celery (cookiecutter-django's layout).
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
