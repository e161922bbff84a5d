"""Shared set-up for benchmarks that need Django: a throwaway SQLite database and a user."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django() -> Path:
    """Configure Django on a fresh SQLite file under a temp folder; returns that folder."""
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    os.environ["VAR_DIR"] = str(work)
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return work


def logged_in_client():  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_superuser("bench", "", "bench-password-1")
    client = Client()
    client.force_login(user)
    return client
