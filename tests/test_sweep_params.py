"""One entry for a sweep's parameters (`profiler_app.params.from_flags`): the Benchmark
form, the REST API, `manage.py perf_sweep` and the config search refuse the same bad flag
with the same message, naming the field; the API reads its JSON body itself (no input
file faked for the page's form: see test_security_sweeps). Triton is never asked."""

from __future__ import annotations

import dataclasses

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from profiler_app import jobs, sweeps
from profiler_app.forms import SweepForm
from profiler_app.models import Sweep
from profiler_app.params import ParamsError, SweepError, SweepParams, from_flags
from profiler_app.search.forms import SearchForm
from registry import servers
from team.roles import OPERATOR, set_role

from .test_security_search import GOOD as SEARCH
from .test_security_sweeps import FORM

pytestmark = pytest.mark.django_db

# (flag, its value as typed, the message on the form and the API, the command line's line)
BAD_FLAGS = [
    (
        "max_trials", "2",
        "Max windows must be between 3 and 1000 (3 decide stability).",
        "--max-trials must be between 3 and 1000 (3 decide stability).",
    ),
    (
        "stability_percentage", "0",
        "The stability percentage must be above 0 (e.g. 10).",
        "--stability-percentage must be above 0 (e.g. 10).",
    ),
    (
        "measurement_interval", "10",
        "The measurement window must be at least 50 ms.",
        "--measurement-interval must be at least 50 ms.",
    ),
    ("max_threads", "0", "Max threads must be between 1 and 64.", "--max-threads must be between 1 and 64."),
    ("batch_size", "0", "The batch size must be at least 1.", "-b must be at least 1."),
    ("rounds", "11", "Rounds must be between 1 and 10.", "--rounds must be between 1 and 10."),
    (
        "num_of_sequences", "0",
        "The number of sequences must be between 1 and 4096.",
        "--num-of-sequences must be between 1 and 4096.",
    ),
    (
        "goodput", "ttft:200",
        "Goodput objective 'ttft:200' names no known metric; use time_to_first_token, "
        "inter_token_latency, request_latency (AIPerf's) or first_response, inter_response "
        "(this project's).",
        "--goodput objective 'ttft:200' names no known metric; use time_to_first_token, "
        "inter_token_latency, request_latency (AIPerf's) or first_response, inter_response "
        "(this project's).",
    ),
    (
        "concurrency_range", "8:1:1",
        "The range is inverted: end 1 is below start 8.",
        "bad range '8:1:1' (--concurrency-range): The range is inverted: end 1 is below start 8.",
    ),
]  # fmt: skip


@pytest.fixture(autouse=True)
def no_triton(monkeypatch):
    def asked_triton(*_a):
        raise AssertionError("Triton was asked before the parameters were refused")

    monkeypatch.setattr(sweeps, "get_client", asked_triton)
    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)


@pytest.fixture()
def api():
    user = get_user_model().objects.create_user("alice", password="pw-alice-12345")
    set_role(user, OPERATOR)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(("flag", "value", "message", "line"), BAD_FLAGS)
