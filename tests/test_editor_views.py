"""The editor pages over a temporary repository; the Triton actions against the real server."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from repository_app import disk
from repository_app.editor import form_building, saving
from repository_app.modelconfig import parse_config
from repository_app.models import ConfigRevision
from triton_api.client import TritonClient

from .conftest import on_repository

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
NAME = "add_batched"
URL = f"/models/{NAME}/config/"
API = f"/api/v1/models/{NAME}/config"


@pytest.fixture()
def repo(tmp_path: Path, settings) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(DEMO, root)
    settings.MODEL_REPOSITORY = root
    return root


@pytest.fixture()
def operator(django_user_model) -> Client:
    user = django_user_model.objects.create_user("olivia", password="pw-olivia-1")
    user.user_permissions.add(Permission.objects.get(codename="control_models"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def viewer(django_user_model) -> Client:
    user = django_user_model.objects.create_user("victor", password="pw-victor-1")
    client = Client()
    client.force_login(user)
    return client


def config_path(root: Path, name: str = NAME) -> Path:
    return root / name / "config.pbtxt"


def sha(root: Path, name: str = NAME) -> str:
    return saving.read_current(name, on_repository(root)).sha256


def form_post(root: Path, name: str = NAME, **changes: str) -> dict[str, str]:
    text = config_path(root, name).read_text()
    parsed = parse_config(text)
    assert parsed.config is not None
    data = form_building.post_data(form_building.build_forms(parsed.config, name))
    data.update(mode="form", base_sha=sha(root, name), base_text=text)
    data.update(changes)
    return data


def text_post(root: Path, text: str, action: str = "save", **extra: str) -> dict[str, str]:
    return {"mode": "text", "action": action, "text": text, "base_sha": sha(root), **extra}


def non_disk_revisions() -> int:
    return ConfigRevision.objects.exclude(source="disk").count()


# --- pages and saves (no Triton needed) ---------------------------------------------------


@pytest.mark.django_db
def test_the_editor_opens_in_form_mode_with_the_files_values_and_only_reads(repo, operator):
    response = operator.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="cfg-max_batch_size" value="64"' in html
    assert 'name="cfg-preferred_batch_size" value="8, 16"' in html
    assert 'name="input-0-name" value="INPUT0"' in html
    assert "Dynamic batching allows inference requests to be combined" in html
    assert "How they combine with dynamic batching" in html
    assert f'name="base_sha" value="{sha(repo)}"' in html
    assert not ConfigRevision.objects.exists()  # a page only reads: the watchdog records it


@pytest.mark.django_db
def test_text_mode_shows_the_exact_file_and_the_code_editor_from_static_files(repo, operator):
    html = operator.get(URL, {"mode": "text"}).content.decode()
    assert "# Adds 1 to a FP32 vector" in html
    from django.templatetags.static import static

    assert static("vendor/codemirror/codemirror.js") in html  # hashed name after collectstatic
    assert "cdn" not in html.lower()


@pytest.mark.django_db
def test_a_text_save_writes_exactly_the_typed_text_with_comments(repo, operator):
    text = config_path(repo).read_text().replace("64", "32") + "# tuned by olivia\n"
    response = operator.post(URL, text_post(repo, text, message="smaller"))
    assert response.status_code == 302
    assert config_path(repo).read_bytes() == text.encode()
    revision = ConfigRevision.objects.order_by("-id").first()
    assert revision is not None
    assert (revision.source, revision.message, revision.author.username) == (
        "text",
        "smaller",
        "olivia",
    )
    page = operator.get(response["Location"]).content.decode()
    assert f"Saved config.pbtxt as revision #{revision.number}." in page


@pytest.mark.django_db
def test_a_form_save_with_comments_changes_only_that_line_without_asking(repo, operator):
    # Was: a confirmation, then canonical text without the comments (issue #16).
    before = config_path(repo).read_text()
    data = form_post(repo, action="save", **{"cfg-max_batch_size": "32"})
    response = operator.post(URL, data)
    assert response.status_code == 302
    saved = parse_config(config_path(repo).read_bytes()).config
    assert saved is not None and saved.max_batch_size == 32
    assert list(saved.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config_path(repo).read_text() == before.replace(
        "max_batch_size: 64", "max_batch_size: 32"
    )
    assert ConfigRevision.objects.order_by("-id").first().source == "form"


@pytest.mark.django_db
def test_form_errors_block_the_save_and_show_inline(repo, operator):
    before = config_path(repo).read_bytes()
    data = form_post(repo, action="save", **{"cfg-max_batch_size": "4", "cfg-drop_comments": "on"})
    response = operator.post(URL, data)
    assert response.status_code == 422
    html = response.content.decode()
    field = html.split('data-field="cfg-preferred_batch_size"')[1].split("</div>\n</div>")[0]
    assert "preferred_batch_size 16 exceeds max_batch_size 4" in field
    assert config_path(repo).read_bytes() == before
    assert non_disk_revisions() == 0


@pytest.mark.django_db
def test_switching_between_form_and_text_keeps_the_content(repo, operator):
    data = form_post(repo, action="to_text", **{"cfg-max_batch_size": "32"})
    html = operator.post(URL, data).content.decode()
    assert 'id="config-text"' in html and "max_batch_size: 32" in html
    text = config_path(repo).read_text().replace("500", "750")
    html = operator.post(URL, text_post(repo, text, action="to_form")).content.decode()
    assert 'name="cfg-max_queue_delay_microseconds" value="750"' in html
    assert "# Adds 1 to a FP32 vector" in html  # the base text travels with the form
    # Unchanged form back to text keeps the comments.
    unchanged = form_post(repo, action="to_text")
    assert "# Adds 1" in operator.post(URL, unchanged).content.decode()


@pytest.mark.django_db
def test_a_stale_save_is_409_with_a_diff_and_can_overwrite_explicitly(repo, operator):
    opened = sha(repo)
    theirs = config_path(repo).read_text().replace("500", "900")
    config_path(repo).write_text(theirs)
    mine = theirs.replace("900", "500").replace("64", "32")
    response = operator.post(URL, text_post(repo, mine, base_sha=opened))
    assert response.status_code == 409
    html = response.content.decode()
    assert "Nothing was saved." in html
    assert 'class="d-replace"' in html and "max_batch_size: 32" in html
    assert config_path(repo).read_text() == theirs
    assert non_disk_revisions() == 0
    theirs_sha = sha(repo)
    assert f'name="base_sha" value="{theirs_sha}"' in html
    response = operator.post(URL, text_post(repo, mine, base_sha=theirs_sha))
    assert response.status_code == 302
    assert config_path(repo).read_text() == mine
    sources = list(ConfigRevision.objects.order_by("id").values_list("source", flat=True))
    assert sources == ["disk", "text"]  # their change was the first version seen here


@pytest.mark.django_db
def test_history_diff_and_restore(repo, operator):
    from profiler_app.watchdog import record_outside_edits

    original = config_path(repo).read_text()
    operator.get(URL)
    operator.post(URL, text_post(repo, original.replace("64", "32"), message="first"))
    config_path(repo).write_text(original.replace("64", "48"))  # an edit on disk
    html = operator.get(f"{URL}history/").content.decode()
    # The page shows the edit, diffable, but records nothing: the save recorded the file
    # as first seen, and the edit waits for the watchdog.
    assert [r.source for r in ConfigRevision.objects.order_by("id")] == ["disk", "text"]
    assert html.count("<tr data-revision=") == 3 and '<tr data-revision="disk"' in html
    assert "changed on disk outside the dashboard" in html
    first = ConfigRevision.objects.order_by("id").first()
    diff = operator.get(f"{URL}diff/", {"a": first.pk, "b": "disk"})
    assert diff.status_code == 200
    assert "max_batch_size: 64" in diff.content.decode()
    assert "max_batch_size: 48" in diff.content.decode()
    assert "the file on disk (not in the history yet)" in diff.content.decode()
    assert operator.get(f"{URL}diff/", {"a": "nope", "b": "disk"}).status_code == 404
    assert record_outside_edits() >= 1 and record_outside_edits() == 0  # and the others
    revisions = list(ConfigRevision.objects.filter(model=NAME).order_by("id"))
    assert [r.source for r in revisions] == ["disk", "text", "disk"]
    html = operator.get(f"{URL}history/").content.decode()
    assert html.count("<tr data-revision=") == 3 and '<tr data-revision="disk"' not in html
    response = operator.post(f"{URL}revisions/{revisions[0].pk}/restore", {"base_sha": sha(repo)})
    assert response.status_code == 302
    assert config_path(repo).read_text() == original
    latest = ConfigRevision.objects.order_by("-id").first()
    assert (
        latest.source == "restore" and latest.message == f"restored revision #{revisions[0].number}"
    )
    stale = operator.post(f"{URL}revisions/{revisions[1].pk}/restore", {"base_sha": "0" * 64})
    assert stale.status_code == 302 and config_path(repo).read_text() == original


@pytest.mark.django_db
def test_a_viewer_can_look_but_not_save_try_or_restore(repo, viewer):
    before = config_path(repo).read_bytes()
    html = viewer.get(URL).content.decode()
    assert 'id="save-button" disabled' in html
    text = before.decode().replace("64", "32")
    for action in ("save", "save_reload", "try"):
        response = viewer.post(URL, text_post(repo, text, action=action))
        assert response.status_code == 403, action
        assert "your role cannot change model configs" in response.content.decode()
    from profiler_app.watchdog import record_outside_edits

    record_outside_edits()  # the file as first seen, so there is a revision to restore
    revision = ConfigRevision.objects.get(model=NAME)
    assert viewer.post(f"{URL}revisions/{revision.pk}/restore", {}).status_code == 403
    response = viewer.put(API, text, content_type="text/plain", HTTP_IF_MATCH=sha(repo))
    assert response.status_code == 403
    assert config_path(repo).read_bytes() == before
    assert non_disk_revisions() == 0
    # Validation does not write, so viewers may use it.
    assert viewer.post(f"{URL}validate", text, content_type="text/plain").status_code == 200


@pytest.mark.django_db
def test_the_validate_endpoint_returns_findings_with_positions(repo, viewer):
    text = config_path(repo).read_text().replace("max_batch_size: 64", "max_batch_size: 4")
    body = viewer.post(f"{URL}validate", text, content_type="text/plain").json()
    errors = [f for f in body["findings"] if f["severity"] == "error"]
    assert {f["rule"] for f in errors} == {"dynamic-batching.preferred-above-max"}
    assert errors[0]["line"] == 8 and errors[0]["col"]
    assert body["ok"] is False and body["errors"] == 2


BAD_INPUTS = {
    "empty": ("", "the config is empty"),
    "whitespace": ("  \n\n", "the config is empty"),
    "binary garbage": ("\x00\x01\x02ELF\x00", "contains NUL bytes"),
    "deep nesting": ("optimization " + "{ x " * 200 + "}" * 200, "nest more than"),
    "unknown enum": (
        'name: "add_batched" backend: "python" instance_group [ { kind: KIND_TPU } ]',
        "unknown value KIND_TPU",
    ),
    "unknown field": ('name: "add_batched" max_batchsize: 4', "did you mean 'max_batch_size'"),
    "2 MB paste": ("#" * (2 * 1024 * 1024), "over the 1 MiB limit"),
    "wrong name": ('name: "other" backend: "python"', "add_batched"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_text_gets_a_clear_finding_and_nothing_is_written(repo, operator, case):
    text, expected = BAD_INPUTS[case]
    before = config_path(repo).read_bytes()
    response = operator.post(URL, text_post(repo, text))
    assert response.status_code == 422, case
    assert expected in response.content.decode()
    assert config_path(repo).read_bytes() == before
    assert non_disk_revisions() == 0
    body = operator.post(f"{URL}validate", text, content_type="text/plain").json()
    assert any(expected in f["message"] for f in body["findings"] if f["severity"] == "error")


@pytest.mark.django_db
def test_a_10_mb_paste_is_refused_with_a_clear_message(repo, operator):
    before = config_path(repo).read_bytes()
    huge = "x" * (10 * 1024 * 1024)
    response = operator.post(URL, text_post(repo, huge))
    assert response.status_code == 413
    assert "over the 1 MiB limit" in response.content.decode()
    # Under the 10 MiB a form may carry but over a config's 1 MiB: the editor's own message.
    response = operator.post(URL, text_post(repo, "x" * (2 * 1024 * 1024)))
    assert response.status_code == 422
    assert "over the 1 MiB limit" in response.content.decode()
    over_limit = "x" * (11 * 1024 * 1024)  # over the 10 MiB any form or script body may have
    response = operator.post(f"{URL}validate", over_limit, content_type="text/plain")
    assert response.status_code == 413
    assert "over this server's limit" in response.json()["message"]
    response = operator.post(f"{URL}validate", "x" * (2 * 1024 * 1024), content_type="text/plain")
    assert response.json()["ok"] is False
    assert "over the 1 MiB limit" in response.json()["findings"][0]["message"]
    assert config_path(repo).read_bytes() == before


@pytest.mark.django_db
def test_non_utf8_bytes_are_refused_by_the_api_and_the_validator(repo, operator):
    before = config_path(repo).read_bytes()
    body = b'name: "add_batched"\nbackend: "py\xffthon"\n'
    response = operator.put(
        API, body, content_type="application/octet-stream", HTTP_IF_MATCH=sha(repo)
    )
    assert response.status_code == 422
    finding = next(f for f in response.json()["findings"] if f["rule"] == "parse.encoding")
    assert finding["line"] == 2 and finding["col"] == 13
    assert "not valid UTF-8 (byte 0xff)" in finding["message"]
    validated = operator.post(f"{URL}validate", body, content_type="text/plain").json()
    assert "parse.encoding" in [f["rule"] for f in validated["findings"]]
    assert config_path(repo).read_bytes() == before
    assert non_disk_revisions() == 0


@pytest.mark.django_db
def test_the_api_saves_the_body_exactly_with_if_match_and_refuses_stale_shas(repo, operator):
    current = operator.get(API).json()
    assert current["sha256"] == sha(repo)
    text = current["text"].replace("64", "32")
    assert operator.put(API, text, content_type="text/plain").status_code == 428
    response = operator.put(API, text, content_type="text/plain", HTTP_IF_MATCH=current["sha256"])
    assert response.status_code == 200 and response.json()["changed"] is True
    assert config_path(repo).read_text() == text
    assert ConfigRevision.objects.order_by("-id").first().source == "api"
    stale = operator.put(
        API, text + "\n", content_type="text/plain", HTTP_IF_MATCH=current["sha256"]
    )
    assert stale.status_code == 412 and stale.json()["current_sha256"] == sha(repo)


@pytest.mark.django_db
def test_a_full_disk_during_a_save_says_so_and_keeps_the_old_file(repo, operator, monkeypatch):
    before = config_path(repo).read_bytes()
    operator.get(URL)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk.os, "fsync", disk_full)
    response = operator.post(URL, text_post(repo, before.decode().replace("64", "32")))
    monkeypatch.undo()
    assert response.status_code == 507
    assert "the disk is full" in response.content.decode()
    assert config_path(repo).read_bytes() == before
    assert non_disk_revisions() == 0


@pytest.mark.django_db
def test_unknown_models_are_404_in_the_editor(repo, operator):
    assert operator.get("/models/nope/config/").status_code == 404
    assert (
        operator.post("/models/nope/config/validate", "x", content_type="text/plain").status_code
        == 404
    )


@pytest.mark.django_db
def test_the_model_page_links_to_the_editor(repo, operator, settings):
    settings.TRITON_URL = "127.0.0.1:1"  # unreachable: the page still renders from disk
    html = operator.get(f"/models/{NAME}/").content.decode()
    assert f'href="/models/{NAME}/config/"' in html and "Edit config" in html


# --- with the real Triton ------------------------------------------------------------------


@pytest.fixture()
def live_repo(triton):
    """The Triton fixture's repository; configs touched by a test are put back after it."""
    saved = {
        name: config_path(triton.repository, name).read_bytes()
        for name in ("add_batched", "busy_compute")
    }
    yield triton.repository
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    for name, data in saved.items():
        config_path(triton.repository, name).write_bytes(data)
        client.unload(name)


