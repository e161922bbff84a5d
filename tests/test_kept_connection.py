"""The upload chunk path keeps its worker thread's database connection from one chunk to
the next (common.kept_connection) instead of connecting for each, and drops it when it
erred, aged or fails its health check."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection

from common import kept_connection as kept
from common.kept_connection import kept_connection

pytestmark = pytest.mark.django_db(transaction=True)


def _use() -> object:
    with kept_connection():
        User.objects.count()
    return connection.connection


def test_a_connection_is_kept_between_blocks_until_it_fails_its_check_or_ages(monkeypatch):
    first = _use()
    assert first is not None and _use() is first
    monkeypatch.setattr(connection, "is_usable", lambda: False)  # the server went away
    second = _use()
    assert second is not None and second is not first
    monkeypatch.undo()
    assert _use() is second
    monkeypatch.setattr(kept, "MAX_AGE", -1.0)
    assert _use() is not second


def test_a_connection_that_erred_is_not_kept():
    _use()
    with pytest.raises(DatabaseError), kept_connection(), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table_here")
    assert connection.connection is None
    assert _use() is not None
