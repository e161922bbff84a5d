"""A test run keeps to itself (scripts/test.sh, devstack/runguard.py, tests/run_isolation.py):
`make test` stopped with SIGTERM leaves no process behind, two runs at once each keep their
own queues and both pass, and what an earlier run left is found, named and stopped.

The runs here are real `make test`s of one real-service test each, on a VAR_DIR of their
own (SQLite there; the session's collected static files lent to them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from devstack import runguard

from .conftest import ROOT, wait_for, wait_for_job

pytestmark = pytest.mark.integration

# One sweep through a real Celery worker: it passes only if this run's worker takes its job.
JOB_TEST = "tests/test_sweep_run.py::test_the_csv_download_has_perf_analyzers_columns"
RUN_BOUND_S = 600  # a nested run's whole bound (it starts its own Triton, worker and Redis)


def _var_dir(tmp_path: Path, name: str) -> Path:
    var = tmp_path / name
    var.mkdir()
    (var / "staticfiles").symlink_to(settings.STATIC_ROOT)
    return var


def _make_test(var: Path, *pytest_args: str, database_url: str = "") -> subprocess.Popen:
    """`make test` on its own VAR_DIR, as its own process group (like `timeout`'s child);
    on SQLite there unless ``database_url`` names another database."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "DATABASE_URL", "REDIS_URL", "CELERY_", "TEST_"))
    }
    # VAR_DIR too, so that make and scripts/test.sh are found as processes of this run.
    env.update(TEST_VAR_DIR=str(var), VAR_DIR=str(var), TEST_WORKERS="0")
    if database_url:
        env["DATABASE_URL"] = database_url
    args = " ".join(["--no-checks", "-p", "no:cacheprovider", *pytest_args])
    return subprocess.Popen(
        ["make", "--no-print-directory", "test", f"TEST_ARGS={args}"],
        cwd=ROOT, env=env, stdout=(var / "run.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _of(var: Path) -> list[runguard.Marked]:
    """The processes of the run on `var` (every process it starts inherits its VAR_DIR)."""
    return [p for p in runguard.run_processes() if p.var_dir == str(var)]


def _log(var: Path) -> str:
    """The run's whole log: pytest's own traceback on SIGTERM may follow the guard's line
    by more than a screenful (a tail of 4,000 characters lost it once, under load)."""
    return (var / "run.log").read_text(errors="replace")


def test_sigterm_to_make_test_leaves_no_process_of_the_run_after_10_s(tmp_path: Path) -> None:
    var = _var_dir(tmp_path, "var")
    make = _make_test(var, JOB_TEST)
    try:
        # Mid-run: its tritonserver, its Celery worker and pytest are all up.
        wait_for(
            lambda: {"tritonserver", "celery", "pytest"}
            <= {word for p in _of(var) for word in ("tritonserver", "celery", "pytest")
                if word in p.command},
            RUN_BOUND_S, f"the run's Triton, worker and pytest (log: {var / 'run.log'})",
        )  # fmt: skip
        os.kill(make.pid, signal.SIGTERM)  # make alone, as `timeout` or a CI limit does
        deadline = time.monotonic() + 10
        while _of(var) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [p.describe() for p in _of(var)]
        assert not alive, f"still alive 10 s after SIGTERM to make: {alive}\n{_log(var)}"
        assert make.wait(10) != 0
        assert "stopping this test run" in _log(var), _log(var)[-4000:]
    finally:
        runguard.stop(_of(var))
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)


def test_two_runs_at_once_keep_their_own_queues_and_both_pass(tmp_path: Path) -> None:
    runs = {name: _var_dir(tmp_path, name) for name in ("a", "b")}
    makes = {name: _make_test(var, JOB_TEST) for name, var in runs.items()}
    try:
        codes = {name: make.wait(RUN_BOUND_S) for name, make in makes.items()}
        for name, code in codes.items():
            assert code == 0, f"run {name} failed:\n{_log(runs[name])}"
            assert "1 passed" in _log(runs[name])
        logs = {name: _log(var) for name, var in runs.items()}
        redis = {name: log.split("Redis: ", 1)[1].split(")", 1)[0] for name, log in logs.items()}
        assert redis["a"] != redis["b"], "each run has a broker of its own"
    finally:
        for name, make in makes.items():
            if make.poll() is None:
                os.killpg(make.pid, signal.SIGKILL)
            runguard.stop(_of(runs[name]))


def test_a_leftover_of_an_earlier_run_is_named_and_stopped(tmp_path: Path) -> None:
    """A process marked with a run whose owner is gone, from another checkout, is stopped by
    the next run's first step; one of a live run is left alone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names no live process now: the run it owned has ended
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    env = {key: value for key, value in os.environ.items() if key != "VAR_DIR"}
    orphan = subprocess.Popen(
        sleeper, env={**env, runguard.RUN_ENV: f"{gone.pid}:1", "VAR_DIR": "/elsewhere/var/test"}
    )
    live = subprocess.Popen(
        sleeper, env={**env, runguard.RUN_ENV: runguard.run_id(os.getpid()), "VAR_DIR": "/x"}
    )
    try:
        wait_for(
            lambda: {orphan.pid, live.pid} <= {p.pid for p in runguard.run_processes()},
            30, "both sleepers to show their environment",
        )  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "devstack.runguard", "leftovers", "--var-dir", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"Stopped a leftover of an earlier test run: pid {orphan.pid}" in result.stdout
        assert orphan.wait(10) is not None
        assert live.poll() is None, "a process of a live run is never touched"
        assert f"pid {live.pid}" not in result.stdout
    finally:
        for proc in (orphan, live):
            proc.kill()
            proc.wait()


@pytest.mark.django_db
def test_a_job_no_worker_takes_fails_fast_naming_its_queue_and_consumers(redis_db) -> None:
    from profiler_app.models import Sweep
    from registry import servers

    job = Sweep.objects.create(
        model="add_sub", server=servers.default().name, params={}, queue="triton.nobody"
    )
    with pytest.raises(AssertionError) as failure:
        wait_for_job(job.pk, "succeeded", 600, "the sweep to succeed", pickup_s=0.5)
    message = str(failure.value)
    assert message.startswith(f"job {job.pk} queued on triton.nobody for "), message
    assert message.endswith(
        " s waiting for the sweep to succeed; workers consuming triton.nobody: none"
    ), message


@pytest.mark.django_db
def test_a_connection_kept_by_a_worker_thread_does_not_leave_the_test_database_behind(
    tmp_path: Path,
) -> None:
    """On PostgreSQL (.ci/run's second pass) the nested run uses a database of its own on
    the same server: DROP DATABASE refused while a worker thread's kept connection was on
    it, and the run left test_<name> behind with a warning (conftest.django_db_setup)."""
    from django.db import connection

    name = "dashboard_kept_check"
    url = ""
    if connection.vendor == "postgresql":
        url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + f"/{name}"
    var = _var_dir(tmp_path, "var")
    make = _make_test(var, "tests/nested_kept_connection.py", database_url=url)
    assert make.wait(RUN_BOUND_S) == 0, _log(var)
    assert "1 passed" in _log(var), _log(var)
    assert "Error when trying to teardown test databases" not in _log(var), _log(var)
    if url:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [f"test_{name}"])
            assert cursor.fetchone() is None, "the nested run's test database was left behind"
