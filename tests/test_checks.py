"""Checks: a tried request kept with its answer, run again on demand (API and CLI, exit 1
on a failure) and after a reload, as jobs; the comparison's tolerance both ways; the role
boundary (Viewers read results, only Operators and Admins keep and run checks)."""

from __future__ import annotations

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token

from inference.compare import compare
from inference.models import Check, CheckRun
from registry.servers import default, repository_key
from repository_app.models import ConfigRevision
from team.models import AuditEvent
from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient


def _kept(values, datatype="FP32"):
    return {"datatype": datatype, "shape": [len(values)], "data": list(values)}


def test_numbers_pass_within_their_tolerance_and_fail_beyond_it():
    kept = {"OUT": _kept([1.0, 2.0, float("nan")])}
    near = np.array([1.0, 2.0 + 1e-7, np.nan], dtype=np.float32)
    verdict = compare(kept, {"OUT": near}, {"OUT": "FP32"}, {})
    assert verdict.passed and verdict.worst is not None and verdict.worst < 1e-6
    far = np.array([1.0, 2.5, np.nan], dtype=np.float32)
    verdict = compare(kept, {"OUT": far}, {"OUT": "FP32"}, {})
    assert not verdict.passed and verdict.worst == pytest.approx(0.5)
    assert (
        "OUT: 1 of 3 values differ beyond atol 1e-06 + rtol 1e-05; at [1] 2.5 now, 2 kept"
        in verdict.message
    )
    loose = compare(kept, {"OUT": far}, {"OUT": "FP32"}, {"OUT": {"atol": 0.5, "rtol": 0}})
    assert loose.passed


def test_integers_and_strings_are_exact_and_shapes_and_types_must_match():
    ints = {"I": _kept([1, 2], "INT32")}
    assert compare(ints, {"I": np.array([1, 2], np.int32)}, {"I": "INT32"}, {}).passed
    verdict = compare(ints, {"I": np.array([1, 3], np.int32)}, {"I": "INT32"}, {})
    assert not verdict.passed and "1 of 2 values differ (exact)" in verdict.message
    text = {"T": _kept(["a", "b"], "BYTES")}
    assert compare(text, {"T": np.array([b"a", b"b"], object)}, {"T": "BYTES"}, {}).passed
    assert not compare(text, {"T": np.array([b"a", b"c"], object)}, {"T": "BYTES"}, {}).passed
    wrong_shape = compare(ints, {"I": np.array([[1, 2]], np.int32)}, {"I": "INT32"}, {})
    assert wrong_shape.message == "I: shape [1, 2] now, [2] kept"
    assert compare(ints, {}, {}, {}).message == "I: not in the answer"
    assert compare(ints, {"I": np.array([1, 2], np.int64)}, {"I": "INT64"}, {}).message == (
        "I: INT64 now, INT32 kept"
    )


