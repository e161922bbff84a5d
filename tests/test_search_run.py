"""Config searches against the real Triton: ranking, restore on success/cancel/failure,
resume without re-measuring, and the worker path."""

from __future__ import annotations

import threading
import time

import pytest

from profiler_app import jobs, sweeps
from profiler_app.models import Search, SearchCandidate, Sweep
from profiler_app.params import SweepParams
from profiler_app.search import creating, runner
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Space
from registry import servers
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODEL = "busy_compute"


@pytest.fixture()
def client(triton) -> TritonClient:
    return TritonClient(triton.grpc_url, triton.metrics_url)


@pytest.fixture()
def busy(client, redis_db):
    client.load(MODEL)
    yield MODEL
    client.unload(MODEL)


def _served(client: TritonClient) -> tuple[int, int, list[int]]:
    config = client.model_config(MODEL)
    dyn = config.get("dynamic_batching", {})
    return (
        int(config["instance_group"][0]["count"]),
        int(dyn.get("max_queue_delay_microseconds", -1)),
        [int(v) for v in dyn.get("preferred_batch_size", [])],
    )


# As Triton serves the saved config (it fills preferred_batch_size with max_batch_size).
ORIGINAL = (1, 200, [32])


def _request(space: Space, **kw) -> creating.SearchRequest:
    base = {
        "model": MODEL,
        "space": space,
        "measure": SweepParams(
            model=MODEL,
            start=2,
            end=2,
            measurement_window_ms=300,
            stability_percentage=100,
            max_windows=3,
        ),
        "constraints": Constraints(latency_budget_ms=1000, percentile=95),
        "server": servers.default(),
        "mode": "grid",
    }
    return creating.SearchRequest(**{**base, **kw})


def _run_here(search: Search) -> str:
    assert jobs.claim(search.sweep_id)
    return jobs.execute(search.sweep_id)


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_grid_over_one_and_two_instances_completes_ranks_and_restores(busy, client):
    search = creating.create_search(_request(Space(counts=(1, 2))), enqueue=False)
    assert search.sweep.state == "queued" and search.sweep.levels_total == 2
    assert _run_here(search) == "succeeded"
    search.refresh_from_db()
    candidates = list(search.candidates.all())
    assert [c.key for c in candidates] == ["1xCPU/mbs32/dyn200p", "2xCPU/mbs32/dyn200p"]
    assert all(c.state == "measured" and c.levels[0]["throughput"] > 0 for c in candidates)
    assert candidates[0].baseline and not candidates[1].baseline
    rows = search.result["rows"]
    assert [r["rank"] for r in rows] == [1, 2]
    assert rows[0]["throughput"] >= rows[1]["throughput"], "ranked by throughput"
    assert search.result["best_key"] == rows[0]["key"]
    assert search.result["front"], "at least one point on the Pareto front"
    assert rows[1]["key"] in {r["key"] for r in rows}
    assert _served(client) == ORIGINAL
    assert not search.restore_pending and "serves again" in search.restore_message
    assert not Sweep.objects.filter(state="running").exists()
    assert search.sweep.summary["recommendation"] == search.result["recommendation"]


def test_a_candidate_triton_rejects_is_recorded_and_the_original_config_restored(busy, client):
    # preferred_batch_size 64 above max_batch_size 32: Triton refuses the override.
    space = Space(counts=(2,), delays_us=(100,), preferred=((64,),))
    search = creating.create_search(_request(space), enqueue=False)
    assert _run_here(search) == "succeeded"
    failed = SearchCandidate.objects.get(search=search, key="2xCPU/mbs32/dyn100p64")
    assert failed.state == "failed" and failed.levels == []
    assert "failed to poll from model repository" in failed.error
    assert "preferred" in failed.error, "the validator names the reason Triton does not give"
    assert SearchCandidate.objects.get(search=search, baseline=True).state == "measured"
    assert _served(client) == ORIGINAL
    rows = Search.objects.get(pk=search.pk).result["rows"]
    assert rows[-1]["key"] == failed.key and rows[-1]["state"] == "failed"


