"""The Benchmark form: defaults, presets, and every bad input answered on the form."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from profiler_app.models import Sweep
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

GOOD = {
    "mode": "concurrency",
    "concurrency_range": "1:3:1",
    "request_rate_range": "",
    "percentile": "95",
    "measurement_interval": "500",
    "stability_percentage": "50",
    "max_trials": "3",
    "batch_size": "1",
    "latency_threshold": "",
    "shape": "",
    "input_data": "random",
    "engine": "builtin",
    "protocol": "grpc",
    "version": "",
}


@pytest.fixture()
def runner(client):
    user = User.objects.create_user("runner", password="pw-runner-1")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    return client


@pytest.fixture()
def add_batched_ready(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    yield "add_batched"
    client.unload("add_batched")


def test_the_form_opens_with_perf_analyzer_like_defaults_and_presets(runner, redis_db):
    page = runner.get("/models/add_batched/benchmark/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'value="1:8:1"' in html and 'value="2000"' in html and 'value="10"' in html
    quick = runner.get("/models/add_batched/benchmark/?preset=quick").content.decode()
    assert 'value="1:4:1"' in quick and 'value="1000"' in quick and 'value="5"' in quick
    thorough = runner.get("/models/add_batched/benchmark/?preset=thorough").content.decode()
    assert 'value="1:16:1"' in thorough and 'value="5000"' in thorough and 'value="20"' in thorough


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"concurrency_range": ""}, "concurrency_range", "Enter a concurrency range"),
        ({"concurrency_range": "8:1:1"}, "concurrency_range", "inverted"),
        ({"concurrency_range": "1:4:0"}, "concurrency_range", "step (0) must be above 0"),
        ({"concurrency_range": "0:4:1"}, "concurrency_range", "must be above 0"),
        ({"concurrency_range": "1:2:0.5"}, "concurrency_range", "whole numbers"),
        ({"concurrency_range": "a:b"}, "concurrency_range", "is not start:end:step"),
        ({"mode": "request_rate"}, "request_rate_range", "Enter a request-rate range"),
        ({"measurement_interval": "0"}, "measurement_interval", "positive number of ms"),
        ({"measurement_interval": "-5"}, "measurement_interval", "positive number of ms"),
        ({"max_trials": "2"}, "max_trials", "between 3 and 1000"),
        ({"batch_size": "0"}, "batch_size", "at least 1"),
        ({"stability_percentage": "0"}, "stability_percentage", "above 0"),
        ({"latency_threshold": "-1"}, "latency_threshold", "above 0 ms"),
        ({"shape": "INPUT0"}, "shape", "is not NAME:d1,d2"),
    ],
)
def test_bad_input_comes_back_on_the_form_and_creates_nothing(
    runner, redis_db, change, field, message
):
    page = runner.post("/models/add_batched/benchmark/", {**GOOD, **change})
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-field="{field}"' in html
    assert message in html
    assert Sweep.objects.count() == 0


def _row(html: str, field: str) -> str:
    start = html.index(f'<tr id="row-{field}"')
    return html[start : html.index(">", start) + 1]


def test_only_the_fields_of_the_chosen_mode_show_and_the_server_still_checks_them(runner, redis_db):
    rate_fields = ("request_rate_range", "request_distribution", "max_threads")
    html = runner.get("/models/add_batched/benchmark/").content.decode()
    assert " hidden" not in _row(html, "concurrency_range")
    for field in rate_fields:
        assert 'data-mode="request_rate" hidden' in _row(html, field), field
    # A request-rate form without its range: refused on that field, shown in its mode.
    page = runner.post("/models/add_batched/benchmark/", {**GOOD, "mode": "request_rate"})
    html = page.content.decode()
    assert 'data-field="request_rate_range"' in html and Sweep.objects.count() == 0
    assert 'data-mode="concurrency" hidden' in _row(html, "concurrency_range")
    assert all(" hidden" not in _row(html, field) for field in rate_fields)


def test_a_model_that_is_not_ready_is_refused_with_a_clear_message(runner, triton, redis_db):
    TritonClient(triton.grpc_url, triton.metrics_url).unload("add_sub")
    page = runner.post("/models/add_sub/benchmark/", GOOD)
    assert page.status_code == 200
    assert "is not READY on Triton" in page.content.decode()
    assert "load it first" in page.content.decode()
    assert Sweep.objects.count() == 0


def test_inputs_that_cannot_be_built_are_refused_on_the_shape_field(
    runner, add_batched_ready, redis_db
):
    page = runner.post("/models/add_batched/benchmark/", {**GOOD, "shape": "NOPE:4"})
    html = page.content.decode()
    assert 'data-field="shape"' in html and "unknown input(s): NOPE" in html
    too_big = runner.post("/models/add_batched/benchmark/", {**GOOD, "batch_size": "65"})
    assert "exceeds the model&#x27;s max_batch_size 64" in too_big.content.decode()
    assert Sweep.objects.count() == 0


def test_a_valid_form_creates_a_queued_sweep_and_redirects_to_it(
    runner, add_batched_ready, redis_db, monkeypatch
):
    from profiler_app import jobs

    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)
    page = runner.post("/models/add_batched/benchmark/", GOOD)
    sweep = Sweep.objects.get()
    assert page.status_code == 302 and page["Location"] == f"/sweeps/{sweep.pk}/"
    assert sweep.state == "queued" and sweep.created_by.username == "runner"
    assert sweep.params["start"] == 1 and sweep.params["end"] == 3
    assert len(sweep.config_sha256) == 64 and "add_batched" in sweep.config_text
    assert sweep.levels_total == 3


def test_without_the_permission_the_form_is_disabled_and_posting_is_refused(client, redis_db):
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-1"))
    assert (
        "Your role cannot run sweeps"
        in client.get("/models/add_batched/benchmark/").content.decode()
    )
    assert client.post("/models/add_batched/benchmark/", GOOD).status_code == 403
    assert Sweep.objects.count() == 0


def _json_file(content: bytes, name: str = "input.json"):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content, content_type="application/json")


def test_request_rate_fields_and_a_json_input_file_are_stored_with_the_sweep(
    runner, add_batched_ready, redis_db, monkeypatch
):
    from profiler_app import jobs

    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)
    document = b'{"data": [{"INPUT0": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}]}'
    page = runner.post(
        "/models/add_batched/benchmark/",
        {
            **GOOD, "mode": "request_rate", "request_rate_range": "100:200:100",
            "request_distribution": "poisson", "max_threads": "8", "input_data": "json",
            "input_data_file": _json_file(document),
        },
    )  # fmt: skip
    assert page.status_code == 302, page.content.decode()[:2000]
    sweep = Sweep.objects.get()
    assert sweep.params["arrival"] == "poisson" and sweep.params["max_threads"] == 8
    assert sweep.params["input_data"] == {"data": [{"INPUT0": list(range(1, 17))}]}
    detail = runner.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "input JSON, 1 samples" in detail and "poisson arrivals" in detail
    assert "max threads 8" in detail


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"input_data_file": None}, "Choose a JSON file"),
        ({"input_data_file": b'{"data": [\n  {"INPUT0": [1, 2,]}\n]}'}, "line 2, column"),
        ({"input_data_file": b'{"samples": []}'}, "input data must be"),
        ({"input_data_file": b"\xff\xfe{}"}, "not UTF-8 text"),
        # Valid JSON that does not fit the model: the model's check, on the same field.
        ({"input_data_file": b'{"data": [{"INPUT0": [1, 2, 3]}]}'}, "input INPUT0: 3 values"),
    ],
)
def test_a_bad_input_data_file_is_answered_on_its_field_and_creates_nothing(
    runner, add_batched_ready, redis_db, change, message
):
    content = change["input_data_file"]
    data = {**GOOD, "input_data": "json"}
    if content is not None:
        data["input_data_file"] = _json_file(content)
    page = runner.post("/models/add_batched/benchmark/", data)
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-field="input_data_file"' in html, html[:3000]
    assert message in html
    assert Sweep.objects.count() == 0


def test_max_threads_out_of_range_is_answered_on_its_field(runner, redis_db):
    page = runner.post("/models/add_batched/benchmark/", {**GOOD, "max_threads": "0"})
    html = page.content.decode()
    assert 'data-field="max_threads"' in html and "between 1 and 64" in html
    assert Sweep.objects.count() == 0


def test_an_input_data_file_over_the_limit_is_refused(runner, redis_db, monkeypatch):
    from profiler_app import forms

    monkeypatch.setattr(forms, "MAX_INPUT_DATA_BYTES", 100)
    data = {**GOOD, "input_data": "json", "input_data_file": _json_file(b" " * 101 + b"{}")}
    html = runner.post("/models/add_batched/benchmark/", data).content.decode()
    assert 'data-field="input_data_file"' in html and "at most 100" in html
    assert Sweep.objects.count() == 0


def test_request_rate_sweeps_stored_before_max_threads_rerun_with_the_16_they_had():
    from profiler_app import sweeps

    old = {"model": "m", "mode": "request_rate", "start": 10, "end": 10, "step": 1}
    assert sweeps.params_of(Sweep(params=old)).max_threads == 16
    assert sweeps.params_of(Sweep(params={**old, "max_threads": 2})).max_threads == 2
    assert sweeps.params_of(Sweep(params={**old, "mode": "concurrency"})).max_threads == 4


@pytest.fixture()
def no_perf_analyzer(monkeypatch, tmp_path):
    """No binary where the sweep would look: $PERF_ANALYZER, PATH, var/tools/."""
    from profiler_app.engine import perf_analyzer_command

    monkeypatch.delenv("PERF_ANALYZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(
        perf_analyzer_command, "PROJECT_BINARY", tmp_path / "tools" / "perf_analyzer"
    )


def test_perf_analyzer_is_shown_disabled_with_the_reason_when_it_is_not_installed(
    runner, redis_db, no_perf_analyzer
):
    html = runner.get("/models/add_batched/benchmark/").content.decode()
    select = html.split('name="engine"')[1].split("</select>")[0]
    assert '<option value="perf_analyzer" disabled>perf_analyzer (not installed)</option>' in select
    assert '<option value="builtin" selected>' in select
    row = html.split('id="row-engine"')[1].split("</tr>")[0]
    assert "perf_analyzer not found: run `.venv/bin/python scripts/install_perf_analyzer.py`" in row


def test_perf_analyzer_sent_anyway_is_refused_on_its_field(runner, redis_db, no_perf_analyzer):
    page = runner.post("/models/add_batched/benchmark/", {**GOOD, "engine": "perf_analyzer"})
    html = page.content.decode()
    assert page.status_code == 200
    error = html.split('data-field="engine">')[1].split("</div>")[0]
    assert "perf_analyzer not found" in error and "install_perf_analyzer.py" in error
    assert Sweep.objects.count() == 0


def test_perf_analyzer_is_offered_when_it_is_installed(runner, redis_db, monkeypatch, tmp_path):
    binary = tmp_path / "perf_analyzer"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PERF_ANALYZER", str(binary))
    html = runner.get("/models/add_batched/benchmark/").content.decode()
    select = html.split('name="engine"')[1].split("</select>")[0]
    assert '<option value="perf_analyzer">perf_analyzer</option>' in select
    assert "disabled" not in select and "not installed" not in html


def test_a_preset_naming_a_missing_perf_analyzer_opens_on_the_built_in_engine(no_perf_analyzer):
    """A disabled option is not sent: left selected, the form would come back 'required'."""
    from profiler_app.forms import SweepForm

    form = SweepForm(initial={"engine": "perf_analyzer"}, model="m")
    assert form["engine"].value() == "builtin"