def _api(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    set_role(user, role)
    return Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")


@pytest.mark.integration
@pytest.mark.django_db
def test_a_kept_answer_runs_again_on_demand_from_the_cli_and_after_a_reload(
    triton, django_user_model, settings, tmp_path, checks_here, capsys
):
    settings.TRY_RESULTS_DIR = tmp_path / "try"
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.load("add_sub")
    try:
        api = _api(django_user_model, "otto", OPERATOR)
        tried = api.post("/api/v1/models/add_sub/try", {
            "batch": 1, "inputs": {"INPUT0": {"mode": "random"}, "INPUT1": {"mode": "random"}},
        }, content_type="application/json").json()  # fmt: skip
        saved = api.post("/api/v1/models/add_sub/checks", {
            "name": "sum and difference", "result": tried["result"],
            "tolerance": {"OUTPUT0": {"atol": 1e-6, "rtol": 0}},
        }, content_type="application/json")  # fmt: skip
        assert saved.status_code == 201, saved.content
        check = Check.objects.get()
        sent = {t["name"]: np.array(t["data"], np.float32) for t in check.request["inputs"]}
        kept = np.array(check.expected["OUTPUT0"]["data"], np.float32)
        assert np.allclose(kept, sent["INPUT0"] + sent["INPUT1"])  # random inputs, kept as sent
        again = api.post("/api/v1/models/add_sub/checks", {
            "name": "sum and difference", "result": tried["result"],
        }, content_type="application/json")  # fmt: skip
        assert (again.status_code, again.json()["field"]) == (400, "name")
        # On demand, as a job, then read back with its last result.
        queued = api.post("/api/v1/models/add_sub/checks/run")
        assert queued.status_code == 202 and queued.json()["runs"][0]["state"] == "queued"
        assert checks_here() == ["succeeded"]
        listed = api.get("/api/v1/models/add_sub/checks").json()["checks"]
        assert (
            listed[0]["last_run"]["passed"] is True
            and listed[0]["last_run"]["trigger"] == "on demand"
        )
        # The CLI: PASS, exit 0; with the kept answer off by 0.25, FAIL and exit 1.
        call_command("triton", "check", "add_sub", "--as-user", "otto")
        assert "PASS sum and difference on default: every output as kept" in capsys.readouterr().out
        check.expected["OUTPUT0"]["data"][3] += 0.25
        check.save()
        with pytest.raises(CommandError, match="1 check failed"):
            call_command("triton", "check", "add_sub", "--as-user", "otto")
        out = capsys.readouterr().out
        assert "FAIL sum and difference on default: OUTPUT0: 1 of 16 values differ" in out
        assert "worst difference 0.25" in out
        # A reload (here the API's, with ?wait=1) runs the model's checks on that server; a
        # failure offers the config revision before the last save.
        for number in (1, 2):
            ConfigRevision.objects.create(
                repository=repository_key(default()), model="add_sub", number=number,
                text=f"# {number}", sha256=f"{number}", source="form",
            )  # fmt: skip
        assert api.post("/api/v1/models/add_sub/reload?wait=1").status_code == 200
        run = CheckRun.objects.get(state="queued")
        assert run.trigger == "after reload" and run.username == "otto"
        checks_here()
        run.refresh_from_db()
        assert run.passed is False and run.worst == pytest.approx(0.25)
        offer = api.get("/api/v1/models/add_sub/checks").json()["checks"][0]["last_run"]["restore"]
        assert offer == {"number": 1, "url": "/models/add_sub/config/history/#revision-1"}
        assert AuditEvent.objects.filter(action="check.run", outcome="failed").count() == 2
        # Viewers read the results; keeping and running are refused before anything is read.
        viewer = _api(django_user_model, "vera", VIEWER)
        assert (
            viewer.get("/api/v1/models/add_sub/checks").json()["checks"][0]["last_run"]["passed"]
            is False
        )
        assert viewer.post("/api/v1/models/add_sub/checks/run").status_code == 403
        refused = viewer.post("/api/v1/models/add_sub/checks", {"name": "x", "result": tried["result"]},
                              content_type="application/json")  # fmt: skip
        assert refused.status_code == 403 and Check.objects.count() == 1
        exported = viewer.get("/api/v1/models/add_sub/checks?export=1").json()["checks"][0]
        assert exported["request"]["inputs"][0]["name"] == "INPUT0" and "expected" in exported
    finally:
        if not was_ready:
            client.unload("add_sub")


@pytest.mark.django_db
def test_a_rollout_shows_the_checks_its_reloads_ran_on_each_server(django_user_model):
    from fleet.models import Rollout, RolloutTarget

    admin = django_user_model.objects.create_superuser("ada", password="pw-ada-12345")
    rollout = Rollout.objects.create(action="reload", model="add_sub", chosen="hand-picked: default",
                                     user=admin, username="ada", state="succeeded")  # fmt: skip
    RolloutTarget.objects.create(rollout=rollout, server="default", state="succeeded")
    check = Check.objects.create(model="add_sub", name="a", request={}, expected={}, username="ada")
    other = Check.objects.create(model="add_sub", name="b", request={}, expected={}, username="ada")
    trigger = f"rollout #{rollout.pk}"
    CheckRun.objects.create(saved_check=check, server="default", username="ada", trigger=trigger,
                            state="succeeded", passed=True, worst=0.0)  # fmt: skip
    CheckRun.objects.create(saved_check=other, server="default", username="ada", trigger=trigger,
                            state="succeeded", passed=False, worst=0.5)  # fmt: skip
    CheckRun.objects.create(saved_check=other, server="default", username="ada",
                            trigger="on demand", state="succeeded", passed=False)  # fmt: skip
    client = Client()
    client.force_login(admin)
    (target,) = client.get(f"/api/v1/rollouts/{rollout.pk}/").json()["targets"]
    assert target["checks"] == {"passed": 1, "failed": 1, "pending": 0, "worst": 0.5}
    page = client.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert "1 passed, 1 failed</span> (worst difference 0.5)" in page