def test_a_search_that_fails_restores_the_original_config(busy, client, monkeypatch):
    calls = []

    def broken(self, candidate):  # the second candidate's measurement blows up
        calls.append(candidate.key)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return original(self, candidate)

    original = runner._Run._measure
    monkeypatch.setattr(runner._Run, "_measure", broken)
    search = creating.create_search(_request(Space(counts=(1, 3))), enqueue=False)
    assert _run_here(search) == "failed"
    carrier = Sweep.objects.get(pk=search.sweep_id)
    assert "unexpected error: boom" in carrier.error
    assert _served(client) == ORIGINAL, "the 3-instance candidate was loaded, then undone"


def test_cancel_stops_the_search_restores_and_resume_skips_measured_candidates(
    busy, client, monkeypatch
):
    request = _request(
        Space(counts=(1, 2, 3)),
        measure=SweepParams(
            model=MODEL, start=2, end=2, measurement_window_ms=300,
            stability_percentage=0.001, max_windows=6,
        ),
    )  # fmt: skip
    search = creating.create_search(request, enqueue=False)
    thread = threading.Thread(target=_run_here, args=(search,))
    thread.start()
    try:
        # Generous bounds: each candidate reloads the model on Triton, which takes long on a
        # loaded machine. They only keep a broken run from hanging the suite.
        _wait_for(
            lambda: SearchCandidate.objects.filter(search=search, state="measured").exists(),
            300,
            "the first candidate",
        )
        _wait_for(
            lambda: SearchCandidate.objects.filter(search=search, state="measuring").exists(),
            300,
            "the second candidate to start",
        )
        assert "within one measurement window" in runner.cancel(search)
    finally:
        thread.join(600)
    # The cancelled run has ended (restored the config) before anything is asserted about it.
    assert not thread.is_alive(), "the cancelled search did not stop"
    assert Sweep.objects.get(pk=search.sweep_id).state == "cancelled"
    assert _served(client) == ORIGINAL
    first = SearchCandidate.objects.get(search=search, state="measured")
    measured_at = first.measured_at
    assert SearchCandidate.objects.filter(search=search, state="measuring").count() == 1

    # This test runs the job itself: the session's Celery worker must not take it first.
    monkeypatch.setattr(jobs, "dispatch", lambda job_id: True)
    runner.resume(search)
    assert _run_here(Search.objects.get(pk=search.pk)) == "succeeded"
    first.refresh_from_db()
    assert first.measured_at == measured_at, "a measured candidate is not measured again"
    assert SearchCandidate.objects.filter(search=search, state="measured").count() == 3
    assert _served(client) == ORIGINAL


def test_a_search_of_a_model_that_was_not_loaded_unloads_it_again(client, redis_db, triton):
    client.unload(MODEL)
    search = creating.create_search(_request(Space(counts=(1,))), enqueue=False)
    assert not search.was_loaded
    assert _run_here(search) == "succeeded"
    assert not any(s.state == "READY" for s in client.model_states(MODEL))


def test_through_the_worker_the_search_runs_as_one_job_of_the_sweep_queue(
    busy, client, celery_worker
):
    sweep = sweeps.create_sweep(servers.default(),
        SweepParams(model=MODEL, start=1, end=1, measurement_window_ms=300,
                    stability_percentage=100, max_windows=3)
    )  # fmt: skip
    search = creating.create_search(_request(Space(counts=(1, 2))))
    # Behind the sweep alone: 2 while the worker has not claimed the sweep yet, 1 once it
    # runs, None once the search runs too (how far the worker got is not this test's point).
    assert jobs.queue_position(Sweep.objects.get(pk=search.sweep_id)) in (2, 1, None)
    _wait_for(
        lambda: Sweep.objects.get(pk=search.sweep_id).state in Sweep.FINISHED, 600, "the search"
    )
    carrier = Sweep.objects.get(pk=search.sweep_id)
    assert carrier.state == "succeeded", carrier.error
    assert carrier.started_at >= Sweep.objects.get(pk=sweep.pk).finished_at, "after the sweep"
    assert Search.objects.get(pk=search.pk).result["best_key"]
    assert _served(client) == ORIGINAL
