"""The Triton servers as a parameter, without a Triton: the registry and its checks, ?server=
on pages, the API and websockets, per-server state, the pollers' bookkeeping, migrations."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.core.exceptions import ValidationError
from django.test import Client

from fleet import poller
from registry import server_rules, servers
from registry.models import TritonServer
from repository_app import events, history
from repository_app.models import ConfigRevision, ModelIntent
from team.models import AuditEvent

SECRET = "s3cr3t-key-never-shown"


def row(tmp_path: Path, **fields: object) -> TritonServer:
    values: dict[str, object] = {
        "name": "edge-a",
        "grpc_url": "triton-a:8001",
        "http_url": "triton-a:8000",
        "metrics_url": "http://triton-a:8002/metrics",
        "repository": str(tmp_path),
        "labels": {"gpu": "H200", "env": "prod"},
        "api_key": SECRET,
    }
    values.update(fields)
    return TritonServer(**values)


def refused(tmp_path: Path, **fields: object) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        row(tmp_path, **fields).full_clean()
    return caught.value.message_dict


# --- the registry and its checks ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("name", "Edge", "lower-case"),
        ("name", "-edge", "starting with a letter or digit"),
        ("name", "e" * 41, "1 to 40"),
        ("name", "default", "reserved"),
        ("name", "a b", "lower-case"),
        ("grpc_url", "triton-a", "host:port"),
        ("grpc_url", "triton-a:0", "host:port"),
        ("grpc_url", "triton a:8001", "without spaces"),
        ("http_url", "", "host:port"),
        ("metrics_url", "ftp://triton-a/metrics", "http:// or https://"),
        ("metrics_url", "http://", "http:// or https://"),
        ("labels", {"gpu type": "H200"}, "label name"),
        ("labels", {"gpu": "x" * 64}, "label value"),
        ("labels", {f"k{i}": "v" for i in range(33)}, "at most 32"),
        ("labels", ["gpu=H200"], "JSON object"),
        ("repository", "relative/path", "absolute path"),
        ("repository", "/no/such/folder/anywhere", "outside them"),  # MODEL_REPOSITORY_ROOTS
        ("api_key_header", "Dashboard Key", "lower-case"),
    ],
)
def test_each_bad_field_is_refused_on_its_own_field(tmp_path, field, value, says):
    errors = refused(tmp_path, **{field: value})
    assert list(errors) == [field], errors
    assert says in errors[field][0]


@pytest.mark.django_db
def test_a_repository_is_a_root_or_a_folder_under_one_with_links_and_dots_resolved(
    tmp_path, settings
):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "repo").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)
    settings.MODEL_REPOSITORY_ROOTS = [root]
    for allowed in (root, root / "repo", root / "repo" / ".." / "repo"):
        assert server_rules.check_repository(str(allowed)) == Path(os.path.normpath(allowed))
    for path, says in (
        ("/etc", "is outside them"),
        (str(outside), "is outside them"),
        (f"{root}/../outside", "is outside them"),
        (str(root / "link"), "leads out of them through a symbolic link"),
        (str(root / "repo" / ".." / "link"), "leads out of them through a symbolic link"),
    ):
        errors = refused(tmp_path, repository=path)
        assert list(errors) == ["repository"], (path, errors)
        assert errors["repository"] == [
            f"the model repository must be MODEL_REPOSITORY or a folder in "
            f"MODEL_REPOSITORY_ROOTS ({root}); {path} {says}"
        ], path
    # Within the roots only does it say whether a folder exists.
    assert (
        "not an existing folder" in refused(tmp_path, repository=str(root / "no"))["repository"][0]
    )
    # MODEL_REPOSITORY itself is always allowed; without roots set, its parent is the root.
    settings.MODEL_REPOSITORY = outside
    assert server_rules.check_repository(str(outside)) == outside
    settings.MODEL_REPOSITORY_ROOTS = []
    settings.MODEL_REPOSITORY = root / "repo"
    assert server_rules.repository_roots() == [root]
    assert not server_rules.outside_roots(root / "repo" / "..")
    # The link resolves first: root/link/.. is outside's parent.
    assert server_rules.outside_roots(outside) and server_rules.outside_roots(root / "link" / "..")
    assert not TritonServer.objects.exists()


def _getaddrinfo(host: str, *args: object, **kwargs: object) -> list[tuple]:
    """A resolver that knows gpu-a (IPv4 and IPv6) and gpu-a.lan, and nothing else."""
    table = {"gpu-a": ["10.0.0.5", "2001:db8::5"], "gpu-a.lan": ["10.0.0.5"]}
    if host not in table:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [
        (socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, 0))
        for ip in table[host]
    ]


def test_one_server_under_another_host_name_is_the_same_address(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", _getaddrinfo)
    same = server_rules.same_address
    # Every loopback address reaches a Triton listening on 0.0.0.0 (its default).
    for alias in ("localhost:8001", "LOCALHOST:8001", "[::1]:8001", "127.0.0.2:8001",
                  "[::ffff:127.0.0.1]:8001", "0.0.0.0:8001"):  # fmt: skip
        assert same(alias, "127.0.0.1:8001"), alias
    assert same("[::ffff:10.0.0.5]:8001", "10.0.0.5:8001")
    # A name is every address it resolves to, IPv4 and IPv6.
    assert same("gpu-a:8001", "10.0.0.5:8001") and same("gpu-a:8001", "[2001:db8::5]:8001")
    assert same("gpu-a.lan:8001", "gpu-a:8001")
    assert not same("gpu-a:8001", "10.0.0.5:8002") and not same("localhost:8001", "gpu-a:8001")
    # A name that does not resolve compares by its text, without failing.
    assert not same("nowhere:8001", "10.0.0.5:8001") and same("NOWHERE:8001", "nowhere:8001")
    assert server_rules.taken_by("gpu-a:8001", [("x", "nowhere:8001"), ("y", "10.0.0.5:8001")]) == (
        "y", "10.0.0.5:8001"
    )  # fmt: skip


@pytest.mark.django_db
def test_a_taken_address_names_its_server_only_to_a_caller_who_may_see_it(tmp_path):
    row(tmp_path, grpc_url="127.0.0.1:7001", http_url="127.0.0.1:7002").save()
    fields = {"name": "edge-b", "grpc_url": "localhost:7001", "http_url": "[::1]:7002"}
    with pytest.raises(server_rules.InvalidServer) as seen:
        server_rules.check(fields, may_see=lambda name: True)
    assert seen.value.errors == {
        "grpc_url": "localhost:7001 is already the gRPC address of the server 'edge-a' "
        "(as 127.0.0.1:7001, the same host)",
        "http_url": "[::1]:7002 is already the HTTP address of the server 'edge-a' "
        "(as 127.0.0.1:7002, the same host)",
    }
    for fields_of in (fields, {**fields, "grpc_url": "127.0.0.1:7001"}):
        with pytest.raises(server_rules.InvalidServer) as hidden:
            server_rules.check(fields_of, may_see=lambda name: name != "edge-a")
        assert hidden.value.errors == {
            "grpc_url": server_rules.ADDRESS_TAKEN, "http_url": server_rules.ADDRESS_TAKEN
        }  # fmt: skip
    # The model's own checks (the shell, fixtures) have nobody to hide it from.
    assert (
        "the server 'edge-a'"
        in refused(tmp_path, name="edge-b", grpc_url="LOCALHOST:7001")["grpc_url"][0]
    )
    assert TritonServer.objects.count() == 1


@pytest.mark.django_db
def test_a_grpc_address_is_one_servers_even_in_another_case_or_with_spaces(tmp_path, settings):
    row(tmp_path).full_clean()
    row(tmp_path).save()
    errors = refused(tmp_path, name="edge-b", grpc_url="  TRITON-A:8001 ")
    assert errors["grpc_url"] == [
        "TRITON-A:8001 is already the gRPC address of the server 'edge-a'"
    ]
    settings.TRITON_URL = "127.0.0.1:8001"
    errors = refused(tmp_path, name="edge-b", grpc_url="127.0.0.1:8001")
    assert "the server 'default'" in errors["grpc_url"][0]
    edited = TritonServer.objects.get(name="edge-a")
    edited.http_url = "triton-a:9000"
    edited.full_clean()  # its own address is not a duplicate


@pytest.mark.django_db
def test_the_api_key_is_stored_and_never_shown(tmp_path):
    stored = row(tmp_path)
    stored.full_clean()
    stored.save()
    server = servers.get("edge-a")
    assert server.api_key == SECRET and server.client().headers == {
        "triton-grpc-protocol-dashboard-key": SECRET
    }
    shown = [
        repr(stored),
        str(stored),
        repr(server),
        str(server),
        json.dumps(server.as_json()),
        str(server_rules.InvalidServer({"api_key": "x"})),
    ]
    assert not any(SECRET in text for text in shown)
    assert server.as_json()["api_key_set"] is True
    with pytest.raises(ValidationError) as caught:
        row(tmp_path, name="edge-b", grpc_url="b:1", api_key=SECRET + " \n").full_clean()
    assert SECRET not in str(caught.value)


@pytest.mark.django_db
def test_the_default_server_is_the_environment_read_at_call_time(settings, tmp_path):
    settings.TRITON_URL = "10.1.2.3:8001"
    settings.TRITON_HTTP_URL = "10.1.2.3:8000"
    settings.MODEL_REPOSITORY = tmp_path
    default = servers.get("default")
    assert default == servers.default()
    assert (default.name, default.grpc_url, default.http_url) == (
        "default", "10.1.2.3:8001", "10.1.2.3:8000"
    )  # fmt: skip
    assert default.from_env and default.is_default and default.repository == tmp_path
    assert not TritonServer.objects.exists()
    assert [s.name for s in servers.all()] == ["default"]
    for name in ("bogus", "Default", "../etc", 7):
        with pytest.raises(servers.UnknownServer, match="no Triton server named"):
            servers.get(name)


@pytest.mark.django_db
def test_servers_on_one_repository_share_its_key(tmp_path, settings):
    settings.MODEL_REPOSITORY = tmp_path / "repo"
    (tmp_path / "repo").mkdir()
    (tmp_path / "own").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "repo")
    row(tmp_path, name="shared", grpc_url="s:1", repository=str(tmp_path / "link")).save()
    row(tmp_path, name="solo", grpc_url="o:1", repository=str(tmp_path / "own")).save()
    keys = {s.name: servers.repository_key(s) for s in servers.all()}
    assert keys == {"default": "", "shared": "", "solo": str((tmp_path / "own").resolve())}
    assert [s.name for s in servers.sharing(servers.get("shared"))] == ["default", "shared"]
    assert (
        servers.with_server("/models/?q=a#x", servers.get("solo")) == "/models/?q=a&server=solo#x"
    )
    assert servers.with_server("/models/", servers.default()) == "/models/"


# --- ?server= on pages, the API and websockets ------------------------------------------------


@pytest.fixture()
def viewer(django_user_model):
    user = django_user_model.objects.create_user("vic", password="pw-for-vic-1")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def unreachable(tmp_path, settings):
    """A registered server nothing answers for, on a repository of its own."""
    settings.TRITON_TIMEOUT_S = 0.5
    (tmp_path / "only_here" / "1").mkdir(parents=True)
    (tmp_path / "only_here" / "config.pbtxt").write_text('name: "only_here"\nbackend: "python"\n')
    stored = row(tmp_path, name="far", grpc_url="127.0.0.1:1", http_url="127.0.0.1:2",
                 metrics_url="http://127.0.0.1:3/metrics")  # fmt: skip
    stored.full_clean()
    stored.save()
    return servers.get("far")


@pytest.mark.django_db
def test_an_unknown_server_is_a_404_with_the_message_on_pages_and_the_api(viewer):
    page = viewer.get("/models/", {"server": "bogus"})
    assert page.status_code == 404
    assert "No Triton server named &#x27;bogus&#x27;" in page.content.decode()
    api = viewer.get("/api/v1/models/", {"server": "bogus"})
    assert api.status_code == 404
    assert api.json() == {"message": "no Triton server named 'bogus'", "field": None}
    # Nobody learns server names without signing in.
    assert Client().get("/models/", {"server": "bogus"}).status_code == 302
    assert Client().get("/api/v1/models/", {"server": "bogus"}).status_code in (401, 403)


@pytest.mark.django_db
def test_a_page_of_another_server_shows_its_repository_the_switcher_and_keeps_its_redirects(
    viewer, unreachable, django_user_model
):
    html = viewer.get("/models/", {"server": "far"}).content.decode()
    assert "only_here" in html  # its repository, rendered from disk while it is down
    assert "Triton unreachable at 127.0.0.1:1" in html
    assert 'id="server-switcher"' in html and '<option value="far" selected>' in html
    assert 'name="triton-server" content="far"' in html and SECRET not in html
    default_html = viewer.get("/models/").content.decode()
    assert "only_here" not in default_html and 'content="default"' in default_html
    operator = django_user_model.objects.create_superuser("ops", "o@x.y", "pw-for-ops-1")
    viewer.force_login(operator)
    response = viewer.post("/models/only_here/load?server=far")
    assert response.status_code == 302 and response["Location"] == "/models/only_here/?server=far"


@pytest.mark.django_db
def test_a_stored_repository_outside_the_roots_is_neither_listed_nor_read(
    viewer, unreachable, tmp_path, settings
):
    """`far` was stored while its repository was allowed; MODEL_REPOSITORY_ROOTS changed."""
    from repository_app import repository

    settings.MODEL_REPOSITORY_ROOTS = [tmp_path / "elsewhere"]
    stored = list(TritonServer.objects.values_list())
    page = viewer.get("/models/", {"server": "far"})
    assert page.status_code == 200 and "only_here" not in page.content.decode()
    detail = viewer.get("/models/only_here/", {"server": "far"})
    assert detail.status_code == 404
    assert "outside MODEL_REPOSITORY_ROOTS" in detail.content.decode()
    assert viewer.get("/api/v1/models/", {"server": "far"}).json() == []
    assert viewer.get("/api/v1/models/only_here/", {"server": "far"}).status_code == 404
    versions = viewer.get("/api/v1/models/only_here/versions/", {"server": "far"})
    assert versions.status_code == 404 and versions.json()["message"] == repository.OUTSIDE_ROOTS
    assert str(tmp_path) not in versions.content.decode() + detail.content.decode()
    assert repository.model_names(unreachable.repository) == []
    with pytest.raises(repository.RepositoryError, match="outside MODEL_REPOSITORY_ROOTS"):
        repository.sha256_of(tmp_path / "only_here" / "config.pbtxt", unreachable.repository)
    assert list(TritonServer.objects.values_list()) == stored
    # Nor does it take an upload, nor does a sweep snapshot its config.
    from profiler_app.jobs import config_snapshot
    from repository_app.uploads.staging import UploadError, staging_root

    with pytest.raises(UploadError, match="outside MODEL_REPOSITORY_ROOTS"):
        staging_root(unreachable)
    assert config_snapshot(unreachable, "only_here") == ("", "")
    # Back inside the roots, it is read again.
    settings.MODEL_REPOSITORY_ROOTS = [tmp_path]
    assert "only_here" in viewer.get("/models/", {"server": "far"}).content.decode()


@pytest.mark.django_db
def test_without_other_servers_pages_look_as_before(viewer):
    html = viewer.get("/models/").content.decode()
    assert 'id="server-switcher"' not in html


def _ws(path: str, user):  # type: ignore[no-untyped-def]
    from dashboard.asgi import application

    communicator = WebsocketCommunicator(
        application, path, headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")]
    )
    communicator.scope["user"] = user
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_for_an_unknown_server_is_refused_and_a_known_one_gets_its_snapshot(
    redis_db, unreachable, django_user_model
):
    from asgiref.sync import sync_to_async

    user = await sync_to_async(django_user_model.objects.create_user)("wes")
    await sync_to_async(events.publish)(
        events.repository_group("far"), "models.states",
        {"models": {"only_here": {"state": "READY"}}, "full": True}, snapshot_of="far",
    )  # fmt: skip
    bogus = _ws("/ws/repository/?server=bogus", user)
    connected, code = await bogus.connect()
    assert not connected and code == 4404
    far = _ws("/ws/repository/?server=far", user)
    connected, _ = await far.connect()
    assert connected
    first = await far.receive_json_from(timeout=10)
    assert first["snapshot"] and first["group"] == "repository.far"
    assert first["models"] == {"only_here": {"state": "READY"}}
    await far.disconnect()
    default = _ws("/ws/repository/", user)
    connected, _ = await default.connect()
    assert connected and await default.receive_nothing(timeout=0.3)  # no default snapshot yet
    await default.disconnect()


# --- per-server state --------------------------------------------------------------------------


@pytest.mark.django_db
def test_desired_loads_history_and_audit_are_kept_per_server(unreachable, tmp_path):
    from repository_app import control
    from team import audit

    ModelIntent.objects.create(server="default", name="m", loaded=True)
    ModelIntent.objects.create(server="far", name="m", loaded=False)
    ModelIntent.objects.create(server="far", name="only_here", loaded=True)
    assert control.models_to_restore(servers.default(), {}) == ["m"]
    assert control.models_to_restore(unreachable, {}) == ["only_here"]
    audit.record("ana", "load", model_name="m", server="far", outcome="ok", detail="far's")
    assert control.last_outcomes(unreachable, ["m"])["m"]["message"] == "far's"
    assert control.last_outcomes(servers.default(), ["m"]) == {}
    assert AuditEvent.objects.get().server == "far"
    recorder = history.HistoryRecorder("far")
    from triton_api.prometheus import parse_prometheus

    text = 'nv_inference_request_success{model="m",version="1"} %d\n'
    recorder.observe(1_000_000_000.0, parse_prometheus(text % 1))
    recorder.observe(1_000_000_012.0, parse_prometheus(text % 5))
    from repository_app.models import ModelMetricPoint

    assert set(ModelMetricPoint.objects.values_list("server", flat=True)) == {"far"}
    assert history.history_json("1h", 1_000_000_100.0, servers.default())["models"] == {}
    assert "m" in history.history_json("1h", 1_000_000_100.0, unreachable)["models"]


@pytest.mark.django_db
def test_a_config_saved_on_one_server_is_in_the_history_of_every_server_on_its_repository(
    tmp_path, settings
):
    from repository_app.editor import saving

    settings.MODEL_REPOSITORY = tmp_path
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    row(tmp_path, name="twin", grpc_url="twin:1").save()
    twin = servers.get("twin")
    current = saving.read_current("m", twin)
    saving.save_config(
        "m", 'name: "m"\nbackend: "python"\nmax_batch_size: 2\n', server=twin,
        base_sha256=current.sha256, author_id=None, source="text",
    )  # fmt: skip
    assert ConfigRevision.objects.filter(repository="").count() == 2  # as seen, then saved
    assert [r.number for r in saving.history("m", servers.default())] == [2, 1]


# --- one poller per server ----------------------------------------------------------------------


class _Index:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def repository_index(self) -> list:
        from triton_api.client import ModelState

        return [ModelState(n, "1", "READY", "") for n in self.names]


@pytest.mark.django_db
def test_the_manager_keeps_one_poller_per_known_server_with_a_lock_each(
    redis_db, monkeypatch, unreachable
):
    clients = {"default": _Index(["a"]), "far": _Index(["only_here"])}
    monkeypatch.setattr(poller, "get_client", lambda server: clients[server.name])
    known = [servers.default(), unreachable]
    manager = poller.PollerManager(interval_s=0.1, known=lambda: list(known))
    manager.refresh()
    try:
        assert sorted(manager.running) == ["default", "far"]
        for name, models in (("default", {"a"}), ("far", {"only_here"})):
            snapshot = None
            for _ in range(100):
                snapshot = events.load_snapshot(name)
                if snapshot:
                    break
                threading.Event().wait(0.05)
            assert snapshot is not None and set(snapshot["models"]) == models
            assert snapshot["group"] == f"repository.{name}"
            assert redis_db.get(poller.lock_key(name)) is not None
        thread = manager.running["far"][1]
        known.pop()  # the server was removed
        manager.refresh()
        assert sorted(manager.running) == ["default"]
        thread.join(5)
        assert not thread.is_alive() and redis_db.get(poller.lock_key("far")) is None
    finally:
        manager.stop_all()


# --- migrations ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_migrations_name_the_default_server_on_existing_rows_and_go_back(settings):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [
        ("repository_app", "0006_metric_history"),
        ("profiler_app", "0005_sweep_kind"),
        ("team", "0001_initial"),
    ]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    try:
        old = MigrationExecutor(connection).loader.project_state(before).apps
        old.get_model("profiler_app", "Sweep").objects.create(
            model="m", server=settings.TRITON_URL, params={}
        )
        old.get_model("profiler_app", "SweepSlot").objects.create(server=settings.TRITON_URL)
        old.get_model("repository_app", "ConfigRevision").objects.create(
            model="m", number=1, text="", sha256="0", source="disk"
        )
        old.get_model("repository_app", "ModelIntent").objects.create(name="m", loaded=True)
        old.get_model("team", "AuditEvent").objects.create(username="a", action="load")
        old.get_model("team", "AuditEvent").objects.create(username="a", action="login")
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
        new = executor.loader.project_state(latest).apps
        assert list(new.get_model("profiler_app", "Sweep").objects.values_list("server")) == [
            ("default",)
        ]
        assert new.get_model("profiler_app", "SweepSlot").objects.get().server == "default"
        assert new.get_model("repository_app", "ConfigRevision").objects.get().repository == ""
        assert new.get_model("repository_app", "ModelIntent").objects.get().server == "default"
        audit = dict(new.get_model("team", "AuditEvent").objects.values_list("action", "server"))
        assert audit == {"load": "default", "login": ""}
        # Back: addresses again, and only the default server's rows where names were unique.
        new.get_model("repository_app", "ModelIntent").objects.create(
            server="solo", name="m", loaded=True
        )
        executor = MigrationExecutor(connection)
        executor.migrate(before)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        assert old.get_model("profiler_app", "Sweep").objects.get().server == settings.TRITON_URL
        assert old.get_model("repository_app", "ModelIntent").objects.count() == 1
    finally:
        MigrationExecutor(connection).migrate(latest)


@pytest.mark.django_db(transaction=True)
def test_servers_and_rollouts_move_to_their_apps_with_their_rows_and_content_types():
    """registry and fleet take TritonServer and the rollouts' models without touching their
    tables; the content types (and the permissions hung on them) follow, and back again."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    back = [("registry", None), ("fleet", None)]  # unapplies repository_app 0014 with them
    before = [
        ("repository_app", "0013_publishjob"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(back)
    try:
        old = MigrationExecutor(connection).loader.project_state(before).apps
        old.get_model("repository_app", "TritonServer").objects.create(
            name="far", grpc_url="far:8001", grpc_key="far:8001", http_url="far:8000",
            metrics_url="http://far:8002/metrics", repository="/models",
        )  # fmt: skip
        rollout = old.get_model("repository_app", "Rollout").objects.create(
            action="load", model="m", chosen="hand-picked: far", username="a"
        )
        old.get_model("repository_app", "RolloutTarget").objects.create(
            rollout=rollout, server="far", state="succeeded"
        )
        content_type = old.get_model("contenttypes", "ContentType")
        for model in ("tritonserver", "rollout", "rollouttarget"):
            content_type.objects.get_or_create(app_label="repository_app", model=model)
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
        new = executor.loader.project_state(latest).apps
        assert new.get_model("registry", "TritonServer").objects.get().name == "far"
        target = new.get_model("fleet", "RolloutTarget").objects.select_related("rollout").get()
        assert (target.server, target.rollout.model) == ("far", "m")
        moved = new.get_model("contenttypes", "ContentType").objects
        assert set(
            moved.filter(model__in=("tritonserver", "rollout", "rollouttarget")).values_list(
                "app_label", "model"
            )
        ) == {  # fmt: skip
            ("registry", "tritonserver"),
            ("fleet", "rollout"),
            ("fleet", "rollouttarget"),
        }
        executor = MigrationExecutor(connection)
        executor.migrate(back)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        assert old.get_model("repository_app", "TritonServer").objects.get().name == "far"
        assert old.get_model("repository_app", "RolloutTarget").objects.get().server == "far"
        back = old.get_model("contenttypes", "ContentType").objects
        assert set(back.filter(model__in=("tritonserver", "rollout", "rollouttarget"))
                   .values_list("app_label", flat=True)) == {"repository_app"}  # fmt: skip
    finally:
        MigrationExecutor(connection).migrate(latest)


# --- the commands and the sweep API name their server --------------------------------------


@pytest.mark.django_db
def test_commands_refuse_an_unknown_server_and_use_a_known_one(unreachable, tmp_path):
    from django.core.management import CommandError, call_command

    config = tmp_path / "only_here" / "config.pbtxt"
    for args in (
        ("triton", "status", "--server", "bogus"),
        ("perf_sweep", "only_here", "--server", "bogus"),
        ("validate_config", str(config), "--server", "bogus"),
    ):
        with pytest.raises(CommandError, match="--server: no Triton server named 'bogus'"):
            call_command(*args)
    with pytest.raises(CommandError, match="Triton unreachable at 127.0.0.1:1"):
        call_command("triton", "status", "--server", "far")


@pytest.mark.django_db
def test_a_sweep_is_created_on_the_server_its_body_names(unreachable, django_user_model):
    from team.roles import OPERATOR, set_role

    user = django_user_model.objects.create_user("opal")
    set_role(user, OPERATOR)
    api = Client()
    api.force_login(user)

    def create(body: dict[str, object], query: str = "") -> dict[str, object]:
        response = api.post(
            f"/api/v1/sweeps/{query}", {"model": "only_here", **body},
            content_type="application/json",
        )  # fmt: skip
        assert response.status_code in (400, 404), response.content
        return dict(response.json())

    assert create({"server": "bogus"}) == {
        "message": "no Triton server named 'bogus'", "field": "server"
    }  # fmt: skip
    # The body's server is the one asked (nothing answers at far's address).
    assert "Triton unreachable at 127.0.0.1:1" in str(create({"server": "far"})["message"])
    assert "Triton unreachable at 127.0.0.1:1" in str(create({}, "?server=far")["message"])
    assert create({"server": "default"}, "?server=far")["field"] == "server"
