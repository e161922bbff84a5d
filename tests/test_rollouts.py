"""Rollouts without a Triton: how servers are chosen, the checks each target makes before
Triton is asked, the outcome's words, a target whose worker died, cancel and resume."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from fleet.models import Rollout, RolloutTarget
from fleet.rollouts import runner, target_job
from fleet.rollouts.choose import ChoiceError, choose, hand_picked
from jobs import lifecycle
from registry.models import TritonServer
from repository_app import control
from team.models import AuditEvent
from team.roles import OPERATOR, set_role


def _row(name: str, repository: Path, port: int, **labels: str) -> None:
    TritonServer.objects.create(
        name=name, grpc_url=f"127.0.0.1:{port}", http_url=f"127.0.0.1:{port + 1}",
        metrics_url=f"http://127.0.0.1:{port + 2}/metrics", repository=str(repository),
        labels=labels,
    )  # fmt: skip


@pytest.fixture()
def fleet(tmp_path, settings):
    """default and "twin" on one repository, "far" on its own; nothing answers at any."""
    settings.TRITON_URL = "127.0.0.1:1"
    settings.MODEL_REPOSITORY = tmp_path / "shared"
    (tmp_path / "shared" / "m" / "1").mkdir(parents=True)
    (tmp_path / "far" / "only_far" / "1").mkdir(parents=True)
    _row("twin", tmp_path / "shared", 3, env="prod")
    _row("far", tmp_path / "far", 6, env="prod", gpu="H200")
    return tmp_path


@pytest.mark.django_db
def test_the_three_ways_to_choose_resolve_to_servers_in_the_registrys_order(fleet):
    shared = choose(repository_of="twin")
    assert shared.names == ["default", "twin"]
    assert shared.described == f"every server on repository {fleet / 'shared'}"
    assert choose(label="env=prod").names == ["far", "twin"]
    assert choose(label=" gpu = H200 ").described == "label gpu=H200"
    picked = choose(servers=["twin", "default", "twin"])
    assert (picked.names, picked.described) == (["default", "twin"], "hand-picked: default, twin")
    assert hand_picked("far, default").names == ["default", "far"]  # the CLI's spelling


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("given", "field", "says", "unknown"),
    [
        ({}, None, "choose the servers one way", False),
        ({"label": "a=b", "servers": ["twin"]}, None, "got label, servers", False),
        ({"label": "env"}, "label", "NAME=VALUE", False),
        ({"label": "env=pr od"}, "label", "1 to 63 ASCII", False),
        ({"label": "env=dev"}, "label", "no server has the label env=dev", False),
        ({"servers": ["twin", ["x"]]}, "servers", "a server name is text", False),
        ({"servers": ["twin", "bogus"]}, "servers", "no Triton server named 'bogus'", True),
        ({"repository_of": "bogus"}, "repository_of", "no Triton server named", True),
        ({"repository_of": ["twin"]}, "repository_of", "a server name is text", False),
    ],
)
def test_a_bad_choice_names_its_field(fleet, given, field, says, unknown):
    with pytest.raises(ChoiceError) as caught:
        choose(**given)
    assert caught.value.field == field and says in caught.value.message
    assert caught.value.unknown is unknown


def _target(rollout: Rollout, server: str) -> RolloutTarget:
    return RolloutTarget.objects.get(rollout=rollout, server=server)


def _run(target: RolloutTarget) -> str:
    """A target through the one lifecycle, in this process (as a worker's task runs it)."""
    return lifecycle.run(target_job.KIND, target.pk)


@pytest.mark.django_db
def test_each_target_checks_its_server_before_triton_and_fails_alone(
    fleet, django_user_model, redis_db, monkeypatch
):
    """far has no such model, twin is removed after the start, default does not answer,
    and a server in POLL mode says so: four failures, each with its reason."""
    from triton_api.client import TritonClient

    # Every Triton's index answers "no such model" (their control calls find nobody).
    monkeypatch.setattr(TritonClient, "repository_index", lambda self: [])
    user = django_user_model.objects.create_user("ops")
    set_role(user, OPERATOR)
    rollout = runner.create("load", "m", choose(servers=["default", "twin", "far"]), user)
    assert [t.state for t in rollout.targets.all()] == ["queued"] * 3
    assert [t["state"] for t in runner.snapshot(rollout.pk)["targets"]] == ["pending"] * 3
    TritonServer.objects.filter(name="twin").delete()
    for target in rollout.targets.all():
        assert _run(target) == "failed"
    assert (_target(rollout, "far").reason, _target(rollout, "far").message) == (
        "no model",
        f"no model 'm' in the repository of far ({fleet / 'far'}) nor known to its Triton",
    )
    assert _target(rollout, "twin").reason == "unknown server"
    assert _target(rollout, "default").reason == "unreachable"
    assert "Triton unreachable at 127.0.0.1:1" in _target(rollout, "default").message
    rollout.refresh_from_db()  # the last target to end set the outcome
    assert rollout.state == "failed" and rollout.summary == (
        "failed: 3 failed (default: unreachable; far: no model; twin: unknown server)"
    )
    audited = AuditEvent.objects.filter(action="load", target=f"rollout #{rollout.pk}")
    assert sorted(audited.values_list("server", "outcome")) == [
        ("default", "failed"), ("far", "failed"), ("twin", "failed"),
    ]  # fmt: skip
    monkeypatch.setattr(TritonClient, "control_mode", lambda self: "none/poll")
    polled = runner.create("unload", "m", choose(servers=["default"]), user)
    _run(polled.targets.get())
    target = polled.targets.get()
    assert (target.state, target.reason, target.message) == (
        "failed", "not explicit", control.NOT_EXPLICIT,
    )  # fmt: skip


@pytest.mark.django_db
def test_a_bad_action_or_model_name_is_refused_before_anything_is_recorded(
    fleet, django_user_model, redis_db
):
    user = django_user_model.objects.create_user("ops")
    set_role(user, OPERATOR)
    choice = choose(servers=["default"])
    for action, model, field in (("restart", "m", "action"), ("load", "a;b", "model")):
        with pytest.raises(runner.RolloutRefused) as caught:
            runner.create(action, model, choice, user)
        assert (caught.value.status, caught.value.field) == (400, field)
    with pytest.raises(runner.RolloutRefused) as caught:
        runner.create("load", "m", choice, django_user_model.objects.create_user("viewer"))
    assert caught.value.status == 403
    assert not Rollout.objects.exists()
    assert AuditEvent.objects.get(action="load").outcome == "denied"


def test_the_summary_counts_and_names_each_failure():
    def targets(*states: str) -> list[RolloutTarget]:
        return [
            RolloutTarget(
                server=f"s{i}", state=state, reason="" if state == "succeeded" else "busy"
            )
            for i, state in enumerate(states)
        ]

    assert runner.summarize("load", targets("succeeded", "succeeded")) == (
        "succeeded", "succeeded: 2 loaded",
    )  # fmt: skip
    assert runner.summarize("reload", targets("succeeded", "failed", "succeeded")) == (
        "partial", "partial: 2 reloaded, 1 failed (s1: busy)",
    )  # fmt: skip


@pytest.mark.django_db
def test_a_target_whose_worker_died_is_interrupted_by_any_watchdog_not_a_page(
    fleet, django_user_model, redis_db, monkeypatch
):
    from profiler_app import watchdog

    sent: list[int] = []
    monkeypatch.setattr(lifecycle, "dispatch", lambda kind, pk: sent.append(pk) or True)
    user = django_user_model.objects.create_user("ops")
    set_role(user, OPERATOR)
    rollout = runner.create("load", "m", choose(servers=["default", "far"]), user)
    default, far = _target(rollout, "default"), _target(rollout, "far")
    # A worker (on whatever host) claimed default, then died: its heartbeat stopped.
    assert lifecycle.claim(target_job.KIND, default.pk, {"worker": "w1@gpu-host-2"})
    stale = timezone.now() - timedelta(seconds=lifecycle.STALE_AFTER_S + 5)
    RolloutTarget.objects.filter(pk=default.pk).update(heartbeat_at=stale)
    # far's task went missing an hour ago.
    RolloutTarget.objects.filter(pk=far.pk).update(
        dispatched_at=timezone.now() - timedelta(hours=1)
    )
    # Looking at it changes nothing (pages and the API only read)...
    assert runner.snapshot(rollout.pk)["targets"][0]["state"] == "running"
    assert not RolloutTarget.objects.filter(state="interrupted").exists()
    # ...the workers' watchdog ends the dead one and sends the lost one again.
    watchdog.check()
    default.refresh_from_db()
    assert (default.state, default.reason) == ("interrupted", "interrupted")
    assert "stopped sending heartbeats" in default.message
    assert sent == [far.pk]
    shown = runner.snapshot(rollout.pk)
    assert shown["state"] == "running", "far is still queued"
    assert [t["state"] for t in shown["targets"]] == ["failed", "pending"]
    assert shown["targets"][0]["placement"]["worker"] == "w1@gpu-host-2"


@pytest.mark.django_db
def test_cancel_ends_the_queued_targets_and_resume_queues_them_again(
    fleet, django_user_model, redis_db, monkeypatch, django_capture_on_commit_callbacks
):
    from django.test import Client

    sent: list[int] = []
    monkeypatch.setattr(lifecycle, "dispatch", lambda kind, pk: sent.append(pk) or True)
    operator = django_user_model.objects.create_user("ops")
    set_role(operator, OPERATOR)
    client = Client()
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=True):
        created = client.post(
            "/api/v1/rollouts/", {"action": "load", "model": "m", "servers": ["default", "far"]},
            content_type="application/json",
        )  # fmt: skip
    assert created.status_code == 201
    pk = created.json()["id"]
    assert sorted(sent) == sorted(RolloutTarget.objects.values_list("pk", flat=True))
    # A Viewer may neither cancel nor resume.
    viewer = Client()
    viewer.force_login(django_user_model.objects.create_user("vi"))
    assert viewer.post(f"/api/v1/rollouts/{pk}/cancel").status_code == 403
    cancelled = client.post(f"/api/v1/rollouts/{pk}/cancel")
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert body["state"] == "failed" and body["summary"] == (
        "failed: 2 failed (default: cancelled; far: cancelled)"
    )
    assert set(RolloutTarget.objects.values_list("state", flat=True)) == {"cancelled"}
    assert client.post(f"/api/v1/rollouts/{pk}/cancel").status_code == 400  # nothing open
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        resumed = client.post(f"/api/v1/rollouts/{pk}/resume")
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["state"] == "running"
    assert [t["state"] for t in resumed.json()["targets"]] == ["pending", "pending"]
    assert len(sent) == 2
    # The resumed targets run through the lifecycle again, with their own checks.
    for target in RolloutTarget.objects.filter(rollout_id=pk):
        _run(target)
    assert Rollout.objects.get(pk=pk).summary == (
        "failed: 2 failed (default: unreachable; far: unreachable)"
    )
    assert AuditEvent.objects.filter(action="rollout cancel", outcome="ok").count() == 1
    assert AuditEvent.objects.filter(action="rollout resume", outcome="ok").count() == 1
    assert AuditEvent.objects.filter(action="rollout cancel", outcome="denied").count() == 1


