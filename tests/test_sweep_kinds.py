"""Benchmarking models of every kind against the real tritonserver: the Benchmark page
shows the kind and the flags that fit it, a flag that does not fit is refused on its field
(form, API, command line), and perf_analyzer measures a sequence and a decoupled model."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from profiler_app import export, llm
from profiler_app.engine.perf_analyzer_csv import CSV_COLUMNS, STREAM_CSV_COLUMNS
from profiler_app.models import Sweep, SweepPoint
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODELS = ("add_batched", "stream_tok", "seq_accumulate")
FORM = {
    "mode": "concurrency", "concurrency_range": "1:2:1", "percentile": "95",
    "measurement_interval": "500", "stability_percentage": "50", "max_trials": "3",
    "batch_size": "1", "input_data": "random", "engine": "perf_analyzer", "protocol": "grpc",
}  # fmt: skip
QUICK = ["--concurrency-range", "1:2:1", "--measurement-interval", "500",
         "--stability-percentage", "50", "--max-trials", "5"]  # fmt: skip


@pytest.fixture(scope="module")
def loaded(triton) -> Iterator[TritonClient]:
    control = TritonClient(triton.grpc_url, triton.metrics_url)
    before = {m for m in MODELS if any(s.state == "READY" for s in control.model_states(m))}
    for name in MODELS:
        control.load(name)
    yield control
    for name in MODELS:
        if name not in before:
            control.unload(name)


@pytest.fixture()
def runner(client):
    user = User.objects.create_user("kinds", password="pw-kinds-1")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    return client


def _field_error(html: str, field: str) -> str:
    marker = f'data-field="{field}">'
    assert marker in html, html[html.find("sweep-form") :][:3000]
    return html.split(marker, 1)[1].split("</div>", 1)[0]


def test_the_page_shows_the_kind_and_only_the_flags_that_fit(runner, loaded, redis_db):
    stream = runner.get("/models/stream_tok/benchmark/").content.decode()
    assert 'data-kind="decoupled"' in stream and 'name="streaming"' in stream
    assert 'name="sequence_length"' not in stream
    assert re.search(r'<input type="checkbox" name="streaming"[^>]* checked>', stream)  # preset
    seq = runner.get("/models/seq_accumulate/benchmark/").content.decode()
    assert 'data-kind="sequence"' in seq and "sequence (direct)" in seq
    assert 'name="sequence_length"' in seq and 'name="streaming"' not in seq
    assert 'name="num_of_sequences"' in seq
    assert 'id="preset-long-sequences"' in seq
    assert "Both engines measure it" in seq and "sends no sequences" not in seq
    assert "does not stream yet" not in stream
    plain = runner.get("/models/add_batched/benchmark/").content.decode()
    assert 'data-kind="stateless"' in plain
    assert 'name="streaming"' not in plain and 'name="sequence_length"' not in plain
    assert 'name="num_of_sequences"' not in plain


def test_the_form_refuses_a_decoupled_model_over_http_on_the_protocol(runner, loaded, redis_db):
    html = runner.post(
        "/models/stream_tok/benchmark/", {**FORM, "protocol": "http", "streaming": ""}
    ).content.decode()
    assert "stream_tok is decoupled: it answers only over gRPC streaming; choose gRPC." in (
        _field_error(html, "protocol")
    )
    assert not Sweep.objects.exists()


def test_the_form_refuses_a_decoupled_model_without_streaming(runner, loaded, redis_db):
    html = runner.post("/models/stream_tok/benchmark/", FORM).content.decode()
    assert "turn on --streaming" in _field_error(html, "streaming")
    builtin_http = runner.post(
        "/models/stream_tok/benchmark/", {**FORM, "engine": "builtin", "protocol": "http"}
    ).content.decode()
    assert "choose gRPC" in _field_error(builtin_http, "protocol")
    assert not Sweep.objects.exists()


def test_the_api_refuses_sequence_flags_on_a_stateless_model_on_their_field(loaded, redis_db):
    user = User.objects.create_user("kinds-api")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    token, _ = Token.objects.get_or_create(user=user)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    body = {"model": "add_batched", "sequence_length": 5, "engine": "perf_analyzer"}
    response = api.post("/api/v1/sweeps/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["field"] == "sequence_length"
    assert response.json()["message"] == (
        "--sequence-length applies to sequence models; add_batched has no sequence_batching."
    )
    response = api.post(
        "/api/v1/sweeps/",
        {"model": "seq_accumulate", "batch_size": 2},
        content_type="application/json",
    )
    assert response.status_code == 400 and response.json()["field"] == "batch_size"
    assert "Triton's sequence batcher takes one request" in response.json()["message"]
    assert not Sweep.objects.exists()


def test_the_command_line_names_the_refused_flag(loaded, redis_db):
    with pytest.raises(CommandError) as http:
        call_command("perf_sweep", "stream_tok", "-i", "http", "--engine", "perf_analyzer")
    assert str(http.value) == (
        "-i: stream_tok is decoupled: it answers only over gRPC streaming; choose gRPC."
    )
    with pytest.raises(CommandError, match=r"^--streaming: --streaming applies to decoupled"):
        call_command("perf_sweep", "add_batched", "--streaming", "--engine", "perf_analyzer")
    with pytest.raises(CommandError, match=r"^-i: stream_tok is decoupled"):
        call_command("perf_sweep", "stream_tok", "-i", "http")  # the built-in engine too
    with pytest.raises(CommandError) as tokens:  # checked against the model's outputs
        call_command("perf_sweep", "stream_tok", "--streaming", "--token-output", "NOPE")
    assert (
        str(tokens.value) == "--token-output: stream_tok has no output 'NOPE'; its outputs: TOKEN."
    )
    assert not Sweep.objects.exists()


def test_an_llm_input_preset_fills_the_json_field_and_other_input_names_are_refused_on_it(
    runner, loaded, redis_db, monkeypatch
):
    from profiler_app import jobs

    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)
    stream = runner.get("/models/stream_tok/benchmark/").content.decode()
    assert 'id="inputs-trtllm"' in stream and 'id="inputs-vllm"' in stream
    assert 'id="llm-presets"' not in runner.get("/models/add_batched/benchmark/").content.decode()
    page = runner.get("/models/stream_tok/benchmark/?preset=quick&inputs=vllm").content.decode()
    assert '<option value="text" selected>' in page
    assert "sampling_parameters" in page and "exclude_input_in_output" in page
    # stream_tok takes PROMPT_ID: the preset is refused on the field, before anything runs.
    data = {**FORM, "engine": "builtin", "streaming": "on", "input_data": "text",
            "input_data_text": llm.preset_text("vllm")}  # fmt: skip
    error = _field_error(
        runner.post("/models/stream_tok/benchmark/", data).content.decode(), "input_data_text"
    )
    assert "no value for input(s) PROMPT_ID" in error
    assert "exclude_input_in_output, sampling_parameters, stream, text_input" in error
    # Its JSON's own errors name the line and column, on the same field.
    bad = {**data, "input_data_text": '{"data": [\n  {"PROMPT_ID": [1],}\n]}'}
    error = _field_error(
        runner.post("/models/stream_tok/benchmark/", bad).content.decode(), "input_data_text"
    )
    assert "line 2, column" in error
    # With the model's own names it is queued with the document.
    fits = {**data, "input_data_text": '{"data": [{"PROMPT_ID": [7]}, {"PROMPT_ID": [9]}]}'}
    response = runner.post("/models/stream_tok/benchmark/", fits)
    assert response.status_code == 302
    assert Sweep.objects.get().params["input_data"] == {
        "data": [{"PROMPT_ID": [7]}, {"PROMPT_ID": [9]}]
    }


def _run(*args: str, engine: str = "perf_analyzer") -> Sweep:
    call_command(
        "perf_sweep", *args, "--engine", engine, *QUICK,
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    return Sweep.objects.latest("pk")


def test_perf_analyzer_measures_the_sequence_model_without_errors(loaded, redis_db):
    failed_before = _failures(loaded, "seq_accumulate")
    sweep = _run("seq_accumulate", "--sequence-length", "5", "--sequence-id-range", "1:1000")
    assert sweep.state == "succeeded", sweep.error
    assert "--sequence-length 5" in sweep.command and "--sequence-id-range 1:1000" in sweep.command
    assert SweepPoint.objects.filter(sweep=sweep, window=-1).count() == 2
    # Every request was part of a started sequence: the model refused none.
    assert _failures(loaded, "seq_accumulate") == failed_before


def test_the_builtin_engine_measures_the_sequence_model_by_position(loaded, redis_db, runner):
    failed_before = _failures(loaded, "seq_accumulate")
    out = io.StringIO()
    call_command(
        "perf_sweep", "seq_accumulate", *QUICK, stdout=out, stderr=io.StringIO()
    )  # the built-in engine, no sequence flag
    sweep = Sweep.objects.latest("pk")
    assert sweep.state == "succeeded", sweep.error
    assert sweep.engine == "builtin" and sweep.model_kind == "sequence (direct)"
    note = "seq_accumulate is a sequence model and no sequence flag was given"
    assert f"note: {note}" in out.getvalue()
    # Every request was part of a started sequence: the model refused none.
    assert _failures(loaded, "seq_accumulate") == failed_before
    levels = SweepPoint.objects.filter(sweep=sweep, window=-1)
    assert levels.count() == 2
    for level in levels:
        extra = level.extra
        assert level.errors == 0 and extra["sequences_failed"] == 0
        assert all(extra[f"{p}_throughput"] > 0 for p in ("first", "middle", "last")), extra
        assert extra["first_requests"] + extra["middle_requests"] + extra["last_requests"] == (
            level.requests
        )
    page = runner.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'id="sweep-kind">sequence (direct)' in page and note in page
    assert 'id="chart-position-throughput"' in page and 'id="chart-position-latency"' in page


def test_perf_analyzer_streams_the_decoupled_model_and_counts_its_responses(loaded, redis_db):
    # A wide stability bound (max/min of 3 windows within 1000 %), so that a level settles
    # even on a busy machine: perf_analyzer reports a level's Client figures, the response
    # throughput among them, only once it settled.
    wide = [*QUICK[:-4], "--stability-percentage", "1000", *QUICK[-2:]]
    call_command(
        "perf_sweep", "stream_tok", "--streaming", "--engine", "perf_analyzer", *wide,
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    sweep = Sweep.objects.latest("pk")
    assert sweep.state == "succeeded", sweep.error
    assert "--streaming" in sweep.command
    levels = SweepPoint.objects.filter(sweep=sweep, window=-1)
    assert levels.count() == 2
    for level in levels:
        if level.stable is False:
            # Not settled all the same: stored as such, with no response figure made up.
            assert "response_throughput" not in level.extra, level.extra
            continue
        # RESPONSE_COUNT is 8: eight responses per request (the empty final one uncounted).
        ratio = level.extra["response_throughput"] / level.throughput
        assert 7 < ratio < 9, (level.extra, level.throughput)


def _failures(control: TritonClient, name: str) -> int:
    stats = control.model_statistics(name)
    return sum(int(s.get("inference_stats", {}).get("fail", {}).get("count", 0)) for s in stats)


def test_the_builtin_engine_streams_the_decoupled_model_and_exports_its_figures(
    loaded, redis_db, runner
):
    sweep = _run("stream_tok", "--streaming", engine="builtin")
    assert sweep.state == "succeeded", sweep.error
    levels = SweepPoint.objects.filter(sweep=sweep, window=-1)
    assert levels.count() == 2
    for level in levels:
        assert level.extra["responses_per_request"] == 8  # RESPONSE_COUNT
        assert level.extra["first_response_p95_us"] > 0
    rows = list(csv.DictReader(io.StringIO(export.to_csv(sweep))))
    assert list(rows[0]) == [*CSV_COLUMNS, *STREAM_CSV_COLUMNS, *export.INTERVAL_CSV_COLUMNS]
    for row in rows:
        assert all(row[c] != "" and float(row[c]) > 0 for c in STREAM_CSV_COLUMNS), row
    assert "inter_response_p99_us" in export.to_json(sweep)["points"][0]["extra"]
    # A stateless sweep keeps perf_analyzer's columns only.
    plain = _run("add_batched")
    assert next(csv.reader(io.StringIO(export.to_csv(plain)))) == CSV_COLUMNS
    # The page draws the streaming charts for the streaming sweep only.
    for chart in ("chart-first-response", "chart-inter-response", "chart-responses"):
        assert f'id="{chart}"' in runner.get(f"/sweeps/{sweep.pk}/").content.decode()
        assert f'id="{chart}"' not in runner.get(f"/sweeps/{plain.pk}/").content.decode()
