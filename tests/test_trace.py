"""Trace one request, against the real tritonserver's trace files: turned on for the next N
requests as a job, each traced request a timeline (an ensemble's steps nested), off again
when N are traced, when asked, or at the time limit; the roles and the file allow-list."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inference.models import TraceSession
from jobs import lifecycle
from team.models import AuditEvent
from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration]


def _api(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    set_role(user, role)
    return Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")


def _infer(client: TritonClient, model: str, times: int) -> None:
    ones = np.ones((1, 16), np.float32)
    for _ in range(times):
        client.infer(model, [("INPUT0", "FP32", ones), ("INPUT1", "FP32", ones)], ["OUTPUT0"],
                     max_request_bytes=1 << 20, max_response_bytes=1 << 20, timeout_s=30)  # fmt: skip


@pytest.fixture(scope="module")
def served(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    models = ("add_sub", "add_batched", "ensemble_two_step")
    before = {m: any(s.state == "READY" for s in client.model_states(m)) for m in models}
    client.load("ensemble_two_step")
    client.load("add_sub")
    yield client
    for model in ("add_sub", "add_batched", "ensemble_two_step"):
        client.update_trace_settings(model, {"trace_level": ["OFF"]})
    for model in ("ensemble_two_step", "add_sub", "add_batched"):
        if not before[model]:
            client.unload(model)


@pytest.mark.django_db
def test_the_next_n_requests_are_traced_then_tracing_stops(served, django_user_model, traces_here):
    api = _api(django_user_model, "otto", OPERATOR)
    asked = api.post("/api/v1/models/add_sub/trace", {"count": 2, "minutes": 5},
                     content_type="application/json")  # fmt: skip
    assert asked.status_code == 202 and asked.json()["session"]["state"] == "queued"
    again = api.post("/api/v1/models/add_sub/trace", {"count": 1}, content_type="application/json")
    assert again.status_code == 409
    assert traces_here() == ["succeeded"]
    settings_now = served.trace_settings("add_sub")
    assert settings_now["trace_level"] == ["TIMESTAMPS"] and settings_now["trace_count"] == ["2"]
    _infer(served, "add_sub", 3)
    shown = api.get("/api/v1/models/add_sub/trace").json()
    assert shown["unavailable"] is None
    assert len(shown["timelines"]) == 2  # the next two requests, not the third
    first = shown["timelines"][0]
    assert first["model"] == "add_sub" and first["total_ms"] > 0
    assert [p["name"] for p in first["parts"]] == [
        "queue", "compute input", "infer", "compute output", "response",
    ]  # fmt: skip
    # Triton stopped by itself; a watchdog pass ends the session and says why.
    lifecycle.KINDS["trace"].tidy()
    session = TraceSession.objects.get()
    assert session.ended_why == "all 2 requests traced"
    assert served.trace_settings("add_sub")["trace_level"] == ["OFF"]
    assert list(AuditEvent.objects.filter(action__startswith="trace.").order_by("id").values_list("action", "outcome")) == [
        ("trace.on", "ok"), ("trace.off", "ok"),
    ]  # fmt: skip


@pytest.mark.django_db
def test_an_ensemble_s_steps_nest_and_tracing_ends_when_asked_or_at_its_limit(
    served, django_user_model, traces_here
):
    api = _api(django_user_model, "otto", OPERATOR)
    api.post(
        "/api/v1/models/ensemble_two_step/trace", {"count": 5}, content_type="application/json"
    )
    traces_here()
    _infer(served, "ensemble_two_step", 1)
    (timeline,) = api.get("/api/v1/models/ensemble_two_step/trace").json()["timelines"]
    assert [c["model"] for c in timeline["children"]] == ["add_sub", "add_batched"]
    assert all(c["start_ms"] >= 0 for c in timeline["children"])
    stopped = api.post("/api/v1/models/ensemble_two_step/trace/stop")
    assert stopped.json()["message"] == "tracing of ensemble_two_step off: stopped by otto"
    assert served.trace_settings("ensemble_two_step")["trace_level"] == ["OFF"]
    # The time limit: any worker's watchdog turns it off.
    api.post(
        "/api/v1/models/add_sub/trace", {"count": 50, "minutes": 1}, content_type="application/json"
    )
    traces_here()
    TraceSession.objects.filter(model="add_sub").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    lifecycle.KINDS["trace"].tidy()
    assert TraceSession.objects.get(model="add_sub").ended_why == "time limit"
    assert served.trace_settings("add_sub")["trace_level"] == ["OFF"]


@pytest.mark.django_db
def test_viewers_read_traces_and_files_are_read_only_inside_the_roots(
    served, django_user_model, settings, tmp_path
):
    viewer = _api(django_user_model, "vera", VIEWER)
    assert viewer.get("/api/v1/models/add_sub/trace").status_code == 200
    refused = viewer.post(
        "/api/v1/models/add_sub/trace", {"count": 1}, content_type="application/json"
    )
    assert refused.status_code == 403
    assert AuditEvent.objects.get(action="trace.on").outcome == "denied"
    assert viewer.post("/api/v1/models/add_sub/trace/stop").status_code == 403
    operator = _api(django_user_model, "otto", OPERATOR)
    bad = operator.post(
        "/api/v1/models/add_sub/trace", {"count": 0}, content_type="application/json"
    )
    assert (bad.status_code, bad.json()["field"]) == (400, "count")
    TraceSession.objects.create(model="add_sub", server="default", count=1, username="otto",
                                state="succeeded", expires_at=timezone.now())  # fmt: skip
    settings.TRITON_TRACE_ROOTS = [tmp_path]
    shown = viewer.get("/api/v1/models/add_sub/trace").json()
    assert "outside TRITON_TRACE_ROOTS" in shown["unavailable"] and shown["timelines"] == []