@pytest.mark.django_db
def test_the_form_lists_where_a_choice_goes_and_starts_nothing_it_did_not_list(
    fleet, django_user_model, redis_db
):
    from django.test import Client

    operator = django_user_model.objects.create_user("ops")
    set_role(operator, OPERATOR)
    client = Client()
    client.force_login(operator)
    model_page = client.get("/models/m/").content.decode()
    assert 'id="rollout-link" href="/rollouts/new?model=m"' in model_page
    # From twin's pages, "every server on the repository" starts as twin's.
    page = client.get("/rollouts/new", {"model": "m", "server": "twin"}).content.decode()
    assert re.findall(r'<tr data-server="([^"]+)"', page) == ["default", "twin"]
    page = client.get(
        "/rollouts/new", {"model": "m", "action": "reload", "choice": "label", "label": "env=prod"}
    ).content.decode()
    assert re.findall(r'<tr data-server="([^"]+)"', page) == ["far", "twin"]
    assert 'name="expect" value="far,twin"' in page and "label env=prod" in page
    assert "not in its repository on disk" in page  # far has no m
    start = {"action": "reload", "model": "m", "choice": "label", "label": "env=prod"}
    changed = client.post("/rollouts/", {**start, "expect": "far"})
    assert changed.status_code == 409
    assert "this choice now means far, twin, not far as listed" in changed.content.decode()
    bad = client.post("/rollouts/", {**start, "label": "env"})
    assert bad.status_code == 400 and 'data-field="label"' in bad.content.decode()
    bad = client.post("/rollouts/", {**start, "model": "a b"})
    assert bad.status_code == 400 and "invalid model name" in bad.content.decode()
    unknown = client.post("/rollouts/", {**start, "choice": "servers", "servers": ["nope"]})
    assert unknown.status_code == 404
    viewer = Client()
    viewer.force_login(django_user_model.objects.create_user("vi"))
    refused = viewer.post("/rollouts/", {**start, "expect": "far,twin"})
    assert refused.status_code == 403
    assert "your role cannot load or unload models on far, twin" in refused.content.decode()
    assert not Rollout.objects.exists()
