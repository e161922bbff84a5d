"""Roles narrowed per Triton server or label (team.narrowing, registry.server_access),
without a Triton: the effective-role rule, `has_perm` on a server, managing narrowings (the
Users page, `manage.py team`, the audit), and a server narrowed to none being as unknown on
pages, the API, the switcher, the audit trail, sweep lists and sweep sockets."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token

from profiler_app.models import Sweep
from registry import server_access, servers
from registry.models import TritonServer
from registry.servers import Server
from team import audit, narrowing_admin
from team.models import AuditEvent, ServerRole
from team.narrowing import NONE, effective
from team.roles import ADMIN, OPERATOR, VIEWER, ensure_roles, set_role

CONTROL = "repository_app.control_models"
RUN = "profiler_app.run_sweeps"


def _server(name: str, **labels: str) -> Server:
    return Server(name, f"{name}:8001", f"{name}:8000", f"http://{name}:8002/metrics",
                  Path("/nowhere"), labels=labels)  # fmt: skip


def _user(name: str, role: str, *narrowings: tuple[str, str, str]) -> User:
    """A user with `role` and narrowings given as (kind, value, role)."""
    ensure_roles()
    user = User.objects.create_user(name, password="pw-narrowing-1")
    set_role(user, role)
    for kind, value, narrowed in narrowings:
        ServerRole.objects.create(user=user, kind=kind, value=value, role=narrowed)
    return User.objects.get(pk=user.pk)  # a fresh permission cache


PROD = _server("prod-1", env="prod", gpu="H200")
STAGING = _server("staging-1", env="staging", gpu="H200")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "narrowings", "on_prod", "on_staging", "by"),
    [
        (OPERATOR, [], OPERATOR, OPERATOR, ""),
        (OPERATOR, [("label", "env=prod", VIEWER)], VIEWER, OPERATOR, "env=prod"),
        (ADMIN, [("server", "prod-1", VIEWER)], VIEWER, ADMIN, "prod-1"),
        # The lowest of every narrowing that matches wins.
        (
            ADMIN,
            [("label", "gpu=H200", VIEWER), ("server", "prod-1", NONE)],
            NONE,
            VIEWER,
            "prod-1",
        ),  # fmt: skip
        # A narrowing never widens: a Viewer narrowed to Viewer is not "narrowed".
        (VIEWER, [("label", "env=prod", VIEWER)], VIEWER, VIEWER, ""),
        (VIEWER, [("label", "env=prod", NONE)], NONE, VIEWER, "env=prod"),
        # A label matches on its value too; an unknown label matches nothing.
        (
            OPERATOR,
            [("label", "env=dev", NONE), ("label", "zone=a", VIEWER)],
            OPERATOR,
            OPERATOR,
            "",
        ),  # fmt: skip
    ],
)
def test_the_effective_role_is_the_lowest_of_the_global_role_and_each_matching_narrowing(
    role, narrowings, on_prod, on_staging, by
):
    user = _user("nia", role, *narrowings)
    prod, staging = effective(user, PROD), effective(user, STAGING)
    assert (prod.role, staging.role) == (on_prod, on_staging)
    assert prod.global_role == role and (prod.by.selector if prod.by else "") == by
    assert server_access.visible(user, PROD) == (on_prod != NONE)
    assert user.has_perm(CONTROL, PROD) == (on_prod in (OPERATOR, ADMIN))
    assert user.has_perm(CONTROL, STAGING) == (on_staging in (OPERATOR, ADMIN))


@pytest.mark.django_db
def test_superusers_are_not_narrowed_and_global_checks_are_not_narrowed():
    ensure_roles()
    root = User.objects.create_superuser("root", "r@x.y", "pw-narrowing-1")
    ServerRole.objects.create(user=root, kind="server", value="prod-1", role=NONE)
    assert effective(root, PROD).role == ADMIN and not effective(root, PROD).narrowed
    assert server_access.visible(root, PROD) and root.has_perm(CONTROL, PROD)
    assert server_access.hidden_names(root) == set()
    # An Admin narrowed on prod still manages users: a narrowing concerns server actions.
    ada = _user("ada", ADMIN, ("server", "prod-1", VIEWER))
    assert ada.has_perm("team.manage_users") and not ada.has_perm(RUN, PROD)
    assert ada.has_perm(RUN, STAGING)
    assert server_access.note(ada, PROD) == "You are a viewer on prod-1 (narrowed by prod-1)."
    assert server_access.note(ada, STAGING) == ""
    message = server_access.refusal(ada, RUN, PROD, "your role cannot run sweeps")
    assert message == "your role cannot run sweeps: you are a viewer on prod-1 (narrowed by prod-1)"


@pytest.mark.django_db
def test_a_narrowing_on_another_server_of_the_repository_refuses_writes_to_it(tmp_path, settings):
    """Default and `replica` serve one repository: a write through default changes what
    replica loads, so a Viewer narrowing on replica refuses it."""
    settings.MODEL_REPOSITORY = tmp_path
    TritonServer.objects.create(name="replica", grpc_url="replica:8001", http_url="replica:8000",
                                metrics_url="http://replica:8002/metrics",
                                repository=str(tmp_path), labels={"env": "prod"})  # fmt: skip
    olga = _user("olga", OPERATOR, ("label", "env=prod", VIEWER))
    default = servers.default()
    assert olga.has_perm(CONTROL, default)
    assert server_access.refusal(olga, CONTROL, default, "no") == ""  # a load: this server only
    assert server_access.repository_refusal(olga, CONTROL, default, "no") == (
        "no: this repository is shared with replica, where you are a viewer (narrowed by env=prod)"
    )


# --- managing narrowings -------------------------------------------------------------------


@pytest.fixture()
def admin_client(db) -> tuple[Client, User]:
    ada = _user("ada", ADMIN)
    client = Client()
    client.force_login(ada)
    return client, ada


@pytest.mark.django_db
def test_narrowings_are_checked_and_every_change_is_audited(admin_client):
    _, ada = admin_client
    olga = _user("olga", OPERATOR)
    root = User.objects.create_superuser("root", "r@x.y", "pw-narrowing-1")
    bad = [
        ({"label": "env prod"}, "label"),
        ({"label": "env="}, "label"),
        ({"server": "Prod_1"}, "server"),
        ({"server": "prod-1", "label": "env=prod"}, "server"),
        ({}, "server"),
    ]
    for selector, field in bad:
        with pytest.raises(narrowing_admin.NarrowingRefused) as refused:
            narrowing_admin.narrow(ada, olga, **selector, role="viewer")
        assert refused.value.field == field, selector
    with pytest.raises(narrowing_admin.NarrowingRefused, match="viewer or none"):
        narrowing_admin.narrow(ada, olga, server="prod-1", role="Operator")  # never widens
    with pytest.raises(narrowing_admin.NarrowingRefused, match="superusers are not narrowed"):
        narrowing_admin.narrow(ada, root, server="prod-1", role="none")
    with pytest.raises(narrowing_admin.NarrowingRefused, match="your own account"):
        narrowing_admin.narrow(ada, ada, server="prod-1", role="none")
    assert not ServerRole.objects.exists()
    narrowing_admin.narrow(ada, olga, label="env=prod", role="viewer")
    narrowing_admin.narrow(ada, olga, label="env=prod", role="none")  # replaces it
    [row] = ServerRole.objects.all()
    assert (row.kind, row.value, row.role) == ("label", "env=prod", NONE)
    odile = _user("odile", ADMIN)
    narrowing_admin.narrow(odile, ada, label="env=prod", role="none")
    with pytest.raises(narrowing_admin.NarrowingRefused, match="your own account"):
        narrowing_admin.unnarrow(ada, ada, label="env=prod")  # an Admin never lifts her own
    assert ServerRole.objects.filter(user=ada).exists()
    narrowing_admin.unnarrow(odile, ada, label="env=prod")
    narrowing_admin.unnarrow(ada, olga, label="env=prod")
    assert not ServerRole.objects.exists()
    rows = AuditEvent.objects.filter(action__in=("user.narrow", "user.unnarrow")).order_by("id")
    assert [(e.action, e.outcome, e.target) for e in rows if e.outcome == "ok"] == [
        ("user.narrow", "ok", "olga"), ("user.narrow", "ok", "olga"), ("user.narrow", "ok", "ada"),
        ("user.unnarrow", "ok", "ada"), ("user.unnarrow", "ok", "olga"),
    ]  # fmt: skip
    assert rows.get(action="user.unnarrow", outcome="denied").detail == (
        "you cannot lift a narrowing of your own account"
    )
    assert "env=prod → none" in rows.filter(outcome="ok")[1].detail
    assert {"user.narrow", "user.unnarrow"} <= set(audit.ACTIONS)


@pytest.mark.django_db
def test_the_users_page_adds_lists_and_removes_narrowings_for_admins_only(admin_client, tmp_path):
    client, _ = admin_client
    TritonServer.objects.create(name="prod-1", grpc_url="p:8001", http_url="p:8000",
                                metrics_url="http://p:8002/metrics", repository=str(tmp_path),
                                labels={"env": "prod"})  # fmt: skip
    olga = _user("olga", OPERATOR)
    added = client.post(f"/team/users/{olga.pk}/narrow", {"selector": "env=prod", "role": "Viewer"})
    assert added.status_code == 302
    page = client.get("/team/users/").content.decode()
    assert "<code>env=prod</code> → viewer" in page and "matches prod-1" in page
    assert "Superusers are not narrowed" in page
    row = ServerRole.objects.get(user=olga)
    bad = client.post(f"/team/users/{olga.pk}/narrow", {"selector": "env=", "role": "none"})
    assert bad.status_code == 302 and ServerRole.objects.count() == 1
    assert "a label is key=value" in client.get("/team/users/").content.decode()
    # An Operator may not: a 403, audited as denied, nothing changed.
    operator = Client()
    operator.force_login(_user("otto", OPERATOR))
    refused = operator.post(f"/team/users/{olga.pk}/narrowings/{row.pk}/remove")
    assert refused.status_code == 403 and ServerRole.objects.count() == 1
    assert AuditEvent.objects.get(action="user.unnarrow").outcome == "denied"
    removed = client.post(f"/team/users/{olga.pk}/narrowings/{row.pk}/remove")
    assert removed.status_code == 302 and not ServerRole.objects.exists()
    assert AuditEvent.objects.filter(action="user.unnarrow", outcome="ok").count() == 1


@pytest.mark.django_db
def test_the_team_command_narrows_lists_and_unnarrows():
    _user("olga", OPERATOR)
    out = io.StringIO()
    call_command("team", "narrow", "olga", "--label", "env=prod", "--role", "viewer", stdout=out)
    call_command("team", "narrow", "olga", "--server", "default", "--role", "none", stdout=out)
    assert "olga: env=prod → viewer (matches: no server now)" in out.getvalue()
    assert "olga: default → none (matches: default)" in out.getvalue()
    listing = io.StringIO()
    call_command("team", "narrowings", "olga", stdout=listing)
    assert listing.getvalue().splitlines() == [
        "olga\tserver\tdefault\tnone\tdefault", "olga\tlabel\tenv=prod\tviewer\tno server now",
    ]  # fmt: skip
    call_command("team", "unnarrow", "olga", "--server", "default", stdout=out)
    with pytest.raises(CommandError, match="has no narrowing on default"):
        call_command("team", "unnarrow", "olga", "--server", "default")
    with pytest.raises(CommandError, match="a label is key=value"):
        call_command("team", "narrow", "olga", "--label", "env", "--role", "none")
    assert list(ServerRole.objects.values_list("value", flat=True)) == ["env=prod"]
    assert AuditEvent.objects.filter(action="user.narrow", username="system").count() == 2


# --- a server narrowed to none does not exist for the user ----------------------------------


@pytest.fixture()
def hidden(db, tmp_path, settings):  # type: ignore[no-untyped-def]
    """`far` (nothing answers there) hidden from vera by a label; a sweep and an audit row
    on it."""
    settings.TRITON_TIMEOUT_S = 0.5
    TritonServer.objects.create(name="far", grpc_url="127.0.0.1:1", http_url="127.0.0.1:2",
                                metrics_url="http://127.0.0.1:3/metrics",
                                repository=str(tmp_path), labels={"env": "prod"})  # fmt: skip
    vera = _user("vera", OPERATOR, ("label", "env=prod", NONE))
    sweep = Sweep.objects.create(
        model="add_sub", server="far", params={"model": "add_sub"}, state=Sweep.State.FAILED
    )
    audit.record("ada", "load", model_name="secret_model", server="far")
    return vera, sweep


@pytest.mark.django_db
def test_a_server_narrowed_to_none_is_an_unknown_server_everywhere(hidden):
    vera, sweep = hidden
    page = Client()
    page.force_login(vera)
    token, _ = Token.objects.get_or_create(user=vera)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    unknown = "no Triton server named 'far'"
    for path in ("/models/", "/server/", "/models/add_sub/"):
        response = page.get(path, {"server": "far"})
        assert response.status_code == 404, path
        assert "No Triton server named &#x27;far&#x27;" in response.content.decode()
    assert page.post("/models/add_sub/load?server=far").status_code == 404
    for call in (api.get("/api/v1/models/", {"server": "far"}),
                 api.post("/api/v1/models/add_sub/load?server=far")):  # fmt: skip
        assert call.status_code == 404 and call.json()["message"] == unknown
    created = api.post("/api/v1/sweeps/", {"model": "add_sub", "server": "far"},
                       content_type="application/json")  # fmt: skip
    assert created.status_code == 404 and Sweep.objects.count() == 1
    # Its sweeps and audit rows are left out; its sweep's pages are a 404.
    assert page.get(f"/sweeps/{sweep.pk}/").status_code == 404
    assert api.get(f"/api/v1/sweeps/{sweep.pk}/").status_code == 404
    assert [s["id"] for s in api.get("/api/v1/sweeps/").json()] == []
    listing = page.get("/audit/").content.decode()
    assert "secret_model" not in listing and 'id="server-switcher"' not in listing
    assert "far" not in {e["server"] for e in api.get("/api/v1/audit/").json()["results"]}
    # Someone not narrowed sees all of it.
    other = Client()
    other.force_login(_user("otto", OPERATOR))
    assert other.get(f"/sweeps/{sweep.pk}/").status_code == 200
    listing = other.get("/audit/").content.decode()
    assert "secret_model" in listing and '<option value="far"' in listing


@pytest.mark.django_db
def test_the_servers_page_and_api_never_show_or_confirm_a_hidden_server(hidden):
    vera, _ = hidden
    adele = _user("adele", ADMIN, ("server", "far", NONE))  # an Admin it is hidden from
    for user in (vera, adele):
        page = Client()
        page.force_login(user)
        token, _ = Token.objects.get_or_create(user=user)
        api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
        listing = page.get("/servers/").content.decode()
        assert "127.0.0.1:1" not in listing and "/servers/far/" not in listing, user
        assert "far" not in [s["name"] for s in api.get("/api/v1/servers/").json()]
        assert api.get("/api/v1/servers/far/").status_code == 404
        # 404 as for a server that does not exist, not 403 (that would confirm the name).
        for path in ("/servers/far/edit/", "/servers/far/remove/"):
            assert page.get(path).status_code == 404, (user, path)
            assert page.post(path, {"name": "far"}).status_code == 404, (user, path)
        changed = api.patch(
            "/api/v1/servers/far/", {"labels": "env=dev"}, content_type="application/json"
        )
        assert changed.status_code == 404
        assert api.delete("/api/v1/servers/far/").status_code == 404
    stored = TritonServer.objects.get(name="far")
    assert stored.labels == {"env": "prod"}
    # Someone not narrowed sees it.
    other = Client()
    other.force_login(_user("ana", ADMIN))
    assert "/servers/far/" in other.get("/servers/").content.decode()
    assert other.get("/servers/far/edit/").status_code == 200


@pytest.mark.django_db
def test_perf_sweep_as_a_user_runs_with_that_users_role_on_that_server(hidden):
    _user("viv", VIEWER)
    with pytest.raises(CommandError, match=r"user 'viv' \(role Viewer\) is not allowed"):
        call_command("perf_sweep", "add_sub", "--as-user", "viv")
    with pytest.raises(CommandError, match="--server: no Triton server named 'far'"):
        call_command("perf_sweep", "add_sub", "--server", "far", "--as-user", "vera")
    assert Sweep.objects.count() == 1  # the fixture's own


@pytest.mark.django_db
def test_a_rollout_from_the_cli_on_a_hidden_server_is_an_unknown_server(hidden):
    with pytest.raises(CommandError, match="--server: no Triton server named 'far'"):
        call_command(
            "triton", "reload", "--server", "default", "--server", "far", "add_sub",
            "--as-user", "vera",
        )  # fmt: skip


def _socket(path: str, user: User) -> WebsocketCommunicator:
    from dashboard.asgi import application

    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    communicator.scope["user"] = user
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_socket_of_a_hidden_server_is_refused_at_the_handshake(hidden, redis_db):
    vera, sweep = hidden
    for path in (f"/ws/sweeps/{sweep.pk}/", "/ws/repository/?server=far",
                 "/ws/models/add_sub/?server=far"):  # fmt: skip
        connected, code = await _socket(path, vera).connect()
        assert not connected and code == 4404, path


@pytest.mark.django_db(transaction=True)
async def test_the_activity_feed_relays_a_hidden_servers_events_as_their_seq_alone(
    hidden, redis_db
):
    from asgiref.sync import sync_to_async

    from repository_app import events

    from .conftest import ACTIVITY

    vera, _ = hidden
    feed = _socket("/ws/activity/", vera)
    assert (await feed.connect())[0]
    publish = sync_to_async(events.publish)
    await publish(events.ACTIVITY_GROUP, "activity", {**ACTIVITY, "server": "far", "model": "m"})
    await publish(events.ACTIVITY_GROUP, "activity", {**ACTIVITY, "server": "default"})
    # A row with no server column that concerns `far` among others (a rollout's).
    await sync_to_async(audit.record)("ada", "rollout", servers=["default", "far"])
    received = []
    while len(received) < 3:  # a snapshot of default's repository may come first
        event = await feed.receive_json_from(5)
        if event.get("group") == events.ACTIVITY_GROUP:
            received.append(event)
    hidden_event, shown, rollout = received
    for gap in (hidden_event, rollout):
        assert set(gap) == {"type", "group", "seq"} and gap["type"] == "activity.hidden"
    assert shown["server"] == "default" and shown["seq"] == hidden_event["seq"] + 1
    await feed.disconnect()


@pytest.mark.django_db
def test_audit_rows_that_name_a_hidden_server_in_their_text_are_left_out_everywhere(hidden):
    """Rows with no server column whose text names `far` (a rollout of two servers, a label
    narrowing that matches it): the page, its CSV, the API and the overview leave them out
    for vera, and keep them once the server is removed (by the labels stored with them)."""
    from fleet.rollouts import choose, runner

    vera, _ = hidden
    ada = _user("ada", ADMIN)
    runner.create("reload", "secret_model", choose.hand_picked(["default", "far"], ada), ada)
    narrowing_admin.narrow(ada, _user("olga", OPERATOR), label="env=prod", role="viewer")
    rows = AuditEvent.objects.filter(action__in=("rollout", "user.narrow"))
    assert [r.server for r in rows] == ["", ""] and all("far" in r.detail for r in rows)
    page = Client()
    page.force_login(vera)
    token, _ = Token.objects.get_or_create(user=vera)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    other = Client()
    other.force_login(_user("otto", OPERATOR))

    def seen(client: Client) -> list[str]:
        return [
            client.get("/audit/").content.decode(),
            client.get("/audit.csv").getvalue().decode(),
            str(client.get("/api/v1/audit/").json()),
            client.get("/").content.decode(),
        ]

    for text in seen(page) + [str(api.get("/api/v1/audit/").json())]:
        assert "far" not in text and "env=prod" not in text
    assert all("default, far" in text for text in seen(other)[:3])
    # Removed, `far` is still hidden from vera through the label its rows carry.
    TritonServer.objects.filter(name="far").delete()
    assert all("far" not in text for text in seen(page))
    assert set(rows.get(action="rollout").concerns.values_list("token", flat=True)) == {
        "server:default", "server:far", "label:env=prod",
    }  # fmt: skip


@pytest.mark.django_db
def test_rows_stored_before_concerns_get_them_from_their_column_and_text(hidden):
    """team 0005's backfill: the server column, and each server name its text names as a
    whole word, with that server's labels; a name inside another word is not one."""
    from importlib import import_module

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    backfill = import_module("team.migrations.0005_audit_concerns").concerns_of_stored_rows
    # The models as that migration saw them (TritonServer was repository_app's then).
    apps = MigrationLoader(connection).project_state(("team", "0005_audit_concerns")).apps
    AuditConcern = apps.get_model("team", "AuditConcern")
    AuditConcern.objects.all().delete()
    old = AuditEvent.objects.create(username="ada", action="rollout", outcome="ok",
                                    detail="reload on default, far (hand-picked)")  # fmt: skip
    unrelated = AuditEvent.objects.create(username="ada", action="upload", outcome="ok",
                                          detail="farther away: nothing")  # fmt: skip
    backfill(apps, None)
    assert set(old.concerns.values_list("token", flat=True)) == {
        "server:default", "server:far", "label:env=prod",
    }  # fmt: skip
    assert not unrelated.concerns.exists()
    column = AuditEvent.objects.get(model_name="secret_model")  # the fixture's, server="far"
    assert "server:far" in column.concerns.values_list("token", flat=True)
