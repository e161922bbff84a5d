"""Run by test_run_guard as a nested run, not collected on its own (no test_ prefix): a
worker thread keeps its database connection past the test, as an upload chunk's thread does
(common.kept_connection), and the run must still drop its test database."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model

from common.kept_connection import kept_connection


@pytest.mark.django_db(transaction=True)
def test_a_worker_thread_keeps_its_connection() -> None:
    kept = threading.Event()

    def chunk() -> None:
        with kept_connection():
            get_user_model().objects.exists()
        kept.set()
        threading.Event().wait()  # the thread lives on, as the event loop's workers do

    threading.Thread(target=chunk, daemon=True).start()
    assert kept.wait(60)
