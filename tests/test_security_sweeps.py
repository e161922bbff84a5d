"""Sweeps refuse what would exhaust the web process, and only their owner or an admin may
cancel or resume them.

Bounds: a range is counted (never listed) before the 200-level cap, non-finite numbers,
concurrency over 4096 and request rates over 1,000,000/s are refused on the form, the API
and the CLI naming the field, with no Sweep row. Input data that does not convert is an
InputError naming the input and the sample (400 on the API's input_data_file). Actors:
alice (Operator) owns the sweeps, bob is another Operator, dana an Admin.
"""

from __future__ import annotations

import dataclasses
import json
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from profiler_app import jobs, sweeps
from profiler_app.engine import inputs
from profiler_app.engine.inputs import InputError, InputSpec, build_payloads
from profiler_app.models import Sweep
from profiler_app.params import SweepError, SweepParams, from_flags
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, set_role
from triton_api.client import ModelState, TritonClient

pytestmark = pytest.mark.django_db

FORM = {
    "mode": "concurrency", "concurrency_range": "1:3:1", "request_rate_range": "",
    "percentile": "95", "measurement_interval": "500", "stability_percentage": "50",
    "max_trials": "3", "batch_size": "1", "latency_threshold": "", "shape": "",
    "input_data": "random", "engine": "builtin", "protocol": "grpc", "version": "",
}  # fmt: skip

# (field changes, the field that answers, words of the message)
BAD_RANGES = [
    ({"concurrency_range": "1:2:1e-300"}, "concurrency_range", "far more than 200 levels"),
    ({"concurrency_range": "1:4000:1"}, "concurrency_range", "4,000 levels is too many"),
    ({"concurrency_range": "1:inf:1"}, "concurrency_range", "inf is not a finite number"),
    ({"concurrency_range": "1:nan:1"}, "concurrency_range", "nan is not a finite number"),
    ({"concurrency_range": "1e308"}, "concurrency_range", "Concurrency can be at most 4096"),
    ({"concurrency_range": "4097"}, "concurrency_range", "Concurrency can be at most 4096"),
    (
        {"mode": "request_rate", "request_rate_range": "2000000"},
        "request_rate_range",
        "request rate can be at most 1,000,000 requests/s",
    ),
    (
        {"mode": "request_rate", "request_rate_range": "1:1000000:0.01"},
        "request_rate_range",
        "levels is too many (at most 200)",
    ),
    ({"measurement_interval": "1000000000"}, "measurement_interval", "at most 600000 ms"),
    ({"shape": "INPUT0:1000000000000"}, "shape", "at most 268,435,456 per sample"),
]


@pytest.fixture(autouse=True)
def no_triton(monkeypatch):
    """Refusals come before Triton is asked (a test that needs it fakes it), and nothing
    is sent to the worker."""

    def asked_triton(*_a):
        raise AssertionError("Triton was asked before the parameters were refused")

    monkeypatch.setattr(sweeps, "get_client", asked_triton)
    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)


@pytest.fixture()
def no_level_lists(monkeypatch):
    """A range is refused before its levels are listed: listing them fails the test at
    once (rather than hanging it, as 10^300 levels would)."""

    def listed(self):
        raise AssertionError(f"the levels of {self.range_text} were listed")

    monkeypatch.setattr(SweepParams, "levels", listed)


def _user(name: str, role: str):
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345")
    set_role(user, role)
    return user


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def alice():
    return _user("alice", OPERATOR)


@pytest.fixture()
def bob():
    return _user("bob", OPERATOR)


@pytest.fixture()
def dana():
    return _user("dana", ADMIN)


# --- ranges and bounds ------------------------------------------------------------------------


def test_levels_are_counted_by_arithmetic_and_a_list_over_the_cap_is_never_built():
    assert SweepParams(model="m", start=1, end=8, step=1).level_count() == 8
    assert SweepParams(model="m", start=0.1, end=0.3, step=0.1).level_count() == 3
    assert SweepParams(model="m", start=1, end=2, step=1e-300).level_count() > 10**299
    with pytest.raises(SweepError, match="finite"):
        SweepParams(model="m", start=1, end=float("inf"), step=1).level_count()


def test_levels_refuses_a_range_over_the_cap():
    with pytest.raises(SweepError, match="1,000,000 levels is too many"):
        SweepParams(model="m", start=1, end=1_000_000, step=1).levels()
    assert SweepParams(model="m", start=1, end=3, step=1).levels() == [1, 2, 3]


@pytest.mark.parametrize(("change", "field", "message"), BAD_RANGES)
def test_the_form_refuses_each_bad_range_on_its_field_and_stores_nothing(
    alice, redis_db, no_level_lists, change, field, message
):
    page = _page(alice).post("/models/add_batched/benchmark/", {**FORM, **change})
    html = page.content.decode()
    assert page.status_code == 200
    assert f'data-field="{field}"' in html, html[-3000:]
    assert message in html
    assert not Sweep.objects.exists()