def test_one_bad_flag_is_one_message_on_the_form_the_api_the_command_line_and_the_search(
    api, redis_db, flag, value, message, line
):
    form = SweepForm({**FORM, flag: value}, model="add_batched")
    assert not form.is_valid()
    assert form.errors == {flag: [message]}

    response = api.post(
        "/api/v1/sweeps/", {"model": "add_batched", flag: value}, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {"message": message, "field": flag, "errors": {flag: [message]}}

    option = "--" + flag.replace("_", "-") if flag != "batch_size" else "-b"
    with pytest.raises(CommandError) as refused:
        call_command("perf_sweep", "add_batched", option, value)
    assert str(refused.value) == line

    if flag in SEARCH:  # the measurement's flags of a search
        search = SearchForm({**SEARCH, flag: value}, model="add_batched", server=servers.default())
        assert not search.is_valid()
        assert search.errors == {flag: [message]}
    assert not Sweep.objects.exists()


def test_the_command_line_names_every_refused_flag_at_once(redis_db):
    with pytest.raises(CommandError) as refused:
        call_command(
            "perf_sweep", "add_batched", "--max-trials", "2", "--rounds", "0", "-b", "many"
        )
    assert str(refused.value).splitlines() == [
        "--max-trials must be between 3 and 1000 (3 decide stability).",
        "-b must be a whole number.",
        "--rounds must be between 1 and 10.",
    ]


def test_from_flags_reads_text_or_values_and_keeps_the_stored_shape():
    typed = from_flags({"model": "m", "concurrency_range": "1:4:1", "max_trials": 5,
                        "stability_percentage": 12.5, "percentile": 99, "shape": ["A:2", "B:3,3"]})  # fmt: skip
    text = from_flags({"model": "m", "concurrency_range": "1:4:1", "max_trials": "5",
                       "stability_percentage": "12.5", "percentile": "99", "shape": "A:2 B:3,3"})  # fmt: skip
    assert typed == text
    assert text.shapes == {"A": [2], "B": [3, 3]} and text.max_windows == 5
    stored = dataclasses.asdict(text)
    assert set(stored) == {f.name for f in dataclasses.fields(SweepParams)}
    assert sweeps.params_of(Sweep(params=stored)) == text
    # The command line's defaults: one concurrency level, 2 s windows, perf_analyzer's 10.
    assert from_flags({"model": "m"}) == SweepParams(
        model="m", measurement_window_ms=2000, max_windows=10
    )
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", "request_rate_range": "5", "percentile": "42", "shape": 4})
    assert refused.value.errors == {
        "percentile": "The percentile must be 50, 90, 95, 99 or avg.",
        "shape": "The shapes must be text: NAME:d1,d2, several separated by spaces.",
    }


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("rounds", 11, "rounds"),
        ("stability_percentage", 2000.0, "stability_percentage"),
        ("max_windows", 5000, "max_trials"),
        ("version", "9" * 40, "version"),
    ],
)
def test_the_engines_guard_refuses_what_the_entry_refuses_in_the_same_words(field, value, flag):
    """One set of bounds: SweepParams.validate (stored or code-built parameters) says what
    from_flags says for the same value."""
    params = dataclasses.replace(SweepParams(model="add_batched"), **{field: value})
    with pytest.raises(ParamsError) as entry:
        from_flags(params.flags())
    with pytest.raises(SweepError) as guard:
        params.validate()
    words = entry.value.errors[flag]
    assert str(guard.value) == words[:1].lower() + words[1:].rstrip(".")
    SweepParams(model="add_batched").validate()  # the defaults pass both


def test_the_form_the_api_and_the_command_line_start_a_sweep_through_start_sweep(api, monkeypatch):
    """One measurement path: each entry point hands its flags to `sweeps.start_sweep` and
    says its refusal in its own way (the page on the form, a 400, the command's error)."""
    from profiler_app import kind_presets

    started = []

    def start_sweep(server, flags, user=None, **kwargs):
        started.append((server.name, kwargs["engine"]))
        raise sweeps.SweepRefused({"__all__": "stopped at start_sweep"}, sentence="stopped here")

    monkeypatch.setattr(sweeps, "start_sweep", start_sweep)
    monkeypatch.setattr(kind_presets, "model_kind", lambda server, name: (None, "not known"))
    page = api.post("/models/add_batched/benchmark/", FORM)
    assert "stopped at start_sweep" in page.content.decode()
    response = api.post(
        "/api/v1/sweeps/", {"model": "add_batched"}, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["message"] == "stopped at start_sweep"
    with pytest.raises(CommandError, match="^stopped here$"):
        call_command("perf_sweep", "add_batched")
    assert started == [("default", "builtin")] * 3
    assert not Sweep.objects.exists()
