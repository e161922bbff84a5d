"""Routing a job to its server's queue (jobs.queues), without Celery workers: the
workers' answer to Celery's inspect is faked; what a job records and what its pages say."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import Permission

from jobs import queues
from profiler_app import jobs, sweep_read, sweeps, watchdog
from profiler_app.models import Sweep
from profiler_app.params import SweepParams
from registry import servers
from registry.models import TritonServer
from registry.server_rules import InvalidServer, check

pytestmark = pytest.mark.django_db

MODEL = "add_batched"
WORKER = "worker-gpu1@gpu1-host"
START = "celery -A dashboard worker -Q triton.gpu1"


@pytest.fixture
def workers(monkeypatch):
    """The workers' answer: queue -> worker names (edit the dict; `queues.forget()` after)."""
    answer: dict[str, tuple[str, ...]] = {}
    monkeypatch.setattr(queues, "ask_workers", lambda: dict(answer))
    queues.forget()
    yield answer
    queues.forget()


@pytest.fixture
def sent(monkeypatch, redis_db) -> list[tuple[int, dict]]:
    """The Celery messages that would be sent: (job id, options)."""
    messages: list[tuple[int, dict]] = []
    monkeypatch.setattr(
        jobs.run_job_task, "apply_async", lambda args, **opts: messages.append((args[1], opts))
    )
    return messages


def _server(name: str = "gpu1", *, require_local_worker: bool = False) -> servers.Server:
    return servers.Server(
        name=name, grpc_url="gpu1-host:8001", http_url="gpu1-host:8000",
        metrics_url="http://gpu1-host:8002/metrics", repository=servers.default().repository,
        require_local_worker=require_local_worker,
    )  # fmt: skip


def _row(tmp_path, *, require_local_worker: bool) -> servers.Server:
    TritonServer.objects.create(
        name="gpu1", grpc_url="127.0.0.1:9", http_url="127.0.0.1:9",
        metrics_url="http://127.0.0.1:9/metrics", repository=str(tmp_path),
        require_local_worker=require_local_worker,
    )  # fmt: skip
    return servers.get("gpu1")


def _sweep(server: servers.Server) -> Sweep:
    params = SweepParams(model=MODEL, start=1, end=2, measurement_window_ms=300, max_windows=3)
    return sweeps.create_sweep(server, params, enqueue=False)


# --- the rule -------------------------------------------------------------------------------


def test_a_server_whose_queue_a_worker_consumes_gets_its_jobs_there(workers):
    workers.update({"triton.gpu1": (WORKER,), "celery": ("celery@web-host",)})
    route = jobs.queue_for(_server())
    assert (route.queue, route.workers, route.waiting) == ("triton.gpu1", (WORKER,), False)
    assert route.note == f"sent to triton.gpu1, consumed by {WORKER}"


def test_without_a_worker_on_its_queue_a_job_goes_to_the_default_queue_and_says_so(workers):
    workers.update({"celery": ("celery@web-host",)})
    route = jobs.queue_for(_server())
    assert (route.queue, route.workers) == ("celery", ("celery@web-host",))
    assert route.note == (
        "no worker consumes triton.gpu1: sent to the default queue, so the load comes from "
        "the dashboard's worker host"
    )


WEB_WORKER = ("celery@web-host",)


def _at(name: str, grpc_url: str) -> servers.Server:
    return servers.Server(
        name=name, grpc_url=grpc_url, http_url=grpc_url, metrics_url=f"http://{grpc_url}/m",
        repository=servers.default().repository,
    )  # fmt: skip


def test_a_server_beside_the_dashboards_workers_goes_to_the_default_queue_without_a_warning(
    workers,
):
    """`make run`: nothing consumes triton.default or triton.local-2, and nothing needs to:
    the default queue's worker runs on their host (the dashboard's own Triton; a loopback
    address is reachable only from its own host)."""
    workers.update({"celery": WEB_WORKER})
    beside = [servers.default(), _at("local-2", "127.0.0.1:20001")]
    beside += [_at("local-3", "localhost:20002"), _at("local-4", "[::1]:20003")]
    for server in beside:
        route = jobs.queue_for(server)
        assert (route.queue, route.workers, route.waiting) == ("celery", WEB_WORKER, False)
        assert route.note == "sent to the default queue celery, consumed by celery@web-host"
        assert "no worker consumes" not in route.note
    # A server on another host still says where its load comes from.
    remote = jobs.queue_for(_at("gpu2", "10.0.0.12:8001"))
    assert remote.note.startswith("no worker consumes triton.gpu2: sent to the default queue")


def test_beside_the_workers_it_still_says_so_when_it_matters(workers, settings):
    """No worker on the default queue either, or the server requires its own worker."""
    route = jobs.queue_for(servers.default())
    assert route.queue == "celery" and route.note == (
        "no worker consumes triton.default: sent to the default queue, so the load comes from "
        "the dashboard's worker host (no worker consumes celery either: the job waits for one)"
    )
    workers.update({"celery": ("celery@web-host",)})
    queues.forget()
    settings.TRITON_REQUIRE_LOCAL_WORKER = True
    held = jobs.queue_for(servers.default())
    assert held.waiting and held.note.startswith("waiting for a worker on queue triton.default")


