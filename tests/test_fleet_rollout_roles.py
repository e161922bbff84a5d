"""A server narrowed to none for a user (team.narrowing) does not exist for them on the
fleet overview, in its socket, or in rollouts: never chosen by a repository or a label,
unknown by name, and a rollout that touched it is not theirs to see."""

from __future__ import annotations

from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from dashboard.asgi import application
from fleet.models import Rollout, RolloutTarget
from fleet.rollouts import choose, runner
from registry import servers
from registry.models import TritonServer
from team.narrowing_admin import narrow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture()
def far(tmp_path: Path, settings):  # type: ignore[no-untyped-def]
    """A server nothing answers for, labelled env=prod."""
    settings.TRITON_TIMEOUT_S = 0.3
    row = TritonServer(
        name="far", grpc_url="127.0.0.2:1", http_url="127.0.0.2:2",
        metrics_url="http://127.0.0.2:3/metrics", repository=str(tmp_path),
        labels={"env": "prod"},
    )  # fmt: skip
    row.full_clean()
    row.save()
    return servers.get("far")


@pytest.fixture()
def hidden(far, django_user_model):  # type: ignore[no-untyped-def]
    """An operator for whom `far` is narrowed to none, and an admin who did it."""
    admin = django_user_model.objects.create_superuser("ada", password="pw-ada-secret-1")
    user = django_user_model.objects.create_user("olga", password="pw-olga-secret-1")
    narrow(admin, user, server="far", role="none")
    return user


def test_the_fleet_overview_leaves_out_a_server_hidden_from_the_user(hidden, redis_db):
    client = Client()
    client.force_login(hidden)
    html = client.get("/fleet/").content.decode()
    assert 'data-server-card="default"' in html
    assert "far" not in html
    assert "far" not in client.get("/fleet/states.json").content.decode()


async def test_the_fleet_socket_joins_no_group_of_a_hidden_server(hidden, redis_db):
    communicator = WebsocketCommunicator(
        application,
        "/ws/fleet/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )
    communicator.scope["user"] = hidden
    consumer_groups: list[str] = []
    from fleet.consumers import FleetConsumer

    original = FleetConsumer.groups_for

    async def spy(self, user):  # type: ignore[no-untyped-def]
        found = await original(self, user)
        consumer_groups.extend(found)
        return found

    FleetConsumer.groups_for = spy  # type: ignore[method-assign]
    try:
        connected, _ = await communicator.connect()
        assert connected
        assert consumer_groups and not any(".far" in g for g in consumer_groups)
    finally:
        FleetConsumer.groups_for = original  # type: ignore[method-assign]
        await communicator.disconnect()


def test_a_rollout_never_chooses_a_hidden_server_and_does_not_know_its_name(hidden):
    assert choose.by_label("env=prod").names == ["far"]  # without a user: every server
    with pytest.raises(choose.ChoiceError) as refused:
        choose.by_label("env=prod", hidden)
    assert refused.value.field == "label"
    with pytest.raises(choose.ChoiceError) as unknown:
        choose.hand_picked(["default", "far"], hidden)
    assert unknown.value.unknown and "far" in unknown.value.message
    assert choose.by_repository("default", hidden).names == ["default"]


def test_the_rollout_form_offers_neither_a_hidden_server_nor_its_labels(hidden, far):
    client = Client()
    client.force_login(hidden)
    page = client.get("/rollouts/new", {"model": "add_sub", "action": "load"})
    html = page.content.decode()
    assert page.status_code == 200, html[:500]
    assert 'value="default"' in html
    i = html.find('value="far"')
    assert i < 0, html[i - 300 : i + 100]
    assert '<option value="env=prod">' not in html
    other = Client()
    other.force_login(type(hidden).objects.get(username="ada"))
    html = other.get("/rollouts/new", {"model": "add_sub", "action": "load"}).content.decode()
    assert 'value="far"' in html and '<option value="env=prod">' in html


def test_a_rollout_that_touched_a_hidden_server_is_not_listed_or_shown(hidden):
    seen = Rollout.objects.create(action="load", model="m", chosen="hand-picked: default")
    RolloutTarget.objects.create(rollout=seen, server="default")
    touched = Rollout.objects.create(action="load", model="m", chosen="hand-picked: far")
    RolloutTarget.objects.create(rollout=touched, server="far")
    client = Client()
    client.force_login(hidden)
    listed = [r["id"] for r in client.get("/api/v1/rollouts/").json()]
    assert listed == [seen.pk]
    assert client.get(f"/api/v1/rollouts/{touched.pk}/").status_code == 404
    assert client.get(f"/rollouts/{touched.pk}/").status_code == 404
    assert client.get(f"/rollouts/{seen.pk}/").status_code == 200
    assert f"/rollouts/{touched.pk}/" not in client.get("/rollouts/").content.decode()


def test_a_rollout_on_a_removed_server_stays_hidden_by_the_label_it_had(far, django_user_model):
    """`far` is labelled env=prod when a rollout touches it; once it is removed, a user
    narrowed to none on env=prod still never sees that rollout."""
    from fleet import server_admin

    admin = django_user_model.objects.create_superuser("ada", password="pw-ada-secret-1")
    rollout = runner.create("load", "m", choose.hand_picked(["default", "far"]), admin)
    assert sorted(rollout.targets.values_list("server", "labels")) == [
        ("default", ""), ("far", "\nenv=prod\n"),
    ]  # fmt: skip
    olga = django_user_model.objects.create_user("olga", password="pw-olga-secret-1")
    narrow(admin, olga, label="env=prod", role="none")
    server_admin.remove(admin, "far")
    assert "far" not in servers.names()
    client = Client()
    client.force_login(olga)
    assert [r["id"] for r in client.get("/api/v1/rollouts/").json()] == []
    assert client.get(f"/rollouts/{rollout.pk}/").status_code == 404
    assert client.get(f"/api/v1/rollouts/{rollout.pk}/").status_code == 404
    other = django_user_model.objects.create_user("otto", password="pw-otto-secret-1")
    assert list(runner.seen_by(other)) == [rollout]
