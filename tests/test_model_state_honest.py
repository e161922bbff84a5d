"""What the model pages say is what Triton serves: drift from the file, served versions,
the last action's outcome, a neutral "unloaded", validator badges, unknown while Triton is
down, model delete, and the API's 404 for unknown models."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.test import Client
from tritonclient.grpc import model_config_pb2

from registry import servers
from repository_app import control, served
from repository_app.modelconfig import FolderFacts, parse_config
from repository_app.modelconfig.autocomplete import as_triton_completes
from repository_app.status import display, state_json
from repository_app.uploads import deleting, sharing
from team import audit
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, set_role
from triton_api.client import ModelState, TritonClient

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
KIND = model_config_pb2.ModelInstanceGroup
DISK = """name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
# What Triton 2.51 answers for DISK (its model-config API, as JSON): the same, plus the
# fields it fills itself.
SERVED = {
    "name": "m",
    "backend": "python",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 8,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": ["4"]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": ["4"]}],
    "instance_group": [{"name": "m_0", "count": 1, "kind": "KIND_CPU"}],
    "default_model_filename": "model.py",
    "dynamic_batching": {"max_queue_delay_microseconds": "100", "preferred_batch_size": [8]},
    "optimization": {
        "input_pinned_memory": {"enable": True},
        "output_pinned_memory": {"enable": True},
    },
}
# A model folder whose model.py does not complete its own config.
PYTHON_FOLDER = FolderFacts(Path("m"), version_files={"model.py"}, python_auto_complete=False)


def config(text: str = DISK):  # type: ignore[no-untyped-def]
    parsed = parse_config(text).config
    assert parsed is not None
    return parsed


def test_what_triton_fills_in_itself_is_not_drift():
    assert served.drift(config(), served.from_triton(SERVED), folder=PYTHON_FOLDER) == []


def test_a_changed_removed_or_added_field_is_drift():
    changed = config(DISK.replace("max_batch_size: 8", "max_batch_size: 4"))
    fields = {
        d.field: d for d in served.drift(changed, served.from_triton(SERVED), folder=PYTHON_FOLDER)
    }
    # Triton would also fill the preferred batch size from the new max_batch_size.
    assert set(fields) == {"max_batch_size", "dynamic_batching"}
    assert fields["max_batch_size"].describe() == "max_batch_size: 4 in config.pbtxt, 8 served"
    assert "in config.pbtxt with Triton's defaults" in fields["dynamic_batching"].describe()
    removed = config(DISK.replace("dynamic_batching { max_queue_delay_microseconds: 100 }\n", ""))
    drift = served.drift(removed, served.from_triton(SERVED), folder=PYTHON_FOLDER)
    assert [d.field for d in drift] == ["dynamic_batching"]
    assert "not in config.pbtxt" in drift[0].describe()
    added = config(DISK + 'parameters [ { key: "k" value: { string_value: "v" } } ]\n')
    assert [
        d.field for d in served.drift(added, served.from_triton(SERVED), folder=PYTHON_FOLDER)
    ] == ["parameters"]


def completed(text: str, **facts):  # type: ignore[no-untyped-def]
    return as_triton_completes(config(text), **facts)


def test_triton_fills_batching_scheduling_policy_and_pinned_memory():
    sparse = completed(
        'name: "m"\nmax_batch_size: 8\ndynamic_batching { }\n', folder=PYTHON_FOLDER, gpus=[]
    )
    c = sparse.config
    assert (c.backend, c.default_model_filename) == ("python", "model.py")
    assert list(c.dynamic_batching.preferred_batch_size) == [8]
    assert c.version_policy.latest.num_versions == 1
    assert c.optimization.input_pinned_memory.enable and c.optimization.output_pinned_memory.enable
    assert [(g.name, g.kind, g.count) for g in c.instance_group] == [("m", KIND.KIND_CPU, 1)]
    assert sparse.unknown == frozenset()
    unbatched = completed('name: "m"\nbackend: "python"\ndynamic_batching { }\n').config
    assert list(unbatched.dynamic_batching.preferred_batch_size) == []
    sequence = completed(
        'name: "m"\nbackend: "python"\nmax_batch_size: 4\n'
        "sequence_batching { oldest { max_candidate_sequences: 2 } }\n"
    ).config.sequence_batching
    assert sequence.max_sequence_idle_microseconds == 1_000_000
    assert list(sequence.oldest.preferred_batch_size) == [4]
    off = completed('name: "m"\noptimization { input_pinned_memory { enable: false } }\n')
    assert not off.config.optimization.input_pinned_memory.enable