def test_a_server_that_requires_its_own_worker_is_never_sent_elsewhere(workers):
    workers.update({"celery": ("celery@web-host",)})
    route = jobs.queue_for(_server(require_local_worker=True))
    assert route.waiting and route.queue == ""
    assert route.note == (
        f"waiting for a worker on queue triton.gpu1: none is consuming it; start one on the "
        f"GPU host with `{START}`"
    )


def test_an_inspect_that_fails_counts_as_no_worker_with_the_reason(monkeypatch):
    def refuse():  # type: ignore[no-untyped-def]
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379")

    monkeypatch.setattr(queues, "ask_workers", refuse)
    queues.forget()
    try:
        route = jobs.queue_for(_server())
        held = jobs.queue_for(_server(require_local_worker=True))
    finally:
        queues.forget()
    assert route.queue == "celery"
    assert "could not be asked" in route.note and "Error 111" in route.note
    assert held.waiting and "could not be asked" in held.note and START in held.note


def test_an_inspect_that_never_answers_is_given_up_on_and_asked_once(monkeypatch):
    """The web process never hangs on the workers: the caller waits at most WAIT_S, and a
    question still pending is not asked again."""
    release = threading.Event()
    asked: list[int] = []

    def hang():  # type: ignore[no-untyped-def]
        asked.append(1)
        release.wait(60)
        return {}

    monkeypatch.setattr(queues, "ask_workers", hang)
    monkeypatch.setattr(queues, "WAIT_S", 0.2)
    monkeypatch.setattr(queues, "FRESH_S", 0.0)  # every call would ask again, if it could
    queues.forget()
    try:
        first = jobs.queue_for(_server())
        second = jobs.queue_for(_server(require_local_worker=True))
    finally:
        release.set()
        queues.forget()
    assert first.queue == "celery" and "did not answer within 0.2 s" in first.note
    assert second.waiting and "did not answer" in second.note
    assert asked == [1]


# --- what a job records, and the watchdog ---------------------------------------------------


def test_dispatch_sends_the_task_to_the_servers_queue_and_the_job_says_where(
    tmp_path, workers, sent
):
    workers.update({"triton.gpu1": (WORKER,)})
    job = _sweep(_row(tmp_path, require_local_worker=False))
    assert jobs.dispatch(job.pk)
    assert [(pk, opts["queue"]) for pk, opts in sent] == [(job.pk, "triton.gpu1")]
    job.refresh_from_db()
    assert (job.queue, job.waiting_for_worker) == ("triton.gpu1", False)
    assert job.routing == f"sent to triton.gpu1, consumed by {WORKER}"
    placement = sweep_read.sweep_json(job)["placement"]
    assert placement["queue"] == "triton.gpu1" and placement["server_queue"] == "triton.gpu1"


def test_a_held_job_waits_visibly_is_routed_by_the_watchdog_when_a_worker_appears(
    tmp_path, workers, sent, django_user_model, client
):
    job = _sweep(_row(tmp_path, require_local_worker=True))
    assert not jobs.dispatch(job.pk)
    assert sent == []
    job.refresh_from_db()
    assert job.state == "queued" and job.waiting_for_worker and job.dispatched_at is None
    assert job.routing.startswith("waiting for a worker on queue triton.gpu1: none is")

    user = django_user_model.objects.create_user("vera", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    page = client.get(f"/sweeps/{job.pk}/").content.decode()
    assert START in page and 'id="job-routing"' in page
    listing = client.get("/sweeps/").content.decode()
    assert 'data-server="gpu1"' in listing and START in listing

    watchdog.check()  # still no worker: still held, nothing sent
    assert sent == [] and Sweep.objects.get(pk=job.pk).waiting_for_worker

    workers.update({"triton.gpu1": (WORKER,)})
    queues.forget()
    watchdog.check()
    assert [(pk, opts["queue"]) for pk, opts in sent] == [(job.pk, "triton.gpu1")]
    job.refresh_from_db()
    assert not job.waiting_for_worker and job.queue == "triton.gpu1"


def test_a_held_job_can_be_cancelled(tmp_path, workers, sent):
    job = _sweep(_row(tmp_path, require_local_worker=True))
    jobs.dispatch(job.pk)
    assert jobs.cancel(job.pk) == "Cancelled before it started."
    assert Sweep.objects.get(pk=job.pk).state == "cancelled"
    watchdog.check()
    assert sent == []


def test_the_claim_records_the_worker_its_host_and_the_queue_it_came_from(tmp_path, workers):
    job = _sweep(_row(tmp_path, require_local_worker=False))
    request = SimpleNamespace(hostname=WORKER, delivery_info={"routing_key": "triton.gpu1"})
    where = queues.claimed_by(request)
    assert jobs.claim(job.pk, where)
    job.refresh_from_db()
    assert (job.worker, job.queue) == (WORKER, "triton.gpu1")
    assert job.worker_host == where["worker_host"] and job.worker_host
    assert job.state == "running"
    jobs.finish(job.pk, jobs.Outcome("interrupted", "worker died"))
    resumed = jobs.resume(job.pk)  # queued again: no worker has claimed this attempt yet
    assert (resumed.worker, resumed.worker_host) == ("", "")


def test_require_local_worker_is_checked_with_the_other_server_fields():
    assert check({"require_local_worker": "yes"}) == {"require_local_worker": True}
    assert check({"require_local_worker": False}) == {"require_local_worker": False}
    with pytest.raises(InvalidServer) as refused:
        check({"require_local_worker": "perhaps"})
    assert set(refused.value.errors) == {"require_local_worker"}
