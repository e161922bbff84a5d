"""Rollouts on three real Triton servers: "default" (the suite's), "shared" (on default's
repository) and "solo" (on its own). Every target is a real load, unload or reload."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from fleet.models import Rollout
from fleet.rollouts import runner, target_job
from fleet.rollouts.choose import hand_picked
from repository_app import control
from repository_app.models import ModelIntent
from team.models import AuditEvent
from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

from .conftest import BROWSER_WAIT_MS, SOLO_ONLY, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parent.parent
BOUND_S = 120  # an upper bound for a rollout started by a page to end


def _operator(django_user_model, name: str = "ops"):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user(name, password=f"pw-{name}-123")
    set_role(user, OPERATOR)
    return user


def _states(fixture, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.state for s in TritonClient(fixture.grpc_url, fixture.metrics_url).model_states(name)]


def _unload(name: str, *fixtures) -> None:  # type: ignore[no-untyped-def]
    for fixture in fixtures:
        TritonClient(fixture.grpc_url, fixture.metrics_url).unload(name)


def _targets(rollout: Rollout) -> dict[str, tuple[str, str]]:
    return {t.server: (t.state, t.reason) for t in rollout.targets.all()}


def test_a_stopped_server_fails_alone_and_each_server_keeps_its_own_desired_loads(
    triton, triton_shared, triton_solo, shared_server, solo_server, redis_db, django_user_model
):
    user = _operator(django_user_model)
    # solo loads a model of its own first: after its restart, that is what it is offered.
    assert control.run_action(solo_server, "load", SOLO_ONLY, "ops", user_id=user.pk).ok
    triton_solo.stop()
    try:
        rollout = runner.create("load", "add_sub", hand_picked(["default", "shared", "solo"]), user)
        runner.run_here(rollout, "test")
    finally:
        triton_solo.restart()
    try:
        assert _targets(rollout) == {
            "default": ("succeeded", ""),
            "shared": ("succeeded", ""),
            "solo": ("failed", "unreachable"),
        }
        assert rollout.state == "partial"
        assert rollout.summary == "partial: 2 loaded, 1 failed (solo: unreachable)"
        assert triton_solo.grpc_url in rollout.targets.get(server="solo").message
        # READY on both (a server may also list a version an earlier test removed from
        # the shared repository, as UNAVAILABLE: Triton's own memory, not this rollout's).
        assert "READY" in _states(triton, "add_sub") and "READY" in _states(
            triton_shared, "add_sub"
        )
        audited = AuditEvent.objects.filter(target=f"rollout #{rollout.pk}", action="load")
        assert sorted(audited.values_list("server", "outcome")) == [
            ("default", "ok"), ("shared", "ok"), ("solo", "failed"),
        ]  # fmt: skip
        wanted = set(ModelIntent.objects.filter(loaded=True).values_list("server", "name"))
        assert wanted == {("default", "add_sub"), ("shared", "add_sub"), ("solo", SOLO_ONLY)}
        # Restarted, solo is offered its own previous load, and no other server's.
        page = Client()
        page.force_login(user)
        solo_page = page.get("/models/", {"server": "solo"}).content.decode()
        banner = re.search(r'<form[^>]*id="restore-banner".*?</form>', solo_page, re.S)
        assert banner and SOLO_ONLY in banner[0] and "add_sub" not in banner[0]
        assert 'id="restore-banner"' not in page.get("/models/").content.decode()
    finally:
        _unload("add_sub", triton, triton_shared)


def test_a_server_without_the_model_fails_with_why_and_a_save_offers_reload_where_loaded(
    triton,
    triton_shared,
    triton_solo,
    shared_server,
    solo_server,
    redis_db,
    django_user_model,
    celery_worker,
):
    user = _operator(django_user_model)
    model = "add_batched"  # on default's (and shared's) repository, not on solo's
    rollout = runner.create("load", model, hand_picked(["default", "shared", "solo"]), user)
    runner.run_here(rollout, "test")
    path = triton.repository / model / "config.pbtxt"
    original = path.read_bytes()
    try:
        assert _targets(rollout) == {
            "default": ("succeeded", ""),
            "shared": ("succeeded", ""),
            "solo": ("failed", "no model"),
        }
        assert f"no model '{model}' in the repository of solo" in (
            rollout.targets.get(server="solo").message
        )
        # A save through the editor: the page it lands on lists where the model is loaded
        # and offers the reload there, as one rollout; nothing is reloaded until it is asked.
        editor = Client()
        editor.force_login(user)
        api = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        opened = api.get(f"/api/v1/models/{model}/config").json()
        saved = editor.post(
            f"/models/{model}/config/",
            {"mode": "text", "action": "save", "base_sha": opened["sha256"],
             "text": opened["text"] + "# saved once\n"},
        )  # fmt: skip
        assert saved.status_code == 302, saved.content
        page = editor.get(saved["Location"]).content.decode()
        offer = re.search(r'<form[^>]*id="reload-offer-form".*?</form>', page, re.S)
        assert offer, page
        assert re.search(r'id="reload-offer-servers">default, shared<', page)
        assert not Rollout.objects.filter(action="reload").exists()
        fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', offer[0]))
        assert fields["servers"] == "shared" and fields["expect"] == "default,shared"
        posted = editor.post("/rollouts/", {**fields, "servers": ["default", "shared"]})
        assert posted.status_code == 302, posted.content
        reload = Rollout.objects.get(action="reload")
        assert posted["Location"] == f"/rollouts/{reload.pk}/"
        wait_for(lambda: Rollout.objects.get(pk=reload.pk).finished_at, BOUND_S, "the reload's end")
        reload.refresh_from_db()
        assert reload.summary == "succeeded: 2 reloaded"
        assert reload.chosen == (
            "hand-picked: default, shared (where it was loaded when its config was saved)"
        )
        # A second look at the editor offers nothing: the offer belongs to that save.
        assert 'id="reload-offer"' not in editor.get(saved["Location"]).content.decode()
        # The API's save says the same, for a script to post.
        current = api.get(f"/api/v1/models/{model}/config").json()
        put = api.put(
            f"/api/v1/models/{model}/config", {"text": current["text"] + "# saved twice\n"},
            content_type="application/json", HTTP_IF_MATCH=f'"{current["sha256"]}"',
        )  # fmt: skip
        assert put.status_code == 200, put.content
        assert put.json()["reload_where_loaded"]["rollout"] == {
            "action": "reload", "model": model, "servers": ["default", "shared"],
            "note": "config_saved",
        }  # fmt: skip
    finally:
        path.write_bytes(original)
        _unload(model, triton, triton_shared)


def test_a_role_taken_away_during_a_rollout_refuses_that_servers_target(
    triton, triton_shared, shared_server, redis_db, django_user_model, monkeypatch
):
    """Roles narrowed per server (team.backends, where they will be): the user controls
    both servers at the start, then loses "shared" before its target runs."""
    from team.backends import ServerPermissionBackend

    user = _operator(django_user_model)
    taken: set[str] = set()
    granted = ServerPermissionBackend.has_perm

    def has_perm(self, user_obj, perm, obj=None):  # type: ignore[no-untyped-def]
        if obj is not None and getattr(obj, "name", None) in taken:
            return False
        return granted(self, user_obj, perm, obj)

    monkeypatch.setattr(ServerPermissionBackend, "has_perm", has_perm)
    # Between the start and each target's own check (whichever target runs first).
    monkeypatch.setattr(target_job, "before_target", lambda target: taken.add("shared"))
    rollout = runner.create("unload", "add_sub", hand_picked(["default", "shared"]), user)
    assert rollout.targets.filter(state="queued").count() == 2  # both allowed at the start
    runner.run_here(rollout, "test")
    assert _targets(rollout) == {
        "default": ("succeeded", ""),
        "shared": ("failed", "not permitted"),
    }
    assert rollout.targets.get(server="shared").message == (
        "your role cannot load or unload models on shared"
    )
    denied = AuditEvent.objects.get(target=f"rollout #{rollout.pk}", outcome="denied")
    assert (denied.server, denied.action) == ("shared", "unload")


def test_the_cli_runs_a_rollout_when_several_servers_are_named(
    triton, triton_solo, solo_server, service_env, django_user_model
):
    _operator(django_user_model)

    def triton_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "triton", *args, "--as-user", "ops"],
            cwd=ROOT, env=service_env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = triton_cli("unload", "add_sub", "--server", "default", "--server", "solo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["[default] add_sub unloaded", "[solo] add_sub unloaded"]
    assert re.fullmatch(r"rollout #\d+ succeeded: 2 unloaded", lines[2])
    failed = triton_cli("unload", SOLO_ONLY, "--server", "solo", "--server", "default")
    assert failed.returncode == 1
    lines = failed.stdout.splitlines()
    assert lines[0].startswith(f"[default] failed (no model): no model '{SOLO_ONLY}'")
    assert lines[1] == f"[solo] {SOLO_ONLY} unloaded"
    assert re.search(
        r"rollout #\d+ partial: 1 unloaded, 1 failed \(default: no model\)", failed.stderr
    )


def test_the_api_refuses_bad_fields_unknown_servers_and_viewers_and_reports_each_server(
    triton, triton_solo, solo_server, redis_db, django_user_model, celery_worker
):
    def api(user) -> Client:  # type: ignore[no-untyped-def]
        return Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")

    operator = api(_operator(django_user_model))
    viewer_user = django_user_model.objects.create_user("vi")
    set_role(viewer_user, VIEWER)

    def post(client: Client, body: dict, query: str = ""):  # type: ignore[no-untyped-def]
        return client.post(f"/api/v1/rollouts/{query}", body, content_type="application/json")

    good = {"action": "unload", "model": "add_sub", "servers": ["default", "solo"]}
    for body, field in (
        ({**good, "action": "restart"}, "action"),
        ({**good, "model": "../x"}, "model"),
        ({**good, "server": "solo"}, "server"),
        ({**good, "label": "role=solo"}, None),
        ({"action": "load", "model": "add_sub", "label": "role"}, "label"),
        ({**good, "note": "because"}, "note"),
    ):
        response = post(operator, body)
        assert response.status_code == 400, (body, response.content)
        assert response.json()["field"] == field, response.json()
    unknown = post(operator, {**good, "servers": ["default", "bogus"]})
    assert (unknown.status_code, unknown.json()["field"]) == (404, "servers")
    assert "no Triton server named 'bogus'" in unknown.json()["message"]
    # A Viewer is refused on the role alone, before the body is read (security review, item 1).
    refused = post(api(viewer_user), good)
    assert refused.status_code == 403
    assert refused.json()["message"] == "your role cannot load or unload models"
    assert not Rollout.objects.exists()
    assert AuditEvent.objects.filter(username="vi", outcome="denied", action="rollout").count() == 1
    # By label: the fixture labels each extra server role=<its name>.
    done = post(operator, {"action": "unload", "model": "add_sub", "label": "role=solo"}, "?wait=1")
    assert done.status_code == 200, done.content
    body = done.json()
    assert (body["chosen"], body["state"], body["summary"]) == (
        "label role=solo", "succeeded", "succeeded: 1 unloaded",
    )  # fmt: skip
    assert [(t["server"], t["state"]) for t in body["targets"]] == [("solo", "succeeded")]
    assert operator.get(f"/api/v1/rollouts/{body['id']}/").json() == body
    assert operator.get("/api/v1/rollouts/99999/").status_code == 404
    page = Client()
    page.force_login(viewer_user)
    html = page.get(f"/rollouts/{body['id']}/").content.decode()
    assert 'data-server="solo"' in html and "succeeded: 1 unloaded" in html


async def test_the_rollout_socket_sends_the_rollout_first_then_each_change(
    triton, triton_shared, shared_server, redis_db, django_user_model
):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from dashboard.asgi import application

    user = await sync_to_async(_operator)(django_user_model)
    choice = await sync_to_async(hand_picked)(["default", "shared"])
    rollout = await sync_to_async(runner.create)("unload", "add_sub", choice, user)
    socket = WebsocketCommunicator(
        application, f"/ws/rollouts/{rollout.pk}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )  # fmt: skip
    socket.scope["user"] = user
    connected, _ = await socket.connect()
    assert connected
    first = await socket.receive_json_from(timeout=BROWSER_WAIT_MS / 1000)
    assert first["type"] == "rollout.snapshot" and first["rollout"]["state"] == "running"
    assert [(t["server"], t["state"]) for t in first["rollout"]["targets"]] == [
        ("default", "pending"), ("shared", "pending"),
    ]  # fmt: skip
    await sync_to_async(runner.run_here)(rollout, "test")
    # Two running, two succeeded, one end: five events (targets run at once, so the two
    # servers' events may interleave).
    events = [await socket.receive_json_from(timeout=BROWSER_WAIT_MS / 1000) for _ in range(5)]
    seen: dict[str, list[str]] = {"default": [], "shared": []}
    for event in events:
        if event["type"] == "rollout.target":
            assert event["rollout"] == rollout.pk
            seen[event["server"]].append(event["state"])
    assert seen == {"default": ["running", "succeeded"], "shared": ["running", "succeeded"]}
    end = [e for e in events if e["type"] == "rollout.state"]
    assert [(e["state"], e["summary"]) for e in end] == [("succeeded", "succeeded: 2 unloaded")]
    await socket.disconnect()
    # A late joiner gets the finished rollout first.
    late = WebsocketCommunicator(
        application, f"/ws/rollouts/{rollout.pk}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )  # fmt: skip
    late.scope["user"] = user
    assert (await late.connect())[0]
    snapshot = await late.receive_json_from(timeout=BROWSER_WAIT_MS / 1000)
    assert snapshot["rollout"]["summary"] == "succeeded: 2 unloaded"
    await late.disconnect()
    missing = WebsocketCommunicator(
        application, "/ws/rollouts/99999/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )  # fmt: skip
    missing.scope["user"] = user
    assert (await missing.connect())[1] == 4404


@pytest.mark.browser
def test_the_rollout_page_follows_each_server_live(
    browser, web_server, admin_credentials, triton, triton_shared, shared_server
):
    from django.contrib.auth import get_user_model

    from .conftest import login, wait_js

    page = browser.new_page()
    login(page, web_server.url, *admin_credentials)
    # The form, as a person uses it: pick the servers, see them listed, start.
    page.goto(f"{web_server.url}/rollouts/new?model=add_sub&action=unload&choice=servers")
    page.check("#pick-servers input[value=shared]")  # picking submits the form again
    wait_js(page, "document.querySelectorAll('#rollout-servers tr[data-server]').length === 2")
    with page.expect_navigation():
        page.click("#rollout-start button[type=submit]")
    assert re.fullmatch(rf"{web_server.url}/rollouts/\d+/", page.url), page.url
    ended = "['succeeded', 'partial', 'failed'].includes(document.getElementById('rollout-state').textContent)"
    wait_js(page, ended)
    shown = page.evaluate(
        "() => [document.getElementById('rollout-state').textContent, "
        "document.getElementById('rollout-summary').textContent, "
        "document.getElementById('rollout-targets').textContent]"
    )
    assert shown[0] == "succeeded", shown
    # A rollout the page sees pending, then run (by this process): it changes live.
    user = get_user_model().objects.get(username=admin_credentials[0])
    rollout = runner.create("unload", "add_sub", hand_picked(["default", "shared"]), user)
    # The page's resync when its socket opens is read now (pending) and answered only after
    # the live events have shown the end: a stale answer must not take the page back.
    held: list = []
    api = re.compile(r".*/api/v1/rollouts/\d+/$")

    def hold_the_first(route):  # type: ignore[no-untyped-def]
        # Only the first resync is held (the stale one); a later one (the page saw a gap)
        # is answered at once, or the page would wait on it for ever.
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))

    page.route(api, hold_the_first)
    page.goto(f"{web_server.url}/rollouts/{rollout.pk}/")
    wait_js(page, "document.getElementById('live-status').textContent === 'live'")
    deadline = time.monotonic() + BROWSER_WAIT_MS / 1000  # a bound, not a target
    while not held:  # the handler runs while Playwright waits on the page
        assert time.monotonic() < deadline, "the page never asked for the rollout"
        page.wait_for_timeout(50)
    cells = (
        "[...document.querySelectorAll('#rollout-targets [data-k=state]')].map(c => c.textContent)"
    )
    assert page.evaluate(f"() => {cells}") == ["pending", "pending"]
    runner.run_here(rollout, "test")
    wait_js(page, f"{cells}.join() === 'succeeded,succeeded'")
    wait_js(
        page, "document.getElementById('rollout-summary').textContent === 'succeeded: 2 unloaded'"
    )
    assert held[0][1].json()["state"] == "running"
    answered = list(held)
    for route, stale in answered:
        route.fulfill(response=stale)
    wait_js(
        page, f"Number(document.getElementById('rollout-card').dataset.synced) >= {len(answered)}"
    )
    assert page.evaluate(f"() => {cells}") == ["succeeded", "succeeded"]
    assert page.evaluate("() => document.getElementById('rollout-state').textContent") == (
        "succeeded"
    )
