"""GET only reads: every URL the dashboard routes, asked with GET by an Admin (who sees
every page and every button), writes no row. Rows a page shows are made first; a change
that makes a page, an API GET or an export record, reap or claim something fails here.

The routes are walked from the URL configuration itself, so a new view is covered the day
it is added; ``SAMPLE`` fills each kind of path argument with a row that exists."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

pytestmark = pytest.mark.integration

WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
# Caches of what the disk already says, not state: a large model file's sha256 is kept per
# (path, size, mtime) so that no page hashes gigabytes twice.
CACHES = ('"repository_app_filedigest"',)


def _routes(
    patterns: list[Any], prefix: str = "", outer: frozenset[str] = frozenset()
) -> Iterator[tuple[str, URLPattern, frozenset[str]]]:
    """(route text, pattern, the names of all its arguments, its includes' too)."""
    for pattern in patterns:
        names = outer | set(pattern.pattern.regex.groupindex)
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue  # Django's own admin, whose GETs Django keeps read-only
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern), names)
        else:
            yield prefix + str(pattern.pattern), pattern, names


def _path(route: URLPattern, names: frozenset[str], sample: dict[str, str]) -> str:
    """The route's path with each argument filled from ``sample``."""
    from django.urls import reverse

    assert route.name and names <= sample.keys(), (route, names)  # add it to ``rows``
    return reverse(route.name, kwargs={k: sample[k] for k in names})


@pytest.fixture
def rows(triton, admin_user, django_user_model) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """One row of everything a page may show, as the path arguments that name it."""
    from fleet.models import Rollout
    from profiler_app.models import Search, Sweep
    from profiler_app.search.objective import Constraints
    from profiler_app.search.space import Knobs, Space
    from registry.servers import default
    from repository_app.editor import saving
    from repository_app.models import ConfigRevision, Upload

    sweep = Sweep.objects.create(
        model="add_sub", server="default", state="succeeded", queued_at=timezone.now(),
        params={"model": "add_sub", "start": 1, "end": 1, "step": 1}, levels_total=1,
    )  # fmt: skip
    carrier = Sweep.objects.create(
        model="add_sub", server="default", state="succeeded", queued_at=timezone.now(),
        kind="search", params={"model": "add_sub", "start": 1, "end": 1, "step": 1},
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model="add_sub", mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints().to_json(), baseline=Knobs(1, "KIND_CPU", 8, True, 100).to_json(),
    )  # fmt: skip
    rollout = Rollout.objects.create(action="load", model="add_sub", chosen="hand-picked")
    upload = Upload.objects.create(
        user=admin_user, username=admin_user.username, model="add_sub", backend="python",
        filename="model.py", size=1,
    )  # fmt: skip
    # An older text than the file's: the file on disk is not in the history yet, as after an
    # edit made outside, so a page that recorded it would write.
    older = saving.read_current("add_sub", default()).text + "\n# before\n"
    revision = ConfigRevision.objects.create(
        repository=saving.repository_key(default()), model="add_sub", text=older,
        sha256=saving.sha256_hex(older.encode()), source="disk",
    )  # fmt: skip
    from team.models import ServerRole

    viewer = django_user_model.objects.create_user("vera", password="pw-vera-1")
    narrowing = ServerRole.objects.create(
        user=viewer, kind=ServerRole.Kind.SERVER, value="default", role=ServerRole.Role.VIEWER
    )
    import numpy as np

    from inference import results

    kept = results.keep(admin_user, {"OUTPUT0": np.zeros(2, np.float32)}, {"OUTPUT0": "FP32"})
    return {
        "token": kept,
        "output": "OUTPUT0",
        "name": "add_sub",
        "version": "1",
        "action": "load",
        "pk": str(sweep.pk),
        "upload_id": str(upload.pk),
        "revision_id": str(revision.pk),
        "search": str(search.pk),
        "rollout": str(rollout.pk),
        "user_id": str(viewer.pk),
        "narrowing_id": str(narrowing.pk),
    }


# Routes whose ``pk`` is not a sweep's or whose ``name`` is a server's, and GET parameters a
# page needs to show itself.
OTHER = {
    ("searches/", "api/v1/searches/"): lambda rows: {"pk": rows["search"]},
    ("rollouts/", "api/v1/rollouts/"): lambda rows: {"pk": rows["rollout"]},
    ("servers/", "api/v1/servers/"): lambda rows: {"name": "default"},
}
QUERY = {"config_diff": "?a={revision_id}&b=disk", "sweep_compare": "?ids={pk}"}


@pytest.mark.django_db
def test_no_get_writes_a_row(rows, admin_user):  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(admin_user)
    client.get("/models/")  # the session and the caches settle outside the count
    asked: list[str] = []
    wrote: list[str] = []

    def watch(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if sql.lstrip().upper().startswith(WRITES) and not any(c in sql for c in CACHES):
            wrote.append(f"{asked[-1]}: {sql[:120]}")
        return execute(sql, params, many, context)

    for text, route, names in _routes(get_resolver().url_patterns):
        sample = dict(rows)
        for prefixes, values in OTHER.items():
            if text.startswith(prefixes):
                sample.update(values(rows))
        path = _path(route, names, sample)
        path += QUERY.get(route.name or "", "").format(**rows)
        asked.append(path)
        with connection.execute_wrapper(watch):
            response = client.get(path)
        assert response.status_code != 500, (path, response.status_code)  # healthz: 503
    assert len(asked) > 60, asked  # the walk reached the routes
    assert not wrote, wrote