def test_instance_groups_follow_the_servers_gpus_and_the_backend():
    groups = 'name: "m"\nbackend: "python"\ninstance_group [ { kind: KIND_AUTO }, { count: 2 } ]\n'
    on_gpus = completed(groups, gpus=[0, 1]).config.instance_group
    assert [(g.name, g.kind, list(g.gpus), g.count) for g in on_gpus] == [
        ("m_0", KIND.KIND_GPU, [0, 1], 1),
        ("m_1", KIND.KIND_GPU, [0, 1], 2),
    ]
    assert all(g.kind == KIND.KIND_CPU for g in completed(groups, gpus=[]).config.instance_group)
    missing = 'name: "m"\nbackend: "python"\ninstance_group [ { gpus: [ 3 ] } ]\n'
    assert completed(missing, gpus=[0]).config.instance_group[0].kind == KIND.KIND_CPU
    assert "instance_group" in completed(groups, gpus=None).unknown  # unknown GPUs
    assert "instance_group" not in completed(groups, gpus=[]).unknown
    onnx = completed('name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 1\n', gpus=[])
    assert [(g.kind, g.count) for g in onnx.config.instance_group] == [(KIND.KIND_CPU, 2)]
    openvino = completed('name: "m"\nbackend: "openvino"\n', gpus=[0]).config.instance_group
    assert [(g.kind, g.count) for g in openvino] == [(KIND.KIND_CPU, 1)]


def test_what_a_backend_or_an_ensembles_steps_decide_is_left_out():
    onnx = completed('name: "m"\nplatform: "onnxruntime_onnx"\n', gpus=[])
    assert onnx.unknown == {"input", "output", "max_batch_size", "dynamic_batching"}
    # Its batch size would fill the preferred sizes of the file's batching.
    oldest = 'name: "m"\nplatform: "onnxruntime_onnx"\nsequence_batching { oldest { } }\n'
    assert {"max_batch_size", "sequence_batching"} <= completed(oldest, gpus=[]).unknown
    assert completed(DISK, folder=PYTHON_FOLDER).unknown == frozenset()
    hooked = FolderFacts(Path("m"), version_files={"model.py"}, python_auto_complete=True)
    assert "model_transaction_policy" in completed('name: "m"\n', folder=hooked).unknown
    ensemble = 'name: "e"\nplatform: "ensemble"\nensemble_scheduling { step [ ] }\n'
    assert completed(ensemble).unknown == {"model_transaction_policy"}
    steps = completed(ensemble, steps_decoupled=True).config
    assert steps.model_transaction_policy.decoupled and not steps.instance_group
    assert not steps.HasField("optimization") and not steps.backend


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
    monkeypatch.setattr(sharing, "_triton_states", lambda server, model: [])
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
        sharing, "_triton_states", lambda server, model: [ModelState(model, "1", "READY", "")]
    )
    unloaded = []

    class FakeClient:
        def unload(self, name: str) -> None:
            unloaded.append(name)

        def control_mode(self) -> str:  # the unload holds the model's claim (control)
            return "explicit"

        def model_states(self, name: str) -> list[ModelState]:
            return [ModelState(name, "1", "READY", "")]

    monkeypatch.setattr(deleting, "get_client", lambda *_: FakeClient())
    monkeypatch.setattr(control, "get_client", lambda *_: FakeClient())
    admin = user_client(django_user_model, "ad", ADMIN)
    response = admin.delete("/api/v1/models/add_sub/")
    assert response.status_code == 409 and "unload it first" in response.json()["message"]
    assert (repo / "add_sub").is_dir() and unloaded == []
    response = admin.delete("/api/v1/models/add_sub/?unload=1")
    assert response.status_code == 200 and response.json()["unloaded"] is True
    assert unloaded == ["add_sub"] and not (repo / "add_sub").exists()


# --- against the real tritonserver --------------------------------------------------------