def test_the_api_refuses_each_bad_range_with_400_naming_the_field(alice, redis_db, no_level_lists):
    api = _page(alice)
    for change, field, message in BAD_RANGES:
        body = {"model": "add_batched", **change}
        response = api.post("/api/v1/sweeps/", body, content_type="application/json")
        assert response.status_code == 400, (change, response.content)
        assert response.json()["field"] == field, (change, response.json())
        assert message in response.json()["message"], (change, response.json())
    assert not Sweep.objects.exists()


def test_the_api_refuses_an_unsafe_model_name_on_the_model_field(alice, redis_db):
    api = _page(alice)
    for name in ("inj$(touch /tmp/x)", "a;b", "x`id`"):
        response = api.post("/api/v1/sweeps/", {"model": name}, content_type="application/json")
        assert response.status_code == 400, response.content
        assert response.json()["field"] == "model", response.json()
        assert "invalid model name" in response.json()["message"]
    assert not Sweep.objects.exists()


def test_the_benchmark_page_of_an_unsafe_model_name_is_a_404(alice, redis_db):
    from urllib.parse import quote

    page = _page(alice)
    for name in ("inj$(touch /tmp/x)", "a;b", "x`id`"):
        url = f"/models/{quote(name, safe='')}/benchmark/"
        assert page.get(url).status_code == 404, name
        assert page.post(url, {"concurrency_range": "1"}).status_code == 404, name
    assert not Sweep.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency-range", "1:2:1e-300"], "--concurrency-range.*far more than 200 levels"),
        (["--concurrency-range", "1:inf:1"], "--concurrency-range.*not a finite number"),
        (["--concurrency-range", "1e308"], "--concurrency-range.*at most 4096"),
        (["--request-rate-range", "5000000"], "--request-rate-range.*at most 1,000,000"),
        (["--measurement-interval", "1000000000"], "--measurement-interval.*600000"),
        (["--shape", "INPUT0:1000000000000"], "--shape.*at most 268,435,456"),
    ],
)
def test_the_command_refuses_each_bad_value_naming_the_flag(
    redis_db, no_level_lists, args, message
):
    with pytest.raises(CommandError, match=message):
        call_command("perf_sweep", "add_batched", *args)
    assert not Sweep.objects.exists()


# --- input data -------------------------------------------------------------------------------

FP32 = [InputSpec("INPUT0", "FP32", (4,))]
GOOD_SAMPLE = {"INPUT0": [1.0, 2.0, 3.0, 4.0]}


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ({"INPUT0": [1, "abc", 3, 4]}, "input INPUT0, sample 3: 'abc' is not a number for FP32"),
        ({"INPUT0": [[1, 2], [3]]}, "input INPUT0, sample 3: 'content' is not a regular array"),
        ({"INPUT0": [{"x": 1}, 2, 3, 4]}, "input INPUT0, sample 3: {'x': 1} is not a number"),
        ({"INPUT0": {"b64": "abc"}}, "input INPUT0, sample 3: 'b64' is not valid base64"),
        ({"INPUT0": {"b64": 5}}, "input INPUT0, sample 3: 'b64' must be a base64 string"),
        ({"INPUT0": {"b64": "AAAAAAA="}}, "sample 3: 'b64' holds 5 bytes, not a whole number"),
        ({"INPUT0": {"b64": "AAAAAAAAAAA="}}, "sample 3: 'b64' holds 2 FP32 values for shape"),
        (
            {"INPUT0": {"content": [1], "shape": [10**12]}},
            "sample 3: shape [1000000000000] is 1,000,000,000,000 elements; at most",
        ),
        ({"INPUT0": {"content": [1], "shape": [-1, -1]}}, "sample 3: shape [-1, -1] has a neg"),
        ({"INPUT0": {"content": [1], "shape": "4"}}, "sample 3: 'shape' must be a list"),
    ],
)
def test_input_data_that_does_not_convert_names_the_input_and_the_sample(sample, message):
    document = {"data": [GOOD_SAMPLE, GOOD_SAMPLE, GOOD_SAMPLE, sample]}
    with pytest.raises(InputError) as caught:
        build_payloads(FP32, data=document)
    assert message in str(caught.value)


def test_bytes_input_data_takes_strings_only():
    spec = [InputSpec("TEXT", "BYTES", (1,))]
    # bytes(10**12) would have been a terabyte of zeros.
    with pytest.raises(InputError, match="input TEXT, sample 0: 1000000000000 is not a string"):
        build_payloads(spec, data={"data": [{"TEXT": [10**12]}]})
    assert build_payloads(spec, data={"data": [{"TEXT": ["ok"]}]})[0][0].array.tolist() == [[b"ok"]]


