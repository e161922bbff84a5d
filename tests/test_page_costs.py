"""What one page view costs: its SQL queries and its Triton calls, counted, so that a change
that adds to them fails here (a page asks Triton each question once)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from profiler_app.models import Sweep
from triton_api.client import TritonClient

pytestmark = pytest.mark.integration


@contextmanager
def triton_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    counted: Counter[str] = Counter()
    real = TritonClient._call

    def call(self, method, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted[method] += 1
        return real(self, method, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(TritonClient, "_call", call)
        yield counted


# path -> (SQL queries, Triton calls) at most, for a signed-in Viewer with warm caches.
# The permissions are one query (team.backends.all_permissions; each budget was one more).
BUDGETS = {
    "/models/": (8, 1),  # session, user, narrowings, intents, outcomes, perms, registry
    "/models/add_sub/": (8, 2),  # one index, the model's statistics
    "/sweeps/{sweep}/": (10, 0),
    "/fleet/": (6, 2),  # +1: every check verdict of the matrix (inference.checks.verdicts)
}


@pytest.mark.django_db
def test_a_page_view_costs_a_small_fixed_number_of_queries_and_triton_calls(
    triton, django_user_model, monkeypatch
):
    """Before: the model page made 27 queries (the narrowings and groups once per
    permission check) and 7 Triton calls (the index twice, the server's facts four)."""
    from triton_api import client as triton_client

    monkeypatch.setattr(triton_client, "SERVER_FACTS_TTL_S", 3600.0)  # warm, whatever the pace
    user = django_user_model.objects.create_user("cora", password="pw-cora-1")
    client = Client()
    client.force_login(user)
    sweep = Sweep.objects.create(
        model="add_sub", server="default", params={"model": "add_sub"}, state=Sweep.State.SUCCEEDED
    )
    for template, (query_budget, call_budget) in BUDGETS.items():
        path = template.format(sweep=sweep.pk)
        assert client.get(path).status_code == 200, path  # warm
        with triton_calls(monkeypatch) as calls, CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200
        sql = [q["sql"][:120] for q in queries.captured_queries]
        assert len(sql) <= query_budget, (path, sql)
        assert sum(calls.values()) <= call_budget, (path, dict(calls))
