"""Three real Triton servers at once: "default" (the suite's `triton`), "shared" (a second
tritonserver on the same repository) and "solo" (a third on a repository of its own, with a
model only it has). Pages, the API, websockets and the pollers keep them apart; a repository
shared by two servers is one history."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from fleet import poller
from registry import servers
from repository_app import events
from repository_app.models import ModelIntent
from team.models import AuditEvent
from team.roles import OPERATOR, set_role
from triton_api.client import TritonClient

from .conftest import BROWSER_WAIT_MS, SOLO_ONLY, login, wait_for

pytestmark = [pytest.mark.integration]
BOUND_S = 120  # an upper bound for a poller to publish (it polls every 0.2 s here)


def _api(django_user_model, role: str = OPERATOR) -> Client:
    user = django_user_model.objects.create_user(f"robot-{role.lower()}")
    set_role(user, role)
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def _states(fixture) -> dict[str, str]:  # type: ignore[no-untyped-def]
    index = TritonClient(fixture.grpc_url, fixture.metrics_url).repository_index()
    return {m.name: m.state for m in index}


@pytest.mark.django_db
def test_pages_and_the_api_show_the_named_servers_models_and_states(
    triton, solo_server, django_user_model
):
    viewer = Client()
    viewer.force_login(django_user_model.objects.create_user("vi"))
    solo_page = viewer.get("/models/", {"server": "solo"}).content.decode()
    default_page = viewer.get("/models/").content.decode()
    assert SOLO_ONLY in solo_page and "busy_compute" not in solo_page
    assert SOLO_ONLY not in default_page and "busy_compute" in default_page
    assert '<option value="solo" selected>' in solo_page  # the switcher lists the servers
    assert '<option value="default">default (from the environment)</option>' in solo_page
    api = _api(django_user_model)
    names = {m["name"] for m in api.get("/api/v1/models/", {"server": "solo"}).json()}
    assert names == {"add_sub", SOLO_ONLY}
    detail = api.get(f"/api/v1/models/{SOLO_ONLY}/", {"server": "solo"})
    assert detail.status_code == 200 and detail.json()["triton"]["state"] == "not loaded"
    assert api.get(f"/api/v1/models/{SOLO_ONLY}/").status_code == 404  # not the default's
    assert viewer.get(f"/models/{SOLO_ONLY}/", {"server": "solo"}).status_code == 200
    assert api.get("/api/v1/models/", {"server": "bogus"}).status_code == 404


@pytest.mark.django_db
def test_load_and_unload_through_the_api_change_the_named_server_only(
    triton, triton_solo, solo_server, django_user_model
):
    api = _api(django_user_model)
    default_before = _states(triton).get("add_sub")
    loaded = api.post("/api/v1/models/add_sub/load?wait=1&server=solo")
    assert loaded.status_code == 200, loaded.content
    assert _states(triton_solo)["add_sub"] == "READY"
    assert _states(triton).get("add_sub") == default_before
    assert ModelIntent.objects.get(name="add_sub").server == "solo"
    assert AuditEvent.objects.get(action="load").server == "solo"
    unloaded = api.post("/api/v1/models/add_sub/unload?wait=1&server=solo")
    assert unloaded.status_code == 200, unloaded.content
    assert _states(triton_solo)["add_sub"] == "UNAVAILABLE"
    assert _states(triton).get("add_sub") == default_before
    assert not ModelIntent.objects.get(server="solo", name="add_sub").loaded


@pytest.mark.django_db
def test_a_config_saved_through_one_server_of_a_shared_repository_is_seen_by_both(
    triton, shared_server, django_user_model
):
    path = triton.repository / "add_batched" / "config.pbtxt"
    original = path.read_bytes()
    editor = Client()
    editor.force_login(django_user_model.objects.create_superuser("ed", "e@x.y", "pw-for-ed-1"))
    api = _api(django_user_model)
    try:
        opened = api.get("/api/v1/models/add_batched/config", {"server": "shared"}).json()
        changed = opened["text"] + "# saved through the shared server\n"
        saved = editor.post(
            "/models/add_batched/config/?server=shared",
            {"mode": "text", "action": "save", "text": changed, "base_sha": opened["sha256"]},
        )
        assert saved.status_code == 302, saved.content
        assert saved["Location"] == "/models/add_batched/config/?mode=text&server=shared"
        for query in ({"mode": "text"}, {"mode": "text", "server": "shared"}):
            page = editor.get("/models/add_batched/config/", query).content.decode()
            assert "# saved through the shared server" in page
        # One history, the repository's: the same revisions through either server.
        numbers = [
            re.findall(r'data-number="(\d+)"', editor.get(
                "/models/add_batched/config/history/", query).content.decode())
            for query in ({}, {"server": "shared"})
        ]  # fmt: skip
        assert numbers[0] == numbers[1] and len(numbers[0]) >= 2
        assert AuditEvent.objects.get(action="config.save").server == "shared"
    finally:
        path.write_bytes(original)


@pytest.mark.django_db(transaction=True)
def test_one_poller_per_server_publishes_to_its_own_group_and_a_stopped_server_is_down_alone(
    triton, triton_solo, solo_server, redis_db, settings
):
    manager = poller.PollerManager(
        interval_s=0.2, known=lambda: [servers.default(), servers.get("solo")]
    )
    manager.refresh()
    try:
        solo = wait_for(lambda: events.load_snapshot("solo"), BOUND_S, "solo's snapshot")
        default = wait_for(lambda: events.load_snapshot("default"), BOUND_S, "default's")
        assert solo["group"] == "repository.solo" and SOLO_ONLY in solo["models"]
        assert default["group"] == "repository.default" and SOLO_ONLY not in default["models"]
        assert redis_db.get(poller.lock_key("solo")) and redis_db.get(poller.lock_key("default"))
        triton_solo.stop()
        try:
            down = wait_for(
                lambda: (s := events.load_snapshot("solo")) and not s["triton"]["up"] and s,
                BOUND_S,
                "solo marked down",
            )
            assert down["models"] == {} and triton_solo.grpc_url in down["triton"]["message"]
            assert events.load_snapshot("default")["triton"]["up"]
        finally:
            triton_solo.restart()
        wait_for(
            lambda: (s := events.load_snapshot("solo")) and s["triton"]["up"], BOUND_S, "solo up"
        )
    finally:
        manager.stop_all()


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_for_solo_gets_solos_snapshot(triton_solo, solo_server, redis_db):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model

    from dashboard.asgi import application

    await sync_to_async(poller.Poller(solo_server).tick)()
    user = await sync_to_async(get_user_model().objects.create_user)("ws-user")
    socket = WebsocketCommunicator(
        application, "/ws/repository/?server=solo",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )  # fmt: skip
    socket.scope["user"] = user
    connected, _ = await socket.connect()
    assert connected
    first = await socket.receive_json_from(timeout=BROWSER_WAIT_MS / 1000)
    assert first["snapshot"] and first["group"] == "repository.solo"
    assert set(first["models"]) == {"add_sub", SOLO_ONLY}
    await socket.disconnect()


@pytest.mark.browser
def test_links_and_forms_of_a_page_keep_its_server(
    browser, web_server, admin_credentials, solo_server
):
    page = browser.new_page()
    login(page, web_server.url, *admin_credentials)
    page.goto(f"{web_server.url}/models/?server=solo")
    options = page.eval_on_selector_all("#server-switcher option", "els => els.map(e => e.value)")
    assert options == ["default", "solo"]
    page.fill("input[name=q]", "solo")  # a GET form: its query is built from its fields
    with page.expect_navigation():
        page.press("input[name=q]", "Enter")
    assert re.fullmatch(r".*/models/\?q=solo&.*server=solo", page.url), page.url
    assert page.eval_on_selector_all("tr[data-model]", "rows => rows.length") == 1
    page.click(f"a[href='/models/{SOLO_ONLY}/']")
    page.wait_for_url(f"{web_server.url}/models/{SOLO_ONLY}/?server=solo")
    page.click("nav a[href='/server/']")
    page.wait_for_url(f"{web_server.url}/server/?server=solo")
    assert "on solo" in page.inner_text("h1")
    page.select_option("#server-switcher", "default")
    page.wait_for_url(f"{web_server.url}/server/")
    page.click("nav a[href='/models/']")
    page.wait_for_url(f"{web_server.url}/models/")  # the default server's links stay plain


@pytest.mark.django_db(transaction=True)
def test_a_sweep_on_solo_measures_solo_and_keeps_its_facts(triton_solo, solo_server, redis_db):
    """A model only solo has: the sweep can only have measured solo."""
    from django.core.management import call_command

    from profiler_app.models import Sweep, SweepPoint

    client = TritonClient(triton_solo.grpc_url, triton_solo.metrics_url)
    client.load(SOLO_ONLY)
    try:
        call_command(
            "perf_sweep", SOLO_ONLY, "--server", "solo", "--concurrency-range", "1:1:1",
            "--measurement-interval", "300", "--stability-percentage", "100",
            "--max-trials", "3",
        )  # fmt: skip
    finally:
        client.unload(SOLO_ONLY)
    sweep = Sweep.objects.get()
    assert (sweep.server, sweep.state) == ("solo", "succeeded"), sweep.error
    assert SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL).count() == 1
    facts = sweep.server_facts
    assert facts["server"] == "solo" and facts["grpc_url"] == triton_solo.grpc_url
    assert facts["triton_version"] and facts["gpu_count"] == len(facts["gpus"])
    assert facts["labels"] == {"role": "solo"}
    # Run in the command's own process: its host generated the load, through no queue.
    assert sweep.worker.startswith("manage.py perf_sweep (pid ") and sweep.worker_host
    assert (sweep.queue, sweep.routing) == (
        "",
        "run by manage.py perf_sweep in its own process, through no queue",
    )
    assert AuditEvent.objects.get(action="sweep.start").server == "solo"
