"""The sweep queue without Triton: claiming a server, queue positions, cancel, the watchdog."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle
from profiler_app import jobs, sweep_plan, sweep_read, sweep_recorder, sweeps, watchdog
from profiler_app.models import Sweep, SweepPoint, SweepSlot
from profiler_app.params import SweepParams
from registry import servers

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_dispatch(monkeypatch, redis_db) -> list[int]:
    """Record the tasks that would be sent instead of sending them."""
    sent: list[int] = []
    monkeypatch.setattr(lifecycle, "dispatch", lambda kind, job_id: sent.append(job_id) or True)
    return sent


def _sweep(model: str = "add_batched", **params) -> Sweep:
    base = {"start": 1, "end": 3, "measurement_window_ms": 500, "max_windows": 3}
    return sweeps.create_sweep(
        servers.default(), SweepParams(model=model, **{**base, **params}), enqueue=False
    )


def test_claiming_a_free_server_makes_the_sweep_running_and_holds_the_slot():
    sweep = _sweep()
    assert jobs.claim(sweep.pk)
    sweep.refresh_from_db()
    assert sweep.state == "running" and sweep.started_at and sweep.heartbeat_at
    assert SweepSlot.objects.get(server=sweep.server).sweep_id == sweep.pk
    assert not jobs.claim(sweep.pk), "a second claim of the same sweep must fail"


def test_a_second_sweep_waits_with_position_one_while_the_server_is_busy(
    no_dispatch, django_capture_on_commit_callbacks
):
    first, second, third = _sweep(), _sweep(), _sweep()
    assert jobs.claim(first.pk)
    assert not jobs.claim(second.pk)
    assert jobs.queue_position(Sweep.objects.get(pk=second.pk)) == 1
    assert jobs.queue_position(Sweep.objects.get(pk=third.pk)) == 2
    assert jobs.queue_position(Sweep.objects.get(pk=first.pk)) is None
    # The third cannot jump the queue even when the server frees up.
    with django_capture_on_commit_callbacks(execute=True):
        jobs.finish(first.pk, jobs.Outcome("succeeded"))
    assert no_dispatch == [second.pk], "the finishing sweep dispatches the head of the queue"
    assert not jobs.claim(third.pk)
    assert jobs.claim(second.pk)


def test_a_sweep_on_another_server_does_not_wait():
    first = _sweep()
    assert jobs.claim(first.pk)
    other = _sweep()
    Sweep.objects.filter(pk=other.pk).update(server="another")  # its queue is empty
    assert jobs.claim(other.pk)
    assert not jobs.claim(_sweep().pk), "the default server's slot is still taken"


def test_finish_only_moves_a_running_sweep_and_always_frees_the_slot():
    sweep = _sweep()
    assert jobs.claim(sweep.pk)
    Sweep.objects.filter(pk=sweep.pk).update(state="interrupted")
    assert jobs.finish(sweep.pk, jobs.Outcome("succeeded")) == "interrupted"
    assert SweepSlot.objects.get(server=sweep.server).sweep_id is None


def test_cancelling_a_queued_sweep_is_immediate_and_a_running_one_is_flagged():
    queued, running = _sweep(), _sweep()
    assert jobs.claim(queued.pk) is True
    # `queued` now runs; make the other one the queued one.
    running, queued = queued, running
    assert "within one measurement window" in jobs.cancel(running.pk)
    assert Sweep.objects.get(pk=running.pk).cancel_requested
    jobs.cancel(queued.pk)
    assert Sweep.objects.get(pk=queued.pk).state == "cancelled"
    with pytest.raises(jobs.JobError):
        jobs.cancel(queued.pk)


def test_the_watchdog_interrupts_a_sweep_whose_heartbeat_is_stale(
    no_dispatch, django_capture_on_commit_callbacks
):
    stale, waiting = _sweep(), _sweep()
    assert jobs.claim(stale.pk)
    Sweep.objects.filter(pk=stale.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=lifecycle.STALE_AFTER_S + 5)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert watchdog.check() == [stale.pk]
    stale.refresh_from_db()
    assert stale.state == "interrupted" and "heartbeat" in stale.error
    assert SweepSlot.objects.get(server=stale.server).sweep_id is None
    assert waiting.pk in no_dispatch, "the next queued sweep is started"


def test_the_watchdog_leaves_a_sweep_with_a_fresh_heartbeat_alone():
    sweep = _sweep()
    assert jobs.claim(sweep.pk)
    assert watchdog.check() == []
    assert Sweep.objects.get(pk=sweep.pk).state == "running"


def test_the_watchdog_redispatches_a_queued_sweep_whose_task_went_missing(no_dispatch):
    sweep = _sweep()
    Sweep.objects.filter(pk=sweep.pk).update(dispatched_at=timezone.now() - timedelta(hours=1))
    watchdog.check()
    assert no_dispatch == [sweep.pk]


def test_resume_requeues_and_keeps_only_complete_levels():
    sweep = _sweep()
    assert jobs.claim(sweep.pk)
    SweepPoint.objects.create(sweep=sweep, level=1, window=0, requests=5, throughput=10)
    SweepPoint.objects.create(sweep=sweep, level=1, window=-1, requests=5, throughput=10)
    SweepPoint.objects.create(sweep=sweep, level=2, window=0, requests=5, throughput=10)
    jobs.finish(sweep.pk, jobs.Outcome("interrupted", "worker died"))
    resumed = jobs.resume(sweep.pk)
    assert resumed.state == "queued" and resumed.error == ""
    assert sorted(sweep_recorder.rounds_done(resumed)) == [1.0]
    with pytest.raises(jobs.JobError):
        jobs.resume(sweep.pk)  # already queued


def test_a_rerun_is_a_new_sweep_with_the_same_parameters():
    sweep = _sweep(batch_size=2)
    copy = sweeps.rerun(sweep.pk)
    assert copy.pk != sweep.pk and copy.params == sweep.params and copy.rerun_of_id == sweep.pk
    assert copy.state == "queued"


def test_time_limits_grow_with_levels_windows_and_window_length():
    short = sweep_plan.time_limits(
        SweepParams(model="m", start=1, end=2, measurement_window_ms=500)
    )
    long = sweep_plan.time_limits(
        SweepParams(model="m", start=1, end=16, measurement_window_ms=5000)
    )
    assert short[0] < long[0] and long[1] > long[0]
    assert long[0] > 16 * 10 * 5  # every level at max windows fits


def test_the_knee_summary_names_the_level_where_throughput_flattens():
    sweep = _sweep(start=1, end=3)
    for level, tput, p95 in [(1, 100, 1000), (2, 190, 1100), (3, 195, 2000)]:
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=-1, requests=10, throughput=tput, p95_us=p95
        )
    summary = sweep_read.knee_summary(sweep)
    assert summary["knee_level"] == 2 and summary["knee_reason"] == "gain"
    assert summary["recommendation"].startswith("Concurrency 2 gives 190 infer/s")
