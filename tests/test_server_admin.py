"""Adding, changing and removing Triton servers through the three entries (pages, API, CLI),
without a Triton: each bad field refused on its field with the rows unchanged, the key never
shown anywhere, non-admins refused (and audited), removal refused while work is queued or
running and otherwise cleaning what belonged to the server, every outcome audited with its
server.

Actors: Ada the Admin, Olga the Operator."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from fleet import poller
from profiler_app.models import Sweep, SweepSlot
from registry import servers
from registry.models import TritonServer
from repository_app import events
from repository_app.models import ModelIntent, ModelMetricPoint
from team.models import AuditEvent, ServerRole
from team.roles import ADMIN, OPERATOR, set_role

pytestmark = pytest.mark.django_db

SECRET = "k3y-that-must-never-show"
OTHER_SECRET = "another-k3y-never-shown"


@pytest.fixture(autouse=True)
def _quick(settings):  # type: ignore[no-untyped-def]
    # Nothing answers at these addresses: pages that ask a server give up quickly.
    settings.TRITON_TIMEOUT_S = 0.3


def _person(django_user_model, name: str, role: str) -> tuple[Client, Client]:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user(name, password=f"pw-{name}-12345")
    set_role(user, role)
    page = Client()
    page.force_login(user)
    token, _ = Token.objects.get_or_create(user=user)
    return page, Client(HTTP_AUTHORIZATION=f"Token {token.key}")


@pytest.fixture()
def ada(django_user_model):  # type: ignore[no-untyped-def]
    return _person(django_user_model, "ada", ADMIN)


@pytest.fixture()
def olga(django_user_model):  # type: ignore[no-untyped-def]
    return _person(django_user_model, "olga", OPERATOR)


def _body(tmp_path: Path, **fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "edge-a",
        "grpc_url": "127.0.0.1:1",
        "http_url": "127.0.0.1:2",
        "metrics_url": "http://127.0.0.1:3/metrics",
        "repository": str(tmp_path),
        "labels": {"gpu": "H200", "env": "prod"},
        "api_key": SECRET,
    }
    body.update(fields)
    return body


def _rows() -> list[tuple]:
    return list(TritonServer.objects.order_by("name").values_list())


def _post(api: Client, body: object):  # type: ignore[no-untyped-def]
    return api.post("/api/v1/servers/", body, content_type="application/json")


def _patch(api: Client, name: str, body: object):  # type: ignore[no-untyped-def]
    return api.patch(f"/api/v1/servers/{name}/", body, content_type="application/json")


# --- the API -----------------------------------------------------------------------------------


def test_the_api_adds_a_server_never_shows_its_key_and_audits_it(ada, tmp_path, settings):
    _, api = ada
    created = _post(api, _body(tmp_path))
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "edge-a" and body["api_key_set"] is True and "api_key" not in body
    assert body["labels"] == {"gpu": "H200", "env": "prod"} and body["from_env"] is False
    # Added although nothing answers there: shown down, with the reason.
    assert body["status"]["up"] is False and "127.0.0.1:1" in body["status"]["reason"]
    assert servers.get("edge-a").api_key == SECRET
    listed = api.get("/api/v1/servers/").json()
    assert [s["name"] for s in listed] == ["default", "edge-a"]
    assert listed[0]["from_env"] is True
    one = api.get("/api/v1/servers/edge-a/")
    # Left out on create: Triton's default ports on the gRPC host, MODEL_REPOSITORY.
    settings.MODEL_REPOSITORY = tmp_path / "shared"
    settings.MODEL_REPOSITORY.mkdir()
    bare = _post(api, {"name": "edge-b", "grpc_url": "10.0.0.9:8001"}).json()
    assert (bare["http_url"], bare["metrics_url"], bare["repository"]) == (
        "10.0.0.9:8000", "http://10.0.0.9:8002/metrics", str(settings.MODEL_REPOSITORY)
    )  # fmt: skip
    assert bare["api_key_set"] is False and bare["shares_repository_with"] == ["default"]
    event = AuditEvent.objects.get(action="server.add", server="edge-a")
    assert (
        event.outcome == "ok"
        and "API key set" in event.detail
        and "gRPC 127.0.0.1:1" in event.detail
    )
    outputs = [created.content, one.content, api.get("/api/v1/servers/").content,
               api.get("/api/v1/audit/").content]  # fmt: skip
    assert not any(SECRET.encode() in text for text in outputs)
    assert not AuditEvent.objects.filter(detail__contains=SECRET).exists()


def test_each_bad_field_is_refused_on_its_field_and_nothing_is_stored(ada, tmp_path, settings):
    _, api = ada
    assert _post(api, _body(tmp_path)).status_code == 201
    before = _rows()
    settings.TRITON_URL = "triton-default:8001"
    cases = [
        ({"name": "Edge B"}, "name", "lower-case"),
        ({"name": "edge-a", "grpc_url": "b:1", "http_url": "b:2"}, "name", "already exists"),
        ({"name": "default"}, "name", "reserved"),
        (
            {"grpc_url": "127.0.0.1:1"},
            "grpc_url",
            "already the gRPC address of the server 'edge-a'",
        ),
        ({"grpc_url": "TRITON-default:8001"}, "grpc_url", "the server 'default'"),
        ({"grpc_url": "no-port"}, "grpc_url", "host:port"),
        (
            {"http_url": "127.0.0.1:2"},
            "http_url",
            "already the HTTP address of the server 'edge-a'",
        ),
        ({"metrics_url": "ftp://x/metrics"}, "metrics_url", "http:// or https://"),
        ({"repository": str(tmp_path / "missing")}, "repository", "not an existing folder"),
        ({"repository": "/etc"}, "repository", "MODEL_REPOSITORY_ROOTS"),
        ({"repository": "relative"}, "repository", "absolute path"),
        ({"labels": {"gpu type": "H200"}}, "labels", "label name"),
        ({"labels": ["gpu=H200"]}, "labels", "JSON object"),
        ({"api_key": "has spaces " + SECRET}, "api_key", "printable ASCII"),
        ({"api_key_header": "Bad Header"}, "api_key_header", "lower-case"),
        ({"colour": "blue"}, "colour", "unknown field"),
    ]
    for fields, field, says in cases:
        body = _body(tmp_path, name="edge-b", grpc_url="b:1", http_url="b:2")
        body.update(fields)
        refused = _post(api, body)
        assert refused.status_code == 400, (fields, refused.content)
        errors = refused.json()["errors"]
        assert list(errors) == [field], (fields, errors)
        assert says in errors[field][0], (fields, errors)
        assert SECRET not in refused.content.decode()
    assert _post(api, ["not", "an", "object"]).status_code == 400
    assert _rows() == before
    assert not AuditEvent.objects.filter(action="server.add").exclude(target="edge-a").exists()


def test_a_repository_outside_the_roots_is_refused_by_the_api_the_page_and_the_cli(
    ada, tmp_path, settings
):
    page, api = ada
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "repo").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)
    settings.MODEL_REPOSITORY_ROOTS = [root]
    assert _post(api, _body(root / "repo")).status_code == 201
    before = _rows()
    says = f"must be MODEL_REPOSITORY or a folder in MODEL_REPOSITORY_ROOTS ({root})"
    for path in ("/etc", str(outside), f"{root}/../outside", str(root / "link")):
        body = _body(tmp_path, name="edge-b", grpc_url="b:1", http_url="b:2", repository=path)
        created = _post(api, body)
        assert created.status_code == 400, (path, created.content)
        assert list(created.json()["errors"]) == ["repository"]
        assert says in created.json()["errors"]["repository"][0]
        changed = _patch(api, "edge-a", {"repository": path})
        assert changed.status_code == 400 and says in changed.json()["errors"]["repository"][0]
        form = page.post("/servers/new/", {"name": "edge-b", "grpc_url": "b:1", "repository": path})
        assert form.status_code == 400
        block = form.content.decode().split('data-field="repository"', 1)[1].split("</p>", 1)[0]
        assert "MODEL_REPOSITORY_ROOTS" in block, block
        edit = page.post("/servers/edge-a/edit/", {
            "grpc_url": "127.0.0.1:1", "http_url": "127.0.0.1:2", "repository": path,
            "metrics_url": "http://127.0.0.1:3/metrics", "api_key_header": "dashboard-key",
        })  # fmt: skip
        assert edit.status_code == 400 and "MODEL_REPOSITORY_ROOTS" in edit.content.decode()
        with pytest.raises(CommandError, match=r"--repository: the model repository must be"):
            _run("add", "edge-b", "--grpc", "b:1", "--repository", path, "--as-user", "ada")
    assert _rows() == before
    assert not AuditEvent.objects.filter(action="server.add").exclude(target="edge-a").exists()
    assert not AuditEvent.objects.filter(action="server.change").exists()


def test_another_name_of_a_registered_address_is_refused_naming_only_a_server_one_sees(
    ada, django_user_model, tmp_path
):
    """An Admin narrowed to none on edge-a may not register it again as localhost: that
    would lift the narrowing. The refusal does not tell her its name."""
    page, api = ada
    body = _body(tmp_path, grpc_url="127.0.0.1:7001", http_url="127.0.0.1:7002")
    assert _post(api, body).status_code == 201
    alias = _body(tmp_path, name="edge-b", grpc_url="localhost:7001", http_url="b:2")
    refused = _post(api, alias)
    assert refused.status_code == 400
    assert refused.json()["errors"] == {
        "grpc_url": ["localhost:7001 is already the gRPC address of the server 'edge-a' "
                     "(as 127.0.0.1:7001, the same host)"],
    }  # fmt: skip
    assert _post(api, {**alias, "grpc_url": "b:1", "http_url": "[::1]:7002"}).json()["errors"] == {
        "http_url": ["[::1]:7002 is already the HTTP address of the server 'edge-a' "
                     "(as 127.0.0.1:7002, the same host)"],
    }  # fmt: skip
    assert (
        _post(api, _body(tmp_path, name="edge-c", grpc_url="c:1", http_url="c:2")).status_code
        == 201
    )
    before = _rows()
    ServerRole.objects.create(user=django_user_model.objects.get(username="ada"), kind="server",
                              value="edge-a", role="none")  # fmt: skip
    hidden = [_post(api, alias), _post(api, {**alias, "grpc_url": "127.0.0.1:7001"}),
              _patch(api, "edge-c", {"grpc_url": "[::1]:7001"})]  # fmt: skip
    for answer in hidden:
        assert answer.status_code == 400, answer.content
        assert answer.json()["errors"] == {"grpc_url": ["this address is already registered"]}
        assert b"edge-a" not in answer.content
    form = page.post("/servers/new/", {"name": "edge-b", "grpc_url": "localhost:7001"})
    assert form.status_code == 400
    html = form.content.decode()
    block = html.split('data-field="grpc_url"', 1)[1].split("</p>", 1)[0]
    assert "this address is already registered" in block and "edge-a" not in html
    with pytest.raises(CommandError, match="--grpc: this address is already registered"):
        _run("add", "edge-b", "--grpc", "LOCALHOST:7001", "--as-user", "ada")
    assert _rows() == before


def test_the_api_changes_a_server_keeps_clears_and_never_shows_the_key(ada, tmp_path):
    _, api = ada
    _post(api, _body(tmp_path))
    changed = _patch(api, "edge-a", {"labels": {"env": "staging"}, "http_url": "127.0.0.1:20"})
    assert changed.status_code == 200, changed.content
    assert changed.json()["labels"] == {"env": "staging"} and changed.json()["api_key_set"]
    assert servers.get("edge-a").api_key == SECRET  # absent: kept
    assert _patch(api, "edge-a", {"api_key": OTHER_SECRET}).status_code == 200
    assert servers.get("edge-a").api_key == OTHER_SECRET
    cleared = _patch(api, "edge-a", {"api_key": ""})
    assert cleared.status_code == 200 and cleared.json()["api_key_set"] is False
    details = list(
        AuditEvent.objects.filter(action="server.change")
        .order_by("id")
        .values_list("detail", flat=True)
    )
    assert details == [
        "http_url 127.0.0.1:2 -> 127.0.0.1:20; labels env=prod, gpu=H200 -> env=staging",
        "API key replaced",
        "API key cleared",
    ]
    before = _rows()
    renamed = _patch(api, "edge-a", {"name": "edge-z"})
    assert renamed.status_code == 400 and list(renamed.json()["errors"]) == ["name"]
    bad = _patch(api, "edge-a", {"grpc_url": "x", "labels": {"a b": "c"}})
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"grpc_url", "labels"}
    assert _rows() == before
    default = _patch(api, "default", {"labels": {"env": "prod"}})
    assert default.status_code == 409 and "TRITON_*" in default.json()["message"]
    assert _patch(api, "nope", {}).status_code == 404
    assert api.get("/api/v1/servers/nope/").status_code == 404
    assert api.delete("/api/v1/servers/default/").status_code == 409


def test_non_admins_are_refused_everywhere_and_audited(ada, olga, tmp_path):
    _, admin_api = ada
    page, api = olga
    _post(admin_api, _body(tmp_path))
    before = _rows()
    assert (
        _post(api, _body(tmp_path, name="edge-b", grpc_url="b:1", http_url="b:2")).status_code
        == 403
    )
    assert _patch(api, "edge-a", {"labels": {}}).status_code == 403
    assert api.delete("/api/v1/servers/edge-a/").status_code == 403
    assert api.get("/api/v1/servers/").status_code == 200  # reading is for everyone
    for path in ("/servers/new/", "/servers/edge-a/edit/", "/servers/edge-a/remove/"):
        assert page.get(path).status_code == 403, path
        assert page.post(path, {"grpc_url": "c:1"}).status_code == 403, path
    listing = page.get("/servers/").content.decode()
    assert "edge-a" in listing and 'id="add-server"' not in listing and "Remove…" not in listing
    assert _rows() == before
    denied = AuditEvent.objects.filter(outcome="denied", username="olga")
    assert denied.filter(action="server.change", server="edge-a").count() == 2  # API, page
    assert denied.filter(action="server.remove", server="edge-a").count() == 2
    assert denied.filter(action="server.add").count() == 2
    with pytest.raises(CommandError, match="not allowed"):
        call_command("servers", "remove", "edge-a", "--as-user", "olga")
    assert _rows() == before


def test_removing_is_refused_while_work_is_queued_or_running_and_then_cleans_up(
    ada, tmp_path, redis_db
):
    _, api = ada
    _post(api, _body(tmp_path))
    running = Sweep.objects.create(model="m", server="edge-a", params={}, state="running")
    queued = Sweep.objects.create(model="m", server="edge-a", params={}, state="queued",
                                  kind="search")  # fmt: skip
    Sweep.objects.create(model="m", server="edge-a", params={}, state="succeeded")
    ModelIntent.objects.create(server="edge-a", name="m", loaded=True)
    ModelIntent.objects.create(server="default", name="m", loaded=True)
    ModelMetricPoint.objects.create(server="edge-a", ts=1, resolution_s=10, model="m")
    redis_db.set(events.snapshot_key("edge-a"), "{}")
    refused = api.delete("/api/v1/servers/edge-a/")
    assert refused.status_code == 409
    message = refused.json()["message"]
    assert f"sweep #{running.pk} of m (running)" in message
    assert f"search #{queued.pk} of m (queued)" in message and "cancel them" in message
    assert TritonServer.objects.filter(name="edge-a").exists()
    failed = AuditEvent.objects.get(action="server.remove", outcome="failed")
    assert failed.server == "edge-a" and f"#{running.pk}" in failed.detail
    Sweep.objects.filter(pk__in=[running.pk, queued.pk]).update(state="cancelled")
    SweepSlot.objects.create(server="edge-a")
    removed = api.delete("/api/v1/servers/edge-a/")
    assert removed.status_code == 200, removed.content
    assert removed.json()["intents_deleted"] == 1 and removed.json()["history_points_deleted"] == 1
    assert not TritonServer.objects.filter(name="edge-a").exists()
    assert list(ModelIntent.objects.values_list("server", flat=True)) == ["default"]
    assert not ModelMetricPoint.objects.exists() and not SweepSlot.objects.exists()
    assert Sweep.objects.filter(server="edge-a").count() == 3  # its sweeps are kept
    assert redis_db.get(events.snapshot_key("edge-a")) is None
    ok = AuditEvent.objects.get(action="server.remove", outcome="ok")
    assert ok.server == "edge-a" and SECRET not in ok.detail and "1 desired load" in ok.detail
    assert api.delete("/api/v1/servers/edge-a/").status_code == 404


def test_a_removed_servers_poller_stops_at_the_next_refresh(ada, tmp_path, redis_db, monkeypatch):
    _, api = ada
    _post(api, _body(tmp_path))

    class Silent:
        def repository_index(self) -> list:
            return []

    monkeypatch.setattr(poller, "get_client", lambda server: Silent())
    # Workers close stale connections after reading; the test's own is inside a transaction.
    monkeypatch.setattr(poller, "close_old_connections", lambda: None)
    manager = poller.PollerManager(interval_s=0.1)  # reads the registry, as workers do
    manager.refresh()
    try:
        assert sorted(manager.running) == ["default", "edge-a"]
        thread = manager.running["edge-a"][1]
        assert api.delete("/api/v1/servers/edge-a/").status_code == 200
        manager.refresh()
        assert sorted(manager.running) == ["default"]
        thread.join(5)
        assert not thread.is_alive()
    finally:
        manager.stop_all()


# --- the pages ---------------------------------------------------------------------------------


def test_the_pages_add_edit_and_remove_with_errors_on_their_fields(ada, tmp_path, settings):
    page, _ = ada
    # Every loopback address is this host: edge-a's default HTTP port must be free there.
    settings.TRITON_HTTP_URL = "127.0.0.1:18000"
    form = page.get("/servers/new/").content.decode()
    assert 'type="password"' in form and 'name="api_key"' in form
    bad = page.post("/servers/new/", {"name": "Edge", "grpc_url": settings.TRITON_URL,
                                      "labels": "gpu", "api_key": SECRET})  # fmt: skip
    assert bad.status_code == 400 and not TritonServer.objects.exists()
    html = bad.content.decode()
    # Every field's refusal at once, each on its field.
    for field, says in (("name", "lower-case"), ("labels", "write NAME=VALUE"),
                        ("grpc_url", "the server &#x27;default&#x27;")):  # fmt: skip
        block = html.split(f'data-field="{field}"', 1)[1].split("</p>", 1)[0]
        assert says in block, (field, block)
    assert SECRET not in html  # a typed key is not sent back
    added = page.post(
        "/servers/new/",
        {"name": "edge-a", "grpc_url": "127.0.0.2:1", "repository": str(tmp_path),
         "labels": "gpu=H200, env=prod", "api_key": SECRET},
    )  # fmt: skip
    assert added.status_code == 302 and added["Location"] == "/servers/"
    server = servers.get("edge-a")
    assert server.labels == {"gpu": "H200", "env": "prod"} and server.api_key == SECRET
    assert server.http_url == "127.0.0.2:8000"  # Triton's default port on the gRPC host
    listing = page.get("/servers/").content.decode()
    assert 'data-server="edge-a"' in listing and "from the environment" in listing
    assert SECRET not in listing and "Server edge-a added" in listing
    edit = page.get("/servers/edge-a/edit/").content.decode()
    assert SECRET not in edit and 'name="clear_api_key"' in edit and "env=prod, gpu=H200" in edit
    fields = {"grpc_url": "127.0.0.2:1", "http_url": "127.0.0.2:8000",
              "metrics_url": server.metrics_url, "repository": str(tmp_path),
              "labels": "env=staging", "api_key_header": "dashboard-key", "api_key": ""}  # fmt: skip
    assert page.post("/servers/edge-a/edit/", fields).status_code == 302
    assert servers.get("edge-a").labels == {"env": "staging"}
    assert servers.get("edge-a").api_key == SECRET  # an empty box keeps the key
    bad_edit = page.post("/servers/edge-a/edit/", {**fields, "metrics_url": "nope"})
    assert bad_edit.status_code == 400
    assert "http:// or https://" in bad_edit.content.decode().split('data-field="metrics_url"')[1]
    assert servers.get("edge-a").metrics_url == server.metrics_url
    both = page.post("/servers/edge-a/edit/", {**fields, "clear_api_key": "on", "api_key": "x"})
    assert both.status_code == 400 and servers.get("edge-a").api_key == SECRET
    assert "not both" in both.content.decode().split('data-field="api_key"')[1].split("</p>")[0]
    assert page.post("/servers/edge-a/edit/", {**fields, "clear_api_key": "on"}).status_code == 302
    assert servers.get("edge-a").api_key == ""
    assert page.get("/servers/default/edit/").status_code == 302  # not editable here
    Sweep.objects.create(model="m", server="edge-a", params={}, state="queued")
    blocked = page.get("/servers/edge-a/remove/").content.decode()
    assert 'id="remove-blocked"' in blocked and "(queued)" in blocked
    assert page.post("/servers/edge-a/remove/").status_code == 302
    assert TritonServer.objects.filter(name="edge-a").exists()
    Sweep.objects.update(state="cancelled")
    confirm = page.get("/servers/edge-a/remove/").content.decode()
    assert 'id="remove-confirm"' in confirm
    assert page.post("/servers/edge-a/remove/").status_code == 302
    assert not TritonServer.objects.exists()
    actions = list(
        AuditEvent.objects.filter(action__startswith="server.").values_list(
            "action", "outcome", "server"
        )
    )
    assert sorted(actions) == sorted([
        ("server.add", "ok", "edge-a"), ("server.change", "ok", "edge-a"),
        ("server.change", "ok", "edge-a"), ("server.remove", "failed", "edge-a"),
        ("server.remove", "ok", "edge-a"),
    ])  # fmt: skip
    assert not AuditEvent.objects.filter(detail__contains=SECRET).exists()


# --- the CLI -----------------------------------------------------------------------------------


def _run(*args: str) -> str:
    out = StringIO()
    call_command("servers", *args, stdout=out)
    return out.getvalue()


def test_the_cli_adds_lists_changes_and_removes_reading_the_key_from_the_environment(
    ada, tmp_path, monkeypatch, settings
):
    monkeypatch.setenv("EDGE_KEY", SECRET)
    settings.TRITON_HTTP_URL = "127.0.0.1:18000"  # as in the pages' test
    added = _run("add", "edge-a", "--grpc", "127.0.0.2:1", "--label", "gpu=H200",
                 "--label", "env=prod", "--repository", str(tmp_path),
                 "--api-key-env", "EDGE_KEY", "--as-user", "ada")  # fmt: skip
    assert "added edge-a" in added and "API key set" in added
    assert servers.get("edge-a").api_key == SECRET
    assert servers.get("edge-a").labels == {"gpu": "H200", "env": "prod"}
    listed = _run("list")
    assert "default (from the environment)" in listed and "edge-a: gRPC 127.0.0.2:1" in listed
    assert "DOWN (Triton unreachable since" in listed
    as_json = json.loads(_run("list", "--json"))
    assert as_json[1]["name"] == "edge-a" and as_json[1]["api_key_set"] is True
    changed = _run("change", "edge-a", "--label", "env=dev", "--clear-api-key", "--as-user", "ada")
    assert "changed labels, api_key of edge-a" in changed
    assert servers.get("edge-a").api_key == "" and servers.get("edge-a").labels == {"env": "dev"}
    before = _rows()
    for args, says in (
        (("add", "edge-b", "--grpc", "127.0.0.2:1"), "--grpc: 127.0.0.2:1 is already"),
        (("add", "edge-b", "--grpc", "b:1", "--label", "gpu"), "--label: label 'gpu'"),
        (("add", "edge-b", "--grpc", "b:1", "--metrics", "x"), "--metrics: must be an http://"),
        (("add", "edge-b", "--grpc", "b:1", "--api-key-env", "NOT_SET_ANYWHERE"), "is not set"),
        (("remove", "default"), r"TRITON_\* environment"),
        (("remove", "nope"), "no Triton server named 'nope'"),
    ):
        with pytest.raises(CommandError, match=says):
            _run(*args, "--as-user", "ada")
    assert _rows() == before
    assert "removed" in _run("remove", "edge-a", "--as-user", "ada")
    assert not TritonServer.objects.exists()
    assert not AuditEvent.objects.filter(detail__contains=SECRET).exists()
    assert AuditEvent.objects.filter(action="server.add", username="ada", server="edge-a").exists()
    assert SECRET not in added + listed + changed


# --- every process reads the registry at call time ------------------------------------------


def test_a_server_added_elsewhere_is_known_at_once_and_forgotten_once_removed(ada, tmp_path):
    page, api = ada
    _post(api, _body(tmp_path))
    assert page.get("/models/", {"server": "edge-a"}).status_code == 200
    api.delete("/api/v1/servers/edge-a/")
    assert page.get("/models/", {"server": "edge-a"}).status_code == 404
    assert "edge-a" not in servers.names()


# --- a server that requires its own worker ----------------------------------------------------


def test_requiring_its_own_worker_is_set_by_the_api_the_page_and_the_cli(ada, tmp_path):
    """The choice `jobs.queues` reads (jobs wait for a worker on triton.<name>)."""
    admin, api = ada
    assert _post(api, _body(tmp_path, name="edge-a", require_local_worker=True)).status_code == 201
    assert servers.get("edge-a").require_local_worker
    assert api.get("/api/v1/servers/edge-a/").json()["require_local_worker"] is True
    assert _patch(api, "edge-a", {"require_local_worker": "maybe"}).status_code == 400
    assert servers.get("edge-a").require_local_worker, "a refused change stores nothing"
    page = admin.get("/servers/edge-a/edit/").content.decode()
    assert (
        'name="require_local_worker"' in page
        and "checked" in page.split('name="require_local_worker"', 1)[1].split(">", 1)[0]
    )
    _run("change", "edge-a", "--no-require-local-worker", "--as-user", "ada")
    assert not servers.get("edge-a").require_local_worker
    detail = AuditEvent.objects.filter(action="server.add", server="edge-a").get().detail
    assert "requires its own worker" in detail
