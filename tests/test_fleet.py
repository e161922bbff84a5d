"""The fleet overview without a Triton: cards and the models × servers matrix from the
pollers' saved state (or from asking a server no poller watches), label filters, a down
server's column, and the fleet socket's groups and first messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from fleet import overview as fleet
from fleet import poller
from registry import servers
from registry.models import TritonServer
from repository_app import events
from repository_app.status import state_json
from triton_api.client import ModelState

pytestmark = pytest.mark.django_db


@pytest.fixture()
def far(tmp_path: Path, settings):  # type: ignore[no-untyped-def]
    """A server nothing answers for, on a repository of its own with one model."""
    settings.TRITON_TIMEOUT_S = 0.3
    (tmp_path / "only_here" / "1").mkdir(parents=True)
    (tmp_path / "only_here" / "config.pbtxt").write_text('name: "only_here"\nbackend: "python"\n')
    (tmp_path / ".hidden").mkdir()
    row = TritonServer(
        name="far", grpc_url="127.0.0.2:1", http_url="127.0.0.2:2",
        metrics_url="http://127.0.0.2:3/metrics", repository=str(tmp_path),
        labels={"gpu": "H200", "env": "prod"},
    )  # fmt: skip
    row.full_clean()
    row.save()
    return servers.get("far")


@pytest.fixture()
def viewer(django_user_model):  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(django_user_model.objects.create_user("vic"))
    return client


def _watch(redis_db, name: str, models: dict, *, up: bool = True, card: dict | None = None):  # type: ignore[no-untyped-def]
    """What a poller holding ``name`` leaves in Redis: its lock, snapshot and card."""
    redis_db.set(poller.lock_key(name), "someone")
    triton = {"up": True, "message": ""} if up else {
        "up": False, "message": "gone", "reason": "Triton unreachable since 14:05: gone"
    }  # fmt: skip
    events.publish(events.repository_group(name), "models.states",
                   {"triton": triton, "models": models, "full": True}, snapshot_of=name)  # fmt: skip
    if card is not None:
        redis_db.set(poller.card_key(name), json.dumps(card))


def _cells(html: str, model: str) -> str:
    return html.split(f'<tr data-model="{model}">', 1)[1].split("</tr>", 1)[0]


def test_a_down_server_no_poller_watches_still_lists_its_repository(viewer, far, redis_db):
    response = viewer.get("/fleet/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-server-card="far"' in html and 'data-server-card="default"' in html
    row = _cells(html, "only_here")
    # far is down: its model's state is unknown, with why; default's repository lacks it.
    assert 'data-server="far" data-state="unknown"' in row
    assert "Triton unreachable since" in row
    assert 'data-server="default" data-state="absent"' in row
    assert f'title="{fleet.ABSENT}"'.replace("'", "&#x27;") in row
    assert 'href="/models/only_here/?server=far"' in row
    header = html.split('<th data-server="far">', 1)[1].split("</th>", 1)[0]
    assert 'data-k="column-note">unreachable since' in header
    assert fleet.NOT_WATCHED.split(":")[0] in html
    assert ".hidden" not in html


def test_a_watched_server_shows_its_pollers_states_version_and_load(viewer, far, redis_db):
    ready = state_json([ModelState("only_here", "1", "READY", "")])
    failed = state_json([ModelState("broken", "1", "UNAVAILABLE", "load failed: bad config")])
    _watch(redis_db, "far", {"only_here": ready, "broken": failed},
           card={"time": 1.0, "version": "2.99.0", "requests_per_s": 12.5, "gpus": [
               {"uuid": "GPU-1", "utilization": 0.5, "memory_used_bytes": 2**30,
                "memory_total_bytes": 4 * 2**30}]})  # fmt: skip
    html = viewer.get("/fleet/").content.decode()
    card = html.split('data-server-card="far"', 1)[1].split("</section>", 1)[0]
    assert "2.99.0" in card and "12.5 req/s" in card and "1 GPU · 50% busy · 1.0 of 4.0 GiB" in card
    assert "1 ready · 1 in its repository" in card and "no poller watches" not in card
    assert 'data-server="far" data-state="READY"' in _cells(html, "only_here")
    broken = _cells(html, "broken")  # in Triton's index only: still a row
    assert 'data-state="UNAVAILABLE"' in broken and 'title="load failed: bad config"' in broken
    states = viewer.get("/fleet/states.json").json()
    far_column = next(c for c in states["columns"] if c["name"] == "far")
    assert far_column["watched"] and far_column["models"]["only_here"]["state"] == "READY"
    assert states["rows"] == sorted(states["rows"]) and {"broken", "only_here"} <= set(
        states["rows"]
    )
    # Down, as its poller last said: the cards and cells say so, the disk is still listed.
    _watch(redis_db, "far", {}, up=False)
    down = viewer.get("/fleet/").content.decode()
    assert 'data-server="far" data-state="unknown"' in _cells(down, "only_here")
    assert "unreachable since 14:05: gone" in down.split('<th data-server="far">', 1)[1]


def test_label_filters_hide_servers_and_a_bad_filter_is_refused(viewer, far, redis_db):
    html = viewer.get("/fleet/", {"label": ["env=prod", "gpu=H200"]}).content.decode()
    assert 'data-server-card="far"' in html and 'data-server-card="default"' not in html
    assert "1 hidden by the filter" in html
    assert 'value="env=prod" checked' in html and 'value="gpu=H200" checked' in html
    none = viewer.get("/fleet/", {"label": ["env=prod", "gpu=A100"]}).content.decode()
    assert 'data-server-card="far"' not in none
    bad = viewer.get("/fleet/", {"label": "no-equals"})
    assert bad.status_code == 400
    assert "label filter not applied: label &#x27;no-equals&#x27;" in bad.content.decode()
    assert viewer.get("/fleet/states.json", {"label": "a b=c"}).status_code == 400
    assert Client().get("/fleet/").status_code == 302


def _socket(path: str, user):  # type: ignore[no-untyped-def]
    from dashboard.asgi import application

    communicator = WebsocketCommunicator(
        application, path, headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")]
    )
    communicator.scope["user"] = user
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_the_fleet_socket_relays_the_shown_servers_and_first_their_snapshots(
    far, redis_db, django_user_model
):
    from asgiref.sync import sync_to_async

    user = await sync_to_async(django_user_model.objects.create_user)("wes")
    ready = {"only_here": {"state": "READY"}}
    await sync_to_async(_watch)(redis_db, "far", ready)
    socket = _socket("/ws/fleet/?label=env=prod", user)
    connected, _ = await socket.connect()
    assert connected
    first = await socket.receive_json_from(timeout=10)
    assert first["snapshot"] and first["group"] == "repository.far" and first["models"] == ready
    await sync_to_async(events.publish)(
        events.repository_group("default"), "models.states", {"models": {}, "full": True}
    )  # hidden by the filter: not relayed
    await sync_to_async(events.publish)(
        events.repository_group("far"), "models.states",
        {"models": {"only_here": {"state": "LOADING"}}, "full": False},
    )  # fmt: skip
    relayed = await socket.receive_json_from(timeout=10)
    assert (
        relayed["group"] == "repository.far"
        and relayed["models"]["only_here"]["state"] == "LOADING"
    )
    await sync_to_async(events.publish)(
        events.server_group("far"), "server.metrics", {"time": 1, "models": {}, "gpus": {}}
    )
    assert (await socket.receive_json_from(timeout=10))["type"] == "server.metrics"
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()
    bad = _socket("/ws/fleet/?label=nonsense", user)
    connected, code = await bad.connect()
    assert (connected, code) == (False, 4404)


def test_the_poller_keeps_each_servers_card_for_the_fleet(far, redis_db, monkeypatch, settings):
    from triton_api.prometheus import parse_prometheus

    settings.HISTORY_ENABLED = False
    text = (
        'nv_inference_request_success{model="m",version="1"} %d\n'
        'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.25\n'
    )

    class Fake:
        scrapes = 0

        def repository_index(self) -> list:
            return []

        def model_statistics(self) -> list:
            return []

        def server_metadata(self) -> dict:
            return {"version": "2.99.0"}

        def metrics(self):  # type: ignore[no-untyped-def]
            Fake.scrapes += 1
            return parse_prometheus(text % (10 * Fake.scrapes))

    monkeypatch.setattr(poller, "get_client", lambda server: Fake())
    watcher = poller.Poller(far, slow_every=1)
    watcher.tick()  # the first scrape: no rate yet
    first = json.loads(redis_db.get(poller.card_key("far")))
    assert first["version"] == "2.99.0" and first["requests_per_s"] is None
    watcher.tick()
    card = json.loads(redis_db.get(poller.card_key("far")))
    assert card["requests_per_s"] > 0
    assert card["gpus"] == [{"uuid": "GPU-1", "utilization": 0.25}]


def test_a_server_that_cannot_be_asked_is_down_on_the_page_not_a_500(viewer, far, monkeypatch):
    real = fleet.get_client

    def odd(server):  # type: ignore[no-untyped-def]
        if server.name == "far":
            raise RuntimeError("odd answer")
        return real(server)

    monkeypatch.setattr(fleet, "get_client", odd)
    response = viewer.get("/fleet/")
    assert response.status_code == 200
    assert "cannot ask it: odd answer" in response.content.decode()
