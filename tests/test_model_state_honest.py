"""What the model pages say is what Triton serves: drift from the file, served versions,
the last action's outcome, a neutral "unloaded", validator badges, unknown while Triton is
down, model delete, and the API's 404 for unknown models."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.test import Client

from repository_app import control, served, servers
from repository_app.modelconfig import parse_config
from repository_app.status import display, state_json
from repository_app.triton.client import ModelState, TritonClient
from repository_app.uploads import publish
from team import audit
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, set_role

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
DISK = """name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
# What Triton answers for DISK: the same, plus the fields it fills itself.
SERVED = {
    "name": "m",
    "backend": "python",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 8,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": ["4"]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": ["4"]}],
    "instance_group": [{"name": "m_0", "count": 1, "kind": "KIND_CPU"}],
    "default_model_filename": "model.py",
    "dynamic_batching": {"max_queue_delay_microseconds": "100"},
    "optimization": {"input_pinned_memory": {"enable": True}},
}


def config(text: str = DISK):  # type: ignore[no-untyped-def]
    parsed = parse_config(text).config
    assert parsed is not None
    return parsed


def test_what_triton_fills_in_itself_is_not_drift():
    assert served.drift(config(), served.from_triton(SERVED)) == []


def test_a_changed_removed_or_added_field_is_drift():
    changed = config(DISK.replace("max_batch_size: 8", "max_batch_size: 4"))
    fields = {d.field: d for d in served.drift(changed, served.from_triton(SERVED))}
    assert set(fields) == {"max_batch_size"}
    assert fields["max_batch_size"].describe() == "max_batch_size: 4 in config.pbtxt, 8 served"
    removed = config(DISK.replace("dynamic_batching { max_queue_delay_microseconds: 100 }\n", ""))
    drift = served.drift(removed, served.from_triton(SERVED))
    assert [d.field for d in drift] == ["dynamic_batching"]
    assert "not in config.pbtxt" in drift[0].describe()
    added = config(DISK + 'parameters [ { key: "k" value: { string_value: "v" } } ]\n')
    assert [d.field for d in served.drift(added, served.from_triton(SERVED))] == ["parameters"]


def test_versions_say_whether_triton_serves_them():
    latest1 = config()
    notes = served.version_notes(latest1, [1, 2], {"1": ("READY", "")})
    assert notes[1] == ("ok", "served")
    assert notes[2] == ("warning", "on disk, not served until reload")
    assert served.version_notes(latest1, [1, 2], {})[2][1] == "not served: the model is not loaded"
    two = config(DISK + "version_policy { latest { num_versions: 2 } }\n")
    assert served.policy_versions(two, [1, 2, 3]) == {2, 3}
    specific = config(DISK + "version_policy { specific { versions: [ 1 ] } }\n")
    notes = served.version_notes(specific, [1, 2], {"1": ("READY", "")})
    assert notes[2][1] == "not served: the version policy does not select it"
    failed = served.version_notes(latest1, [1], {"1": ("UNAVAILABLE", "boom\nmore")})
    assert failed[1] == ("error", "failed: boom")


def test_a_deliberate_unload_reads_unloaded_and_neutral_a_failure_stays_an_alarm():
    unloaded = [ModelState("m", "1", "UNAVAILABLE", "unloaded")]
    assert display("UNAVAILABLE", unloaded) == ("unloaded", "neutral")
    assert (
        state_json(unloaded)["label"] == "unloaded"
        and state_json(unloaded)["state"] == "UNAVAILABLE"
    )
    failed = [ModelState("m", "1", "UNAVAILABLE", "failed to load: boom")]
    assert display("UNAVAILABLE", failed) == ("UNAVAILABLE", "error")
    assert display("READY", [ModelState("m", "1", "READY", "")]) == ("READY", "ok")


@pytest.mark.django_db
def test_the_last_outcome_comes_back_from_the_audit_log():
    on = {"server": "default"}
    audit.record("ana", "load", model_name="m", **on, outcome="ok", detail="m loaded: READY")
    audit.record("bo", "reload", model_name="m", **on, outcome="failed", detail="boom")
    audit.record("cy", "load", model_name="other", **on, outcome="denied")
    # Another server's outcome is that server's, not this one's.
    audit.record("di", "unload", model_name="m", server="solo", outcome="ok", detail="gone")
    last = control.last_outcomes(servers.default(), ["m", "other"])
    assert last["m"]["action"] == "reload" and last["m"]["ok"] is False
    assert last["m"]["message"] == "boom" and last["m"]["by"] == "bo"
    assert "other" not in last  # a refusal is no outcome of an action


# --- pages over a private repository (Triton is not asked) ----------------------------------


@pytest.fixture()
def repo(tmp_path: Path, settings, monkeypatch) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(DEMO, root, ignore=shutil.ignore_patterns("__pycache__"))
    settings.MODEL_REPOSITORY = root
    settings.UPLOAD_STAGING_DIR = tmp_path / ".staging"
    settings.TRITON_URL = "127.0.0.1:1"  # nothing answers
    monkeypatch.setattr(publish, "_triton_states", lambda server, model: [])
    return root