def _ready(client: TritonClient, name: str) -> bool:
    return any(s.state == "READY" for s in client.model_states(name))


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_save_and_reload_serves_the_new_config(live_repo, operator, triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load(NAME)
    text = config_path(live_repo).read_text().replace("max_batch_size: 64", "max_batch_size: 32")
    response = operator.post(URL, text_post(live_repo, text, action="save_reload"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert _ready(client, NAME)
    assert int(client.model_config(NAME)["max_batch_size"]) == 32
    page = operator.get(response["Location"]).content.decode()
    assert "add_batched reloaded: READY" in page


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_failing_reload_keeps_the_file_and_the_previous_config_serving(
    live_repo, operator, triton
):
    name = "busy_compute"
    url = f"/models/{name}/config/"
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load(name)
    data = form_post(live_repo, name, action="save_reload", **{"cfg-drop_comments": "on"})
    row = next(
        k for k, v in data.items() if k.startswith("parameters-") and v == "compute_ms_per_batch"
    )
    data[row.replace("-key", "-value")] = "not-a-number"
    response = operator.post(url, data)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="outcome-saved"' in html and "The file on disk has the new config." in html
    assert "Triton refused the new config" in html
    assert "Triton keeps serving the previous config" in html
    assert "not-a-number" in config_path(live_repo, name).read_text()
    assert _ready(client, name)
    served = client.model_config(name)["parameters"]["compute_ms_per_batch"]["string_value"]
    assert served == "1.0"
    # One click reverts the file to the previous revision.
    previous = ConfigRevision.objects.filter(model=name).order_by("id").first()
    assert f"Revert the file to revision #{previous.number}" in html
    response = operator.post(
        f"{url}revisions/{previous.pk}/restore",
        {"base_sha": sha(live_repo, name), "next": "editor"},
    )
    assert response.status_code == 302 and response["Location"] == url
    assert config_path(live_repo, name).read_text() == previous.text


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("loaded_before", [False, True])
def test_trying_on_triton_leaves_the_file_and_restores_the_previous_state(
    live_repo, operator, triton, loaded_before
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    if loaded_before:
        client.load(NAME)
    else:
        client.unload(NAME)
    before = config_path(live_repo).read_bytes()
    text = before.decode().replace("max_batch_size: 64", "max_batch_size: 16")
    response = operator.post(URL, text_post(live_repo, text, action="try"))
    assert response.status_code == 200
    html = response.content.decode()
    assert f"Triton loaded {NAME} with this config: READY" in html
    assert "config.pbtxt on disk was not changed" in html
    assert "max_batch_size: 16" in html  # the user's text stays in the editor
    assert config_path(live_repo).read_bytes() == before
    assert non_disk_revisions() == 0
    assert _ready(client, NAME) is loaded_before
    if loaded_before:
        assert int(client.model_config(NAME)["max_batch_size"]) == 64


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_trial_triton_refuses_shows_its_text_next_to_the_validators_findings(
    live_repo, operator, triton
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.unload(NAME)
    text = config_path(live_repo).read_text().replace("max_batch_size: 64", "max_batch_size: 4")
    response = operator.post(URL, text_post(live_repo, text, action="try"))
    html = response.content.decode()
    assert "Triton refused this config" in html
    assert "preferred_batch_size 16 exceeds max_batch_size 4" in html
    assert not _ready(client, NAME)