# Python models, each leaving Triton one of its fills (on top of the version policy, the
# instance groups, default file name and pinned memory every one of them leaves it).
ADD_SUB_IO = """input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
FILLS = {
    "batching_empty": "max_batch_size: 8\ndynamic_batching { }\n",
    "batching_unbatched": "dynamic_batching { }\n",
    "sequence_empty": "max_batch_size: 8\nsequence_batching { }\n",
    "sequence_oldest": "max_batch_size: 8\nsequence_batching { oldest { max_candidate_sequences: 4 } }\n",
    "groups_none": "max_batch_size: 8\n",
    "groups_partial": "instance_group [ { kind: KIND_CPU }, { count: 2 }, { kind: KIND_AUTO } ]\n",
    "pinned_off": "optimization { input_pinned_memory { enable: false } }\n",
}
PREFIX = "fills_"


def write_fill_models(repository: Path) -> list[str]:
    """Private copies of the demo models (an ensemble over the copies) and the FILLS models,
    named PREFIX + name; the names, the ensemble last (it needs its steps loaded)."""
    names = []
    demo = sorted(p.name for p in DEMO.iterdir() if (p / "config.pbtxt").is_file())
    for model in demo:
        target = repository / f"{PREFIX}{model}"
        shutil.copytree(DEMO / model, target, ignore=shutil.ignore_patterns("__pycache__"))
        text = (target / "config.pbtxt").read_text()
        for other in demo:  # its own name and an ensemble's steps
            text = text.replace(f'"{other}"', f'"{PREFIX}{other}"')
        (target / "config.pbtxt").write_text(text)
        names.append(target.name)
    for model, body in FILLS.items():
        target = repository / f"{PREFIX}{model}"
        (target / "1").mkdir(parents=True)
        shutil.copy(DEMO / "add_sub" / "1" / "model.py", target / "1" / "model.py")
        # Neither name nor backend: Triton takes them from the folder and model.py.
        (target / "config.pbtxt").write_text(ADD_SUB_IO + body)
        names.append(target.name)
    return sorted(names, key=lambda n: "ensemble" in n)


def drift_of(server, repository: Path, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    from repository_app.repository import read_config

    config, error = read_config(repository / name / "config.pbtxt")
    assert config is not None, error
    found = served.served_config(server, name, config, repository / name)
    assert found.config is not None, (name, found.error)
    return [d.describe() for d in found.drift]


@pytest.mark.integration
def test_what_a_real_triton_fills_is_no_drift_after_a_load_but_an_edit_is(triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    server = servers.default()
    names = write_fill_models(triton.repository)
    # Four loads at a time (a Python model's load mostly waits for its stub process to
    # start; one at a time these took ~45 s), the ensembles once their steps are in.
    ensembles = [name for name in names if "ensemble" in name]
    steps = [name for name in names if name not in ensembles]
    try:
        with ThreadPoolExecutor(4) as pool:
            for name, states in zip(steps, pool.map(client.load, steps), strict=True):
                assert any(s.state == "READY" for s in states), name
        for name in ensembles:
            assert any(s.state == "READY" for s in client.load(name)), name
        assert {name: drift_of(server, triton.repository, name) for name in names} == {
            name: [] for name in names
        }
        # An edit after the load is still drift, also where Triton fills the field.
        edits = {
            "batching_empty": ("dynamic_batching { }\n", ""),
            "groups_none": ("max_batch_size: 8\n", "max_batch_size: 8\ninstance_group [ { count: 2 } ]\n"),
            "ensemble_two_step": ("model_version: -1", "model_version: 1"),
        }  # fmt: skip
        for model, (old, new) in edits.items():
            path = triton.repository / f"{PREFIX}{model}" / "config.pbtxt"
            path.write_text(path.read_text().replace(old, new, 1))
        assert drift_of(server, triton.repository, f"{PREFIX}batching_empty") == [
            'dynamic_batching: served {"preferred_batch_size":[8]}, not in config.pbtxt'
        ]
        groups = drift_of(server, triton.repository, f"{PREFIX}groups_none")
        assert [d.split(":")[0] for d in groups] == ["instance_group"], groups
        steps = drift_of(server, triton.repository, f"{PREFIX}ensemble_two_step")
        assert [d.split(":")[0] for d in steps] == ["ensemble_scheduling"], steps
        # A reload serves the file: no drift left.
        client.load(f"{PREFIX}groups_none")
        assert drift_of(server, triton.repository, f"{PREFIX}groups_none") == []
    finally:
        for name in ensembles:
            client.unload(name)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(client.unload, steps))
        for name in names:
            shutil.rmtree(triton.repository / name, ignore_errors=True)


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