def user_client(django_user_model, name: str, role: str) -> Client:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user(name)
    set_role(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_viewers_see_benchmark_and_search_disabled_with_the_reason(repo, django_user_model):
    html = user_client(django_user_model, "vi", VIEWER).get("/models/add_sub/").content.decode()
    assert 'id="benchmark-link" disabled' in html and 'id="find-best-config-link" disabled' in html
    assert "your role cannot run sweeps" in html
    operator = user_client(django_user_model, "op", OPERATOR).get("/models/add_sub/")
    assert 'href="/models/add_sub/benchmark/"' in operator.content.decode()


@pytest.mark.django_db
def test_models_with_validator_errors_carry_a_badge(repo, django_user_model):
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: -3"))
    viewer = user_client(django_user_model, "vi", VIEWER)
    listing = viewer.get("/models/").content.decode()
    assert "data-validator-badge" in listing and "1 config error" in listing
    page = viewer.get("/models/add_sub/").content.decode()
    assert 'id="validator-badge"' in page and 'data-config-errors="1"' in page
    assert 'id="validator-badge"' not in viewer.get("/models/add_batched/").content.decode()


@pytest.mark.django_db
def test_while_triton_is_down_states_are_unknown_with_since_when(repo, django_user_model):
    html = user_client(django_user_model, "vi", VIEWER).get("/models/").content.decode()
    assert ">unknown</span>" in html and "Triton unreachable since" in html
    assert "READY</span>" not in html and ">not loaded</span>" not in html
    detail = user_client(django_user_model, "vo", VIEWER).get("/models/add_sub/").content.decode()
    assert ">unknown</span>" in detail


@pytest.mark.django_db
def test_the_last_outcome_stays_on_the_pages_until_the_next_action(repo, django_user_model):
    audit.record(
        "ana",
        "reload",
        model_name="add_sub",
        server="default",
        outcome="failed",
        detail="deliberate boom",
    )
    viewer = user_client(django_user_model, "vi", VIEWER)
    assert "last reload by ana" in viewer.get("/models/").content.decode()
    assert "deliberate boom" in viewer.get("/models/add_sub/").content.decode()


@pytest.mark.django_db
def test_admins_delete_a_model_after_a_confirmation_listing_its_files(repo, django_user_model):
    operator = user_client(django_user_model, "op", OPERATOR)
    assert operator.post("/models/add_sub/delete").status_code == 302
    assert (repo / "add_sub").is_dir()
    assert AuditEvent.objects.filter(action="model.delete", outcome="denied").exists()
    admin = user_client(django_user_model, "ad", ADMIN)
    confirm = admin.get("/models/add_sub/delete").content.decode()
    assert (
        "config.pbtxt" in confirm and "1/model.py" in confirm and 'id="delete-confirm"' in confirm
    )
    assert admin.post("/models/add_sub/delete").status_code == 302
    assert not (repo / "add_sub").exists()
    assert not list((repo.parent / ".staging").glob(".trash-*"))
    done = AuditEvent.objects.get(action="model.delete", outcome="ok")
    assert "1/model.py" in done.detail and done.username == "ad"


@pytest.mark.django_db
def test_a_loaded_model_is_deleted_only_with_unload_and_delete(
    repo, django_user_model, monkeypatch
):
    monkeypatch.setattr(
        publish, "_triton_states", lambda server, model: [ModelState(model, "1", "READY", "")]
    )
    unloaded = []

    class FakeClient:
        def unload(self, name: str) -> None:
            unloaded.append(name)

    monkeypatch.setattr(publish, "get_client", lambda *_: FakeClient())
    admin = user_client(django_user_model, "ad", ADMIN)
    response = admin.delete("/api/v1/models/add_sub/")
    assert response.status_code == 409 and "unload it first" in response.json()["message"]
    assert (repo / "add_sub").is_dir() and unloaded == []
    response = admin.delete("/api/v1/models/add_sub/?unload=1")
    assert response.status_code == 200 and response.json()["unloaded"] is True
    assert unloaded == ["add_sub"] and not (repo / "add_sub").exists()


# --- against the real tritonserver --------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_model_page_shows_drift_and_versions_not_served_until_reload(triton, django_user_model):
    # A private copy: Triton remembers every version it served, and other tests count them.
    name = "drift_probe"
    folder = triton.repository / name
    shutil.copytree(
        triton.repository / "add_batched", folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = folder / "config.pbtxt"
    original = config.read_text().replace('"add_batched"', f'"{name}"')
    config.write_text(original)
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load(name)
    viewer = user_client(django_user_model, "vi", VIEWER)
    try:
        assert 'id="drift-card"' not in viewer.get(f"/models/{name}/").content.decode()
        config.write_text(original.replace("max_batch_size: 64", "max_batch_size: 32"))
        shutil.copytree(folder / "1", folder / "2")
        html = viewer.get(f"/models/{name}/").content.decode()
        assert 'id="drift-card"' in html
        assert "max_batch_size: 32 in config.pbtxt, 64 served" in html
        assert "on disk, not served until reload" in html
        assert html.index('data-version="2"') < html.index('data-version="1"')  # newest first
        client.load(name)
        html = viewer.get(f"/models/{name}/").content.decode()
        assert 'id="drift-card"' not in html and "on disk, not served" not in html
    finally:
        client.unload(name)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_api_answers_404_for_an_unknown_model(triton, django_user_model):
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("op-api")
    set_role(user, OPERATOR)
    token = Token.objects.create(user=user)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    for action in ("load", "unload", "reload"):
        response = api.post(f"/api/v1/models/no_such_model/{action}?wait=1")
        assert response.status_code == 404, (action, response.content)
        assert "no model 'no_such_model'" in response.json()["message"]
