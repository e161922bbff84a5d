"""The one job lifecycle (profiler_app.jobs) without Triton: sweeps and config searches are
two kinds of one job, run by one task, listed where they belong, and pages only read."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from profiler_app import jobs, sweep_plan, sweep_read, sweeps, watchdog
from profiler_app.models import Search, Sweep
from profiler_app.params import SweepParams
from profiler_app.search import creating, runner
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space
from registry import servers

pytestmark = pytest.mark.django_db

MODEL = "add_batched"


@pytest.fixture
def sent(monkeypatch, redis_db) -> list[tuple[str, int, dict]]:
    """The Celery messages that would be sent: ("task:kind", job id, options)."""
    messages: list[tuple[str, int, dict]] = []

    def apply_async(args, **options):  # type: ignore[no-untyped-def]
        messages.append((f"{jobs.run_job_task.name}:{args[0]}", args[1], options))

    monkeypatch.setattr(jobs.run_job_task, "apply_async", apply_async)
    return messages


def _sweep() -> Sweep:
    params = SweepParams(model=MODEL, start=1, end=2, measurement_window_ms=500, max_windows=3)
    return sweeps.create_sweep(servers.default(), params, enqueue=False)


def _search(state: str = "queued", **fields) -> Search:
    job = Sweep.objects.create(
        kind=Sweep.Kind.SEARCH, model=MODEL, server="default", state=state,
        params={"model": MODEL, "start": 2, "end": 2, "step": 1}, queued_at=timezone.now(),
        levels_total=3, **fields,
    )  # fmt: skip
    return Search.objects.create(
        sweep=job, model=MODEL, mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints().to_json(), baseline=Knobs(1, "KIND_CPU", 8, False).to_json(),
    )  # fmt: skip


def _viewer(django_user_model, client):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("vera", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    return client


def test_both_kinds_are_sent_as_the_one_task_with_their_own_time_limits(sent):
    sweep, search = _sweep(), _search()
    assert jobs.dispatch(sweep.pk) and jobs.dispatch(search.sweep_id)
    assert [(name, job) for name, job, _ in sent] == [
        ("jobs.run:sweep", sweep.pk),
        ("jobs.run:search", search.sweep_id),
    ]
    sweep_limits = sweep_plan.time_limits(sweeps.params_of(sweep))
    search_limits = runner.time_limits(sweeps.params_of(search.sweep), 3)
    assert (sent[0][2]["soft_time_limit"], sent[0][2]["time_limit"]) == sweep_limits
    assert (sent[1][2]["soft_time_limit"], sent[1][2]["time_limit"]) == search_limits
    assert sweep_limits != search_limits


def test_the_kind_is_a_field_and_the_parameters_carry_no_search_flag(monkeypatch, sent):
    monkeypatch.setattr(creating, "plan", lambda request: (Knobs(1, "KIND_CPU", 8, False), 2))
    monkeypatch.setattr(creating, "preflight", lambda request: None)
    monkeypatch.setattr(creating, "is_ready", lambda server, model: True)
    request = creating.SearchRequest(
        model=MODEL, space=Space(counts=(1, 2)), measure=SweepParams(model=MODEL, start=2, end=2),
        constraints=Constraints(latency_budget_ms=50),
        server=servers.default(),
    )  # fmt: skip
    search = creating.create_search(request, enqueue=False)
    job = Sweep.objects.get(pk=search.sweep_id)
    assert job.kind == "search" and "search" not in job.params
    assert _sweep().kind == "sweep"


def test_sweep_lists_and_the_api_show_sweeps_only_and_a_search_job_leads_to_its_search(
    django_user_model, client
):
    sweep, search = _sweep(), _search(state="succeeded")
    client = _viewer(django_user_model, client)
    listed = client.get("/api/v1/sweeps/").json()
    assert [row["id"] for row in listed] == [sweep.pk]
    assert listed[0]["kind"] == "sweep"
    assert client.get(f"/api/v1/sweeps/{search.sweep_id}/").status_code == 404
    page = client.get("/sweeps/").content.decode()
    history, searches = page.split('id="searches-card"')
    assert f"/sweeps/{sweep.pk}/" in history and f"/sweeps/{search.sweep_id}/" not in history
    assert f"/searches/{search.pk}/" in searches
    response = client.get(f"/sweeps/{search.sweep_id}/")
    assert response.status_code == 302 and response["Location"] == f"/searches/{search.pk}/"


def test_a_page_of_a_job_whose_worker_died_only_reads(django_user_model, client):
    """GET handlers never act: the page says the heartbeat stopped; the watchdog declares."""
    old = timezone.now() - timedelta(seconds=jobs.STALE_AFTER_S + 5)
    sweep = _sweep()
    Sweep.objects.filter(pk=sweep.pk).update(state="running", started_at=old, heartbeat_at=old)
    search = _search(state="running", started_at=old, heartbeat_at=old)
    Search.objects.filter(pk=search.pk).update(restore_pending=True)
    client = _viewer(django_user_model, client)
    data = client.get(f"/sweeps/{sweep.pk}/data.json").json()
    assert data["sweep"]["state"] == "running" and data["sweep"]["heartbeat_stale"] is True
    for url in (
        "/sweeps/", f"/sweeps/{sweep.pk}/", "/api/v1/sweeps/", f"/api/v1/sweeps/{sweep.pk}/",
        f"/searches/{search.pk}/", f"/searches/{search.pk}/data.json", "/api/v1/searches/",
        f"/api/v1/searches/{search.pk}/",
    ):  # fmt: skip
        assert client.get(url).status_code == 200, url
    assert set(Sweep.objects.values_list("state", flat=True)) == {"running"}
    assert Search.objects.get(pk=search.pk).restore_pending is True


def test_the_watchdog_leaves_an_interrupted_search_its_own_summary_and_restores_it(
    monkeypatch, sent
):
    old = timezone.now() - timedelta(seconds=jobs.STALE_AFTER_S + 5)
    search = _search(state="running", started_at=old, heartbeat_at=old)
    Search.objects.filter(pk=search.pk).update(restore_pending=True)
    restored: list[int] = []
    monkeypatch.setattr(runner, "restore", lambda s: restored.append(s.pk) or "restored")
    published: list[tuple[str, dict]] = []
    monkeypatch.setattr(
        runner.events, "publish", lambda group, kind, payload: published.append((kind, payload))
    )
    assert watchdog.check() == [search.sweep_id]
    job = Sweep.objects.get(pk=search.sweep_id)
    assert job.state == "interrupted"
    assert job.summary["search"] == search.pk and "knee" not in job.summary
    assert [kind for kind, _ in published] == ["sweep.state", "search.result"]
    assert all(payload["state"] == "interrupted" for _, payload in published)
    assert restored == [search.pk], "the dead worker's restore is done by the watchdog"


def test_stored_search_jobs_become_kind_search_and_the_flag_goes(django_db_blocker):
    migration = importlib.import_module("profiler_app.migrations.0005_sweep_kind")
    flagged = Sweep.objects.create(model=MODEL, server="s", params={"model": MODEL, "search": True})
    owned = _search()
    Sweep.objects.filter(pk=owned.sweep_id).update(kind="sweep")
    plain = _sweep()

    from django.apps import apps

    migration.to_kind(apps, None)
    kinds = dict(Sweep.objects.values_list("pk", "kind"))
    assert kinds == {flagged.pk: "search", owned.sweep_id: "search", plain.pk: "sweep"}
    assert "search" not in Sweep.objects.get(pk=flagged.pk).params
    migration.to_flag(apps, None)
    assert Sweep.objects.get(pk=flagged.pk).params["search"] is True


def test_the_api_schema_describes_every_field_of_a_sweep_as_returned():
    from profiler_app.api import SweepSerializer

    assert set(sweep_read.sweep_json(_sweep())) == set(SweepSerializer().fields)