def test_shapes_are_counted_before_random_data_is_drawn(monkeypatch):
    variable = [InputSpec("V", "FP32", (-1,))]
    with pytest.raises(InputError, match=r"input V: shape \[1000000000000\] is 1,000,000,000,000"):
        build_payloads(variable, shapes={"V": [10**12]})
    monkeypatch.setattr(inputs, "MAX_REQUEST_BYTES", 4000)
    with pytest.raises(InputError, match=r"input V: shape \[100\] x batch 20 makes 8,000 bytes"):
        build_payloads(variable, shapes={"V": [100]}, batch_size=20)
    assert build_payloads(variable, shapes={"V": [100]}, batch_size=10)[0][0].array.shape == (
        10,
        100,
    )


def test_the_shape_flag_is_bounded():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="at most 268,435,456 per sample"):
        from_flags({"model": "m", "shape": "INPUT0:1000000,1000000"})
    assert from_flags({"model": "m", "shape": "INPUT0:16,16"}).shapes == {"INPUT0": [16, 16]}


@pytest.fixture()
def fake_triton(monkeypatch):
    """Triton replaced at its one client seam: add_batched READY, FP32 [16], batching."""
    client = mock.create_autospec(TritonClient, instance=True)
    client.model_states.return_value = [ModelState("add_batched", "1", "READY")]
    client.model_metadata.return_value = {
        "name": "add_batched",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}],
    }
    client.model_config.return_value = {"name": "add_batched", "max_batch_size": 64}
    monkeypatch.setattr(sweeps, "get_client", lambda *_: client)
    return client


def test_the_api_answers_bad_input_data_with_400_on_input_data_file(alice, redis_db, fake_triton):
    api = _page(alice)
    good = [0.5] * 16
    for sample, message in [
        ([0.5] * 15 + ["abc"], "input INPUT0, sample 1: 'abc' is not a number for FP32"),
        ({"b64": "%%%"}, "input INPUT0, sample 1: 'b64' holds 0 FP32 values for shape [16]"),
        ({"b64": "abc"}, "input INPUT0, sample 1: 'b64' is not valid base64"),
        ({"content": good, "shape": [10**12]}, "input INPUT0, sample 1: shape [1000000000000]"),
    ]:
        body = {"model": "add_batched", "input_data": {"data": [{"INPUT0": good},
                                                                {"INPUT0": sample}]}}  # fmt: skip
        response = api.post("/api/v1/sweeps/", body, content_type="application/json")
        assert response.status_code == 400, (sample, response.content)
        assert response.json()["field"] == "input_data_file", response.json()
        assert message in response.json()["message"], response.json()
    assert not Sweep.objects.exists()
    created = api.post(
        "/api/v1/sweeps/",
        {"model": "add_batched", "input_data": {"data": [{"INPUT0": good}]}},
        content_type="application/json",
    )
    assert created.status_code == 201, created.json()


def test_the_api_reads_its_json_body_itself_not_through_the_pages_form(
    alice, redis_db, fake_triton, monkeypatch
):
    from profiler_app.forms import SweepForm

    def through_the_form(self):
        raise AssertionError("the API went through the Benchmark form")

    monkeypatch.setattr(SweepForm, "clean", through_the_form)
    document = {"data": [{"INPUT0": [0.5] * 16}, {"INPUT0": [1.5] * 16}]}
    body = {
        "model": "add_batched", "mode": "request_rate", "request_rate_range": "100:200:100",
        "request_distribution": "poisson", "max_threads": 2, "rounds": 2, "input_data": document,
        "name": "  json  ", "engine": "builtin",
    }  # fmt: skip
    created = _page(alice).post("/api/v1/sweeps/", body, content_type="application/json")
    assert created.status_code == 201, created.content
    sweep = Sweep.objects.get()
    assert sweep.name == "json" and sweep.engine == "builtin"
    assert sweep.params == dataclasses.asdict(
        SweepParams(
            model="add_batched", mode="request_rate", start=100, end=200, step=100,
            input_data=document, arrival="poisson", max_threads=2, rounds=2,
            measurement_window_ms=2000, max_windows=10,  # the page's default preset
        )
    )  # fmt: skip


# --- who may cancel, resume and re-run --------------------------------------------------------


def _sweep(owner, state: str = "queued") -> Sweep:
    return Sweep.objects.create(
        model="add_batched", server="default", params={"model": "add_batched"},
        created_by=owner, state=state, queued_at=timezone.now(), levels_total=1,
    )  # fmt: skip


