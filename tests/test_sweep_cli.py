"""`manage.py perf_sweep`: perf_analyzer's flags, a summary on stdout, the CSV, a stored sweep."""

from __future__ import annotations

import csv
import io

import pytest
from django.core.management import CommandError, call_command

from profiler_app import export
from profiler_app.engine.perf_analyzer_csv import CSV_COLUMNS
from profiler_app.models import Sweep, SweepPoint
from team.models import AuditEvent
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_the_command_runs_the_sweep_writes_the_csv_and_stores_it(triton, redis_db, tmp_path):
    from django.contrib.auth.models import User

    from team.roles import OPERATOR, set_role

    set_role(User.objects.create_user("cli-user"), OPERATOR)
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "result.csv"
    try:
        call_command(
            "perf_sweep",
            "add_batched",
            "--concurrency-range",
            "1:2:1",
            "--measurement-interval",
            "300",
            "--stability-percentage",
            "50",
            "--max-trials",
            "3",
            "--percentile",
            "95",
            "-f",
            str(target),
            "--as-user",
            "cli-user",
            stdout=out,
            stderr=err,
        )
    finally:
        client.unload("add_batched")
    rows = list(csv.reader(io.StringIO(target.read_text())))
    # perf_analyzer's columns, then each level's interval (the built-in engine's).
    assert rows[0] == [*CSV_COLUMNS, *export.INTERVAL_CSV_COLUMNS]
    assert [r[0] for r in rows[1:]] == ["1", "2"]
    text = out.getvalue()
    assert "Request concurrency: 1" in text and "p95 latency:" in text
    assert "Inferences/Second vs. Client p95 Batch Latency" in text and "infer/s" in text
    sweep = Sweep.objects.get()
    assert sweep.state == "succeeded" and sweep.created_by.username == "cli-user"
    assert SweepPoint.objects.filter(sweep=sweep, window=-1).count() == 2
    # Audited as the --as-user user, not "system".
    started = AuditEvent.objects.get(action="sweep.start")
    assert (started.username, started.user.username) == ("cli-user", "cli-user")
    system = AuditEvent.objects.filter(username="system").exclude(action__startswith="user.")
    assert not system.exists()


def test_the_cli_user_of_the_environment_runs_owns_and_is_audited_for_the_sweep(
    triton, redis_db, monkeypatch
):
    from django.contrib.auth.models import User

    from team.roles import OPERATOR, set_role

    set_role(User.objects.create_user("env-user"), OPERATOR)
    monkeypatch.setenv("DASHBOARD_CLI_USER", "env-user")  # as `manage.py triton` reads it
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    try:
        call_command(
            "perf_sweep", "add_batched", "--concurrency-range", "1:1:1",
            "--measurement-interval", "200", "--stability-percentage", "80", "--max-trials", "3",
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    finally:
        client.unload("add_batched")
    sweep = Sweep.objects.get()
    assert sweep.created_by.username == "env-user"
    started = AuditEvent.objects.get(action="sweep.start")
    assert started.username == "env-user" and started.user == sweep.created_by


def test_the_command_exits_with_a_clear_message_when_the_model_is_not_ready(triton, redis_db):
    TritonClient(triton.grpc_url, triton.metrics_url).unload("add_sub")
    with pytest.raises(CommandError, match="is not READY on Triton"):
        call_command("perf_sweep", "add_sub", "--concurrency-range", "1:2:1")
    with pytest.raises(CommandError, match="bad range"):
        call_command("perf_sweep", "add_sub", "--concurrency-range", "4:1:1")
    assert not Sweep.objects.exists()


def test_the_perf_analyzer_engine_stores_its_levels_and_exact_command(triton, redis_db, tmp_path):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    target = tmp_path / "pa.csv"
    try:
        call_command(
            "perf_sweep",
            "add_batched",
            "--engine",
            "perf_analyzer",
            "--concurrency-range",
            "1:2:1",
            "--measurement-interval",
            "300",
            "--stability-percentage",
            "50",
            "--max-trials",
            "5",
            "-f",
            str(target),
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    finally:
        client.unload("add_batched")
    sweep = Sweep.objects.get()
    assert sweep.state == "succeeded", sweep.error
    assert "perf_analyzer" in sweep.command and "--concurrency-range 1:2:1" in sweep.command
    assert SweepPoint.objects.filter(sweep=sweep, window=-1).count() == 2
    assert SweepPoint.objects.filter(sweep=sweep, window__gte=0).count() >= 2
    rows = list(csv.reader(io.StringIO(target.read_text())))
    assert rows[0] == CSV_COLUMNS and len(rows) == 3


def test_a_request_rate_the_engine_cannot_keep_is_flagged_in_the_summary(triton, redis_db):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    out = io.StringIO()
    try:
        call_command(
            "perf_sweep", "add_batched", "--request-rate-range", "150:50000:49850",
            "--measurement-interval", "300", "--stability-percentage", "50",
            "--max-trials", "3", stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
    finally:
        client.unload("add_batched")
    text = out.getvalue()
    # The level blocks come first ("Request Rate: N", then its figures); a table follows.
    first, second = text.split("Request Rate: ")[1:3]
    assert first.startswith("150") and "requests were delayed" not in first
    assert second.startswith("50000") and "WARNING: requests were delayed: sent" in second
    assert "of 50000/sec" in second
    levels = SweepPoint.objects.filter(sweep=Sweep.objects.get(), window=-1).order_by("level")
    assert [p.extra["behind_schedule"] for p in levels] == [False, True]


def test_the_command_takes_an_input_data_file_distribution_and_max_threads(
    triton, redis_db, tmp_path
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    data = tmp_path / "input.json"
    data.write_text('{"data": [{"INPUT0": [2.0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]}]}')
    try:
        call_command(
            "perf_sweep", "add_batched", "--request-rate-range", "100",
            "--request-distribution", "poisson", "--max-threads", "2", "--input-data", str(data),
            "--measurement-interval", "300", "--stability-percentage", "80", "--max-trials", "3",
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    finally:
        client.unload("add_batched")
    sweep = Sweep.objects.get()
    assert sweep.state == "succeeded", sweep.error
    assert sweep.params["arrival"] == "poisson" and sweep.params["max_threads"] == 2
    assert sweep.params["input_data"]["data"][0]["INPUT0"][0] == 2.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file or directory"),
        ('{"data": [}', "line 1, column 11"),
    ],
)
def test_a_bad_input_data_file_ends_the_command_with_a_clear_message(
    redis_db, tmp_path, content, message
):
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CommandError, match=message):
        call_command("perf_sweep", "add_batched", "--input-data", str(path))
    assert not Sweep.objects.exists()
