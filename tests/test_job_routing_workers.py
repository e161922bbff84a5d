"""Jobs routed to real Celery workers on different queues: a sweep on `solo` runs on the
worker consuming triton.solo and its page names that worker and host; a sweep on `default`
runs on the suite's worker (the default queue) and says why; a server that requires its own
worker, without one, holds its job with the reason and lets it be cancelled."""

from __future__ import annotations

import os
import socket

import pytest

from jobs import queues
from profiler_app import jobs, sweeps
from profiler_app.models import Sweep
from profiler_app.params import SweepParams
from registry import servers
from registry.models import TritonServer
from triton_api.client import TritonClient

from .conftest import start_celery_worker, wait_for_job

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SOLO_WORKER = "solo-worker@solo-host"
BOUND_S = 240  # an upper bound for a one-level sweep through a worker, never a target


@pytest.fixture()
def solo_worker(service_env, triton_solo, tmp_path):  # type: ignore[no-untyped-def]
    """A second real worker, consuming triton.solo only (as on solo's GPU host)."""
    from devstack import services as svc

    proc = start_celery_worker(
        service_env, tmp_path / "solo-worker.log", SOLO_WORKER, "-Q", "triton.solo"
    )
    queues.forget()  # this process may remember the workers as they were before it
    yield proc
    svc.stop(proc)
    queues.forget()


def _params(model: str) -> SweepParams:
    return SweepParams(
        model=model, start=1, end=1, measurement_window_ms=300, stability_percentage=100,
        max_windows=3,
    )  # fmt: skip


def _finished(sweep: Sweep) -> bool:
    return bool(sweep.finished)


def test_each_servers_sweep_runs_on_the_worker_of_its_queue_and_names_it(
    triton, triton_solo, solo_server, celery_worker, solo_worker, redis_db, admin_client
):
    solo_client = TritonClient(triton_solo.grpc_url, triton_solo.metrics_url)
    default_client = TritonClient(triton.grpc_url, triton.metrics_url)
    solo_client.load("add_sub")
    default_client.load("add_sub")
    try:
        on_solo = sweeps.create_sweep(solo_server, _params("add_sub"))
        on_default = sweeps.create_sweep(servers.default(), _params("add_sub"))
        solo_done = wait_for_job(on_solo.pk, _finished, BOUND_S, "the sweep on solo")
        default_done = wait_for_job(on_default.pk, _finished, BOUND_S, "the default sweep")
    finally:
        solo_client.unload("add_sub")
        default_client.unload("add_sub")
    host = socket.gethostname()  # both workers run on this machine
    assert solo_done.state == "succeeded", solo_done.error
    assert (solo_done.worker, solo_done.worker_host, solo_done.queue) == (
        SOLO_WORKER, host, "triton.solo",
    )  # fmt: skip
    assert solo_done.routing == f"sent to triton.solo, consumed by {SOLO_WORKER}"
    assert default_done.state == "succeeded", default_done.error
    assert default_done.worker == f"test-{os.getpid()}@localhost"
    assert default_done.queue == "celery" and default_done.worker_host == host
    # The default queue's worker is on the default server's host: no detour to warn about.
    assert default_done.routing.startswith("sent to the default queue celery, consumed by ")
    assert default_done.worker in default_done.routing

    page = admin_client.get(f"/sweeps/{on_solo.pk}/").content.decode()
    placement = page.split('id="job-placement"')[1].split("</dd>")[0]
    assert SOLO_WORKER in placement and host in placement and "triton.solo" in placement
    api = admin_client.get(f"/api/v1/sweeps/{on_solo.pk}/").json()["placement"]
    assert (api["worker"], api["worker_host"], api["queue"]) == (SOLO_WORKER, host, "triton.solo")


def test_a_server_requiring_its_own_worker_holds_the_job_until_cancelled(
    triton_solo, solo_server, celery_worker, redis_db, admin_client
):
    """No worker consumes triton.solo here (the suite's worker serves the default queue)."""
    TritonServer.objects.filter(name="solo").update(require_local_worker=True)
    queues.forget()
    sweep = sweeps.create_sweep(servers.get("solo"), _params("add_sub"))
    held = Sweep.objects.get(pk=sweep.pk)
    assert held.state == "queued" and held.waiting_for_worker and held.queue == ""
    assert held.routing == (
        "waiting for a worker on queue triton.solo: none is consuming it; start one on the GPU "
        "host with `celery -A dashboard worker -Q triton.solo`"
    )
    page = admin_client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "celery -A dashboard worker -Q triton.solo" in page
    response = admin_client.post(f"/sweeps/{sweep.pk}/cancel", HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    assert Sweep.objects.get(pk=sweep.pk).state == "cancelled"
    assert jobs.dispatch(sweep.pk) is False