def test_another_operator_cannot_cancel_or_resume_and_is_told_who_can(alice, bob, redis_db):
    queued, failed = _sweep(alice), _sweep(alice, "failed")
    page, api = _page(bob), _page(bob)
    refusals = [
        page.post(f"/sweeps/{queued.pk}/cancel", HTTP_ACCEPT="application/json"),
        api.post(f"/api/v1/sweeps/{queued.pk}/cancel"),
        page.post(f"/sweeps/{failed.pk}/resume", HTTP_ACCEPT="application/json"),
    ]
    for response in refusals:
        assert response.status_code == 403, response.content
        assert response.json()["message"] == (
            "Started by alice: only the user who started it, or an Admin, can cancel or resume "
            "this sweep."
        )
    assert Sweep.objects.get(pk=queued.pk).state == "queued"
    assert not Sweep.objects.get(pk=queued.pk).cancel_requested
    assert Sweep.objects.get(pk=failed.pk).state == "failed"
    denied = AuditEvent.objects.filter(username="bob", outcome="denied")
    assert sorted(denied.values_list("action", flat=True)) == [
        "sweep.cancel",
        "sweep.cancel",
        "sweep.resume",
    ]
    assert all("only the user who started it, or an Admin" in e.detail for e in denied)


def test_the_owner_and_an_admin_may_cancel_and_resume(alice, dana, redis_db):
    mine, theirs = _sweep(alice), _sweep(alice)
    assert _page(alice).post(f"/api/v1/sweeps/{mine.pk}/cancel").status_code == 200
    reply = _page(dana).post(f"/sweeps/{theirs.pk}/cancel", HTTP_ACCEPT="application/json")
    assert reply.status_code == 200, reply.content
    assert {s.state for s in Sweep.objects.all()} == {"cancelled"}
    resumed = _page(alice).post(f"/sweeps/{mine.pk}/resume", HTTP_ACCEPT="application/json")
    assert resumed.status_code == 200 and Sweep.objects.get(pk=mine.pk).state == "queued"


def test_a_sweep_started_without_a_user_is_cancelled_by_admins_only(alice, dana, redis_db):
    cli = _sweep(None)
    refused = _page(alice).post(f"/api/v1/sweeps/{cli.pk}/cancel")
    assert refused.status_code == 403
    assert "only an Admin can cancel or resume" in refused.json()["message"]
    assert Sweep.objects.get(pk=cli.pk).state == "queued"
    assert _page(dana).post(f"/api/v1/sweeps/{cli.pk}/cancel").status_code == 200
    assert Sweep.objects.get(pk=cli.pk).state == "cancelled"


def test_any_operator_may_rerun_and_owns_the_new_sweep(alice, bob, redis_db):
    original = _sweep(alice, "succeeded")
    reply = _page(bob).post(f"/sweeps/{original.pk}/rerun", HTTP_ACCEPT="application/json")
    assert reply.status_code == 200, reply.content
    rerun = Sweep.objects.get(pk=reply.json()["sweep"])
    assert rerun.created_by.username == "bob" and rerun.rerun_of_id == original.pk


def test_the_page_shows_who_may_cancel_and_hides_the_buttons_from_others(alice, bob, redis_db):
    sweep = _sweep(alice)
    note = (
        "Started by alice: only the user who started it, or an Admin, can cancel or resume "
        "this sweep."
    )
    theirs = _page(bob).get(f"/sweeps/{sweep.pk}/").content.decode()
    assert note in theirs
    assert 'id="btn-cancel"' not in theirs and 'id="btn-resume"' not in theirs
    assert 'id="btn-rerun"' in theirs
    mine = _page(alice).get(f"/sweeps/{sweep.pk}/").content.decode()
    assert note in mine and 'id="btn-cancel"' in mine and 'id="btn-resume"' in mine


# --- downloads --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ('we"ird', 'attachment; filename="sweep-{pk}-we\\"ird.{ext}"'),
        (
            "a\r\nX-Injected: 1",
            "attachment; filename*=utf-8''sweep-{pk}-a%0D%0AX-Injected%3A%201.{ext}",
        ),
        ("modèle", "attachment; filename*=utf-8''sweep-{pk}-mod%C3%A8le.{ext}"),
    ],
)
def test_export_file_names_are_escaped(alice, redis_db, model, expected):
    sweep = _sweep(alice, "succeeded")
    Sweep.objects.filter(pk=sweep.pk).update(model=model)
    for ext in ("csv", "json"):
        response = _page(alice).get(f"/sweeps/{sweep.pk}/export.{ext}")
        assert response.status_code == 200
        assert response["Content-Disposition"] == expected.format(pk=sweep.pk, ext=ext)
        assert not response.has_header("X-Injected")
    assert json.loads(_page(alice).get(f"/sweeps/{sweep.pk}/export.json").content)
