"""Load from several hosts through real Celery workers against the real Triton: a sweep
with two load hosts completes and names both with their shares; one that asks for three
hosts of two workers fails within the join bound and leaves nothing behind.

The two workers here consume a queue of their own: the job's task is sent there, and its
agents must follow it (the coordinator reads the queue from its task's delivery info).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from dashboard.celery_app import app
from devstack import services as svc
from profiler_app import sweep_plan, sweeps
from profiler_app.jobs import run_job_task
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from registry import servers
from triton_api.client import TritonClient

from .conftest import SERVICE_START_S, start_celery_worker, wait_for, wait_for_job

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUEUE = "load-hosts-test"
JOIN_S = 10  # the workers' LOAD_AGENT_JOIN_TIMEOUT_S
BOUND_S = 240  # upper bounds only: a broken run must not hang


@pytest.fixture(scope="module")
def two_workers(service_env, tmp_path_factory):
    """Two real Celery workers on QUEUE: the coordinator and one load agent."""
    env = {**service_env, "LOAD_AGENT_JOIN_TIMEOUT_S": str(JOIN_S)}
    logs = tmp_path_factory.mktemp("load-hosts")
    names = [f"loadhost{i}-{os.getpid()}@localhost" for i in (1, 2)]
    procs = [
        start_celery_worker(env, logs / f"{name}.log", name, "-Q", QUEUE, wait=False)
        for name in names
    ]
    try:
        wait_for(
            lambda: {n for r in app.control.ping(timeout=0.5) or [] for n in r} >= set(names),
            SERVICE_START_S,
            "both load-host workers",
        )
        yield dict(zip(names, procs, strict=True))
    finally:
        for proc in procs:
            svc.stop(proc)


@pytest.fixture()
def add_batched(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    yield "add_batched"
    client.unload("add_batched")


def _start(**overrides) -> Sweep:
    base = dict(
        model="add_batched", start=2, end=4, step=2, measurement_window_ms=300,
        stability_percentage=100, max_windows=3,
    )  # fmt: skip
    params = SweepParams(**{**base, **overrides})
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    # Sent to the workers' own queue (the watchdog leaves a dispatched job alone).
    Sweep.objects.filter(pk=sweep.pk).update(dispatched_at=timezone.now())
    soft, hard = sweep_plan.time_limits(params)
    run_job_task.apply_async(
        args=["sweep", sweep.pk], queue=QUEUE, soft_time_limit=soft, time_limit=hard
    )
    return sweep


def _finished(sweep: Sweep) -> bool:
    return sweep.finished_at is not None and sweep.state != "running"


def _descendants(pid: int) -> list[str]:
    """The command lines of every process below `pid`."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            found.append(
                (Path("/proc") / str(child) / "cmdline").read_bytes().decode(errors="replace")
            )
        except OSError:
            continue
        todo += parents.get(child, [])
    return found


def _nothing_left(pk: int, workers: dict) -> bool:
    """No key of the sweep's load hosts, no task on the queue or running in a worker, no
    load worker process."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    if list(client.scan_iter(f"loadgen:{pk}:*")) or client.llen(QUEUE):
        return False
    active = app.control.inspect(destination=list(workers), timeout=1.0).active() or {}
    if any(tasks for tasks in active.values()):
        return False
    return not any(
        "load_workers" in line for proc in workers.values() for line in _descendants(proc.pid)
    )


def test_two_load_hosts_complete_and_each_level_names_both_with_its_share(add_batched, two_workers):
    sweep = _start(load_hosts=2)
    done = wait_for_job(sweep.pk, _finished, BOUND_S, "the sweep to end")
    assert done.state == "succeeded", done.error
    levels = list(SweepPoint.objects.filter(sweep=done, window=-1).order_by("level"))
    assert [p.level for p in levels] == [2.0, 4.0]
    for point in [*levels, *SweepPoint.objects.filter(sweep=done, window__gte=0)]:
        hosts = point.extra["load_hosts"]
        assert {h["host"] for h in hosts} == set(two_workers), hosts
        assert all(h["requests"] > 0 for h in hosts), hosts
        assert sum(h["requests"] for h in hosts) == point.requests > 0
    window = SweepPoint.objects.filter(sweep=done, window__gte=0).first()
    assert window is not None and window.extra["load_collect_ms"] > 0
    assert window.extra["load_local_ms"] > 0 and window.extra["load_merge_ms"] > 0
    wait_for(lambda: _nothing_left(done.pk, two_workers), BOUND_S, "the agents to be gone")


def test_three_load_hosts_of_two_workers_fail_within_the_join_bound_leaving_nothing(
    add_batched, two_workers
):
    sweep = _start(load_hosts=3)
    done = wait_for_job(sweep.pk, _finished, BOUND_S, "the sweep to end")
    assert done.state == "failed"
    assert "only 1 of the 2 load agents joined within 10 s (2 of 3 load hosts)" in done.error
    assert f"start another worker on queue {QUEUE}" in done.error
    assert done.started_at is not None and done.finished_at is not None
    assert (done.finished_at - done.started_at).total_seconds() < JOIN_S + 60  # a bound
    assert not SweepPoint.objects.filter(sweep=done).exists()
    wait_for(lambda: _nothing_left(done.pk, two_workers), BOUND_S, "the agents to be gone")
