"""The per-step breakdown against the real tritonserver: a sweep of the ensemble and of the
BLS demo model stores each composing model's figures per level and window (both engines),
the ensemble's breakdown is its steps' added up (perf_analyzer's rule), and the CSV, the
pages and the verdict show them."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command

from profiler_app import export, measure
from profiler_app.engine.perf_analyzer_csv import CSV_COLUMNS, STEP_CSV_COLUMNS
from profiler_app.models import Sweep, SweepPoint
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODELS = ("add_sub", "add_batched", "ensemble_two_step", "bls_caller")  # steps load first
QUICK = ["--concurrency-range", "1:2:1", "--measurement-interval", "300",
         "--stability-percentage", "100", "--max-trials", "3"]  # fmt: skip
# A step counts a request when it finished its part, the model when it finished the whole:
# over the same statistics reads (one gather per boundary) the counts differ by the
# requests in flight at the two boundaries (each slot's request, and one it may start
# while the statistics are read), never more. (The client's own count is not compared:
# the statistics are read after the window is cut, later on a busy machine.)
IN_FLIGHT = 4


@pytest.fixture(scope="module")
def loaded(triton) -> Iterator[TritonClient]:
    control = TritonClient(triton.grpc_url, triton.metrics_url)
    before = {m for m in MODELS if any(s.state == "READY" for s in control.model_states(m))}
    for name in MODELS:
        control.load(name)
    yield control
    for name in reversed(MODELS):
        if name not in before:
            control.unload(name)


# perf_analyzer prints the steps of a level that settled only: loose on purpose (a busy
# two-core machine can keep a level from settling at 100%), as test_engine_perf_analyzer is.
SETTLE = ["--stability-percentage", "1000", "--max-trials", "5"]


def _run(model: str, engine: str) -> Sweep:
    flags = [*QUICK, *SETTLE] if engine == "perf_analyzer" else QUICK
    call_command(
        "perf_sweep", model, "--engine", engine, *flags,
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    sweep = Sweep.objects.latest("pk")
    assert sweep.state == "succeeded", sweep.error
    return sweep


def _rows(sweep: Sweep, windows: bool = False) -> list[SweepPoint]:
    points = SweepPoint.objects.filter(sweep=sweep).order_by("level", "window")
    return [p for p in points if (p.window >= 0) == windows]


def _assert_sums(row: SweepPoint | measure.Level, steps: list[dict]) -> None:
    """perf_analyzer's rule: an ensemble's queue and compute are its steps' sums."""
    assert row.queue_us == pytest.approx(sum(s["queue_us"] for s in steps), abs=1e-6)
    for key in measure.COMPUTE_FIELDS:
        assert getattr(row, key) == pytest.approx(sum(s[key] for s in steps), abs=1e-6)


def test_the_builtin_engine_breaks_an_ensemble_down_by_step(loaded, redis_db, client) -> None:
    sweep = _run("ensemble_two_step", "builtin")
    levels = _rows(sweep)
    assert [p.level for p in levels] == [1, 2]
    for level in levels:
        steps = level.extra["steps"]
        assert [(s["model"], s["version"]) for s in steps] == [
            ("add_sub", "1"),
            ("add_batched", "1"),
        ]
        for step in steps:
            assert set(step) == set(measure.STEP_FIELDS)
            # Every request ran each step once, up to the requests in flight at the edges.
            assert abs(step["request_count"] - level.extra["server_requests"]) <= (
                IN_FLIGHT * level.level
            ), step
            assert step["compute_infer_us"] > 0 and step["avg_batch_size"] >= 1
        _assert_sums(level, steps)
        assert sum(s["compute_share"] for s in steps) == pytest.approx(1.0)
    windows = _rows(sweep, windows=True)
    assert windows and all(len(w.extra["steps"]) == 2 for w in windows)
    for window in windows:
        _assert_sums(window, window.extra["steps"])

    rows = list(csv.DictReader(io.StringIO(export.to_csv(sweep))))
    step_columns = [f"{m} {c}" for m in ("add_sub", "add_batched") for c in STEP_CSV_COLUMNS]
    assert list(rows[0]) == [*CSV_COLUMNS, *step_columns, *export.INTERVAL_CSV_COLUMNS]
    assert all(float(row[c]) > 0 for row in rows for c in step_columns if "Queue" not in c)
    assert export.to_json(sweep)["points"][0]["extra"]["steps"]
    # The step sentence names the knee or the last settled level (a busy machine may settle
    # none, and the verdict then says so).
    settled = any(level.stable for level in levels)
    if settled:
        assert "% of compute at concurrency" in sweep.summary["recommendation"]
    else:  # answered from what was measured (the step share may come with it)
        assert "read from what was measured" in sweep.summary["recommendation"]


def test_the_builtin_engine_counts_a_bls_models_calls(loaded, redis_db, client) -> None:
    sweep = _run("bls_caller", "builtin")
    for level in _rows(sweep):
        (step,) = level.extra["steps"]
        assert (step["model"], step["version"]) == ("add_sub", "1")
        # bls_caller calls add_sub once per request.
        assert abs(step["request_count"] - level.extra["server_requests"]) <= (
            IN_FLIGHT * level.level
        ), step
        assert step["compute_share"] == 1.0
        # Its own breakdown: its calls run inside its compute infer.
        assert level.compute_infer_us > step["compute_infer_us"]
    user = User.objects.create_user("steps", password="pw-steps-1")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert '<section class="card" id="steps-card" >' in page  # shown, not hidden
    assert 'data-step="add_sub"' in page and "js/sweep_steps" in page
    form = client.get("/models/bls_caller/benchmark/").content.decode()
    assert "per-step breakdown of the calls" in form and "add_sub" in form
    ensemble_form = client.get("/models/ensemble_two_step/benchmark/").content.decode()
    assert "shows a per-step breakdown" in ensemble_form


def _settled(level: SweepPoint) -> bool:
    """perf_analyzer reports a level's server figures and steps once it settled only: a level
    that did not even at 1000 % (a busy machine) must be stored as such, with no steps made
    up, and is not read as settled."""
    if level.stable is False:
        assert "steps" not in level.extra, level.extra
        return False
    return True


def test_perf_analyzer_stores_an_ensembles_steps(loaded, redis_db) -> None:
    sweep = _run("ensemble_two_step", "perf_analyzer")
    for level in filter(_settled, _rows(sweep)):
        steps = level.extra["steps"]
        assert [s["model"] for s in steps] == ["add_sub", "add_batched"]
        assert all(s["request_count"] > 0 and s["compute_infer_us"] > 0 for s in steps)
        _assert_sums(level, steps)  # not add_batched's own figures
        assert level.queue_us > steps[1]["queue_us"]


def test_perf_analyzer_is_told_a_bls_models_calls(loaded, redis_db) -> None:
    sweep = _run("bls_caller", "perf_analyzer")
    assert "--bls-composing-models add_sub" in sweep.command
    for level in filter(_settled, _rows(sweep)):
        (step,) = level.extra["steps"]
        assert step["model"] == "add_sub" and step["request_count"] > 0
        # bls_caller's own breakdown, from perf_analyzer's CSV: its calls run inside it.
        assert level.compute_infer_us is not None
        assert level.compute_infer_us > step["compute_infer_us"]
