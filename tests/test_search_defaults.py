"""Find best config's defaults: counts up to the server's size, budget and concurrency from a
probe of the current config, and a quick mode that explores before it stops."""

from __future__ import annotations

import pytest

from profiler_app import sweeps
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from profiler_app.search import defaults, strategies
from profiler_app.search.forms import SearchForm
from profiler_app.search.objective import Constraints, Level, score
from profiler_app.search.space import Knobs, Space
from registry import servers

CURRENT = Knobs(1, "KIND_CPU", 32, True, 200, ())


def test_instance_counts_go_up_to_the_servers_cpu_or_gpu_count():
    assert defaults.count_values(6) == [1, 2, 4, 6]
    assert defaults.count_values(16) == [1, 2, 4, 8, 16]
    assert defaults.count_values(1) == [1]
    local = defaults.Capacity(cpus=6, gpus=0)
    assert local.max_count("KIND_CPU", current=1) == 6
    remote = defaults.Capacity(cpus=None, gpus=0)  # Triton exports no CPU count
    assert remote.max_count("KIND_CPU", current=3) == 4
    one_gpu = defaults.Capacity(cpus=None, gpus=1)
    assert one_gpu.max_count("KIND_GPU", current=1) == 2  # a count is per GPU: at least 2
    assert defaults.Capacity(cpus=None, gpus=4).max_count("KIND_GPU", current=1) == 4
    initial = SearchForm.initial_for(CURRENT, False, local)
    assert initial["counts"] == "1,2,4,6" and "latency_budget" not in initial


def test_a_local_triton_is_recognised_by_its_address():
    assert defaults.triton_is_local("127.0.0.1:8001") and defaults.triton_is_local("[::1]:8001")
    assert defaults._host("triton.example.com:8001") == "triton.example.com"
    assert not defaults.triton_is_local("triton.example.com:8001")


def test_the_probe_sets_the_budget_to_twice_the_p95_at_its_knee_and_spans_the_concurrency():
    # Settled levels flatten after 4 (p95 1.23 ms there); level 6 did not settle.
    assert defaults.knee_of([(1, 1000, 900), (2, 1900, 950), (4, 3400, 1230), (8, 3500, 2600)]) == (
        4,
        1230,
    )
    assert defaults.round_up(2 * 1.23) == 2.5 and defaults.round_up(2 * 12.31) == 25
    assert defaults.range_around(4) == "2:8:2" and defaults.range_around(1) == "1:2:1"
    assert defaults.range_around(3) == "1:6:1"
    suggestion = defaults.Suggestion(7, 4, 1.23, 2.5, "2:8:2", "p95")
    initial = SearchForm.initial_for(CURRENT, False, defaults.Capacity(2, 0), suggestion)
    assert initial["latency_budget"] == 2.5 and initial["concurrency_range"] == "2:8:2"
    assert "twice that" in suggestion.sentence() and "#7" in suggestion.sentence()


@pytest.mark.django_db
def test_the_latest_sweep_of_the_current_config_is_the_probe_and_only_settled_levels_count():
    params = SweepParams(model="busy_compute", start=1, end=7)
    old = sweeps.create_sweep(servers.default(), params, enqueue=False)
    Sweep.objects.filter(pk=old.pk).update(config_sha256="abc", state="succeeded")
    # Believed, unstable level 5 (flat) would put the knee at 4; the settled ones put it at 6.
    for level, tput, p95, stable in [
        (1, 1000, 900, True), (2, 1900, 950, True), (3, 2700, 1000, True),
        (4, 3400, 1230, True), (5, 3420, 1300, False), (6, 4200, 1400, True),
        (7, 4250, 2600, True),
    ]:  # fmt: skip
        SweepPoint.objects.create(
            sweep=old, level=level, window=-1, requests=100, throughput=tput, p95_us=p95,
            stable=stable,
        )  # fmt: skip
    found = defaults.suggestion(servers.default(), "busy_compute", "abc")
    assert found is not None and found.sweep_id == old.pk
    assert found.knee == 6 and found.budget_ms == 2.8 and found.concurrency_range == "3:12:3"
    assert defaults.suggestion(servers.default(), "busy_compute", "another-config") is None


def _finished(params: SweepParams, sha: str, levels: list[tuple[float, float, float, bool]]):
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    Sweep.objects.filter(pk=sweep.pk).update(config_sha256=sha, state="succeeded")
    for level, tput, p95, stable in levels:
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=-1, requests=100, throughput=tput, p95_us=p95,
            stable=stable,
        )  # fmt: skip
    return sweep


@pytest.mark.django_db
def test_a_sweep_of_the_current_config_whose_levels_never_settled_still_suggests():
    # A Benchmark on a busy machine: every level measured, none settled. It is a sweep of
    # this config all the same, and its knee says where to search (said to be rough).
    unsettled = [(1, 1000, 900, False), (2, 1900, 950, False), (4, 1950, 1230, False)]
    old = _finished(SweepParams(model="busy_compute", start=1, end=4), "abc", unsettled)
    # A newer request-rate sweep of it, and one that measured nothing, do not hide it.
    rate = SweepParams(model="busy_compute", mode="request_rate", start=100, end=200, step=100)
    _finished(rate, "abc", [(100, 100, 900, True)])
    _finished(SweepParams(model="busy_compute", start=1, end=2), "abc", [])
    found = defaults.suggestion(servers.default(), "busy_compute", "abc")
    assert found is not None and found.sweep_id == old.pk and found.knee == 2
    assert not found.settled and "did not settle" in found.sentence()
    assert found.sentence().startswith(f"From sweep #{old.pk} of the current config")
    # None of another config: said so; only unusable ones of this config: said which.
    none = defaults.without_suggestion(servers.default(), "busy_compute", "another-config")
    assert none.startswith("No sweep of the current config yet")
    Sweep.objects.filter(pk=old.pk).delete()
    assert defaults.suggestion(servers.default(), "busy_compute", "abc") is None
    told = defaults.without_suggestion(servers.default(), "busy_compute", "abc")
    assert "No sweep of the current config yet" not in told
    assert told.startswith("The sweeps of the current config (#")


def test_without_a_probe_the_budget_comes_from_the_current_configs_own_levels():
    levels = [
        {"concurrency": 2, "throughput": 1900.0, "p95_us": 1000.0, "stable": True},
        {"concurrency": 4, "throughput": 3400.0, "p95_us": 1500.0, "stable": True},
        {"concurrency": 8, "throughput": 3450.0, "p95_us": 3000.0, "stable": True},
    ]
    assert defaults.auto_budget(levels, "p95_us") == (3.0, 4)
    assert defaults.auto_budget([], "p95_us") is None


def test_quick_mode_tries_one_more_instance_and_one_batching_change_before_it_stops():
    space = Space(counts=(1, 2, 3), max_batch_sizes=(32,), batching_off=True, delays_us=(200, 1000))
    start = Knobs(1, "KIND_CPU", 32, False)
    dims = space.dimensions(start)
    asked: list[Knobs] = []

    def flat(k: Knobs):  # nothing is better: a climb alone would stop at its budget
        asked.append(k)
        return score([Level(4, 1000.0, 1000.0)], Constraints(), "max_throughput")

    strategies.hill_climb(dims, start, flat, max_runs=1)
    assert any(k.count == 2 and not k.batching for k in asked), "one more instance"
    assert any(k.count == 1 and k.batching for k in asked), "one batching change"
    assert strategies.quick_runs(dims, start, max_runs=1) >= len(asked)
