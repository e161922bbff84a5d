"""Pages a new user noticed: styled 403 and 404 pages with the reason, the favicon, and one
unit system (binary) on the upload page."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.templatetags.static import static
from django.test import Client, RequestFactory
from django.views.defaults import permission_denied

from profiler_app.models import Search, Sweep
from team.roles import OPERATOR, VIEWER, set_role

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


def _client(name: str, role: str) -> Client:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345")
    set_role(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def demo_repo(tmp_path, settings) -> Path:
    root = tmp_path / "model_repository"
    shutil.copytree(
        DEMO / "add_sub", root / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    settings.MODEL_REPOSITORY = root
    return root


def _is_styled_error(html: str, status: int) -> bool:
    return f'data-status="{status}"' in html and 'class="topbar"' in html and "<html" in html


def test_a_viewer_posting_a_sweep_or_a_search_gets_the_styled_403_with_the_reason(demo_repo):
    viewer = _client("vera", VIEWER)
    for url, reason in (
        ("/models/add_sub/benchmark/", "Your role cannot run sweeps."),
        ("/models/add_sub/find-best-config/", "Your role cannot run config searches."),
    ):
        response = viewer.post(url, {"mode": "concurrency"})
        assert response.status_code == 403, url
        html = response.content.decode()
        assert _is_styled_error(html, 403), url
        assert f'<p class="banner error" id="error-reason">{reason}</p>' in html, url
        assert "You are signed in as <strong>vera</strong>" in html
    assert not Sweep.objects.exists() and not Search.objects.exists()


def test_a_refusal_without_a_reason_still_gets_the_styled_page():
    request = RequestFactory().get("/somewhere/")
    request.user = get_user_model().objects.create_user("otto")
    response = permission_denied(request, PermissionDenied())
    html = response.content.decode()
    assert response.status_code == 403 and _is_styled_error(html, 403)
    assert "Your role does not allow this." in html


def test_unknown_pages_and_models_get_the_styled_404(demo_repo, settings):
    settings.DEBUG = False  # the debug 404 page is Django's own
    operator = _client("olga", OPERATOR)
    page = operator.get("/no/such/page/")
    assert page.status_code == 404
    html = page.content.decode()
    assert _is_styled_error(html, 404) and "There is no page at <code>/no/such/page/</code>" in html
    model = operator.get("/models/nothere/")
    assert model.status_code == 404
    html = model.content.decode()
    assert _is_styled_error(html, 404)
    assert "No model folder &#x27;nothere&#x27; in the model repository" in html
    anonymous = Client().get("/no/such/page/")
    assert anonymous.status_code == 404 and _is_styled_error(anonymous.content.decode(), 404)


def test_the_favicon_is_linked_from_every_page_and_served_at_favicon_ico():
    icon_url = static("img/favicon.svg")  # /static/img/favicon[.<hash>].svg
    viewer = _client("vera", VIEWER)
    html = viewer.get("/").content.decode()
    assert f'<link rel="icon" href="{icon_url}" type="image/svg+xml">' in html
    login_page = Client().get("/accounts/login/").content.decode()
    assert f'<link rel="icon" href="{icon_url}"' in login_page
    response = Client().get("/favicon.ico")
    assert response.status_code == 302 and response["Location"] == icon_url
    icon = Client().get(response["Location"])
    assert icon.status_code == 200
    assert icon["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(icon.streaming_content)


def test_the_upload_page_uses_binary_units_like_the_upload_rows(settings):
    settings.UPLOAD_MAX_FILE_BYTES = 64 * 2**30
    settings.UPLOAD_MAX_TOTAL_BYTES = 128 * 2**30
    settings.UPLOAD_CHUNK_BYTES = 4 * 2**20
    operator = _client("olga", OPERATOR)
    html = operator.get("/uploads/new-model/").content.decode()
    assert "Limits: 64 GiB per file, 128 GiB per upload." in html
    assert "Sent in chunks of 4 MiB;" in html
    assert " GB" not in html and " MB" not in html
    assert "resnet.onnx</code> is stored as" in html  # any name for a new model, said up front


def test_binary_sizes_read_like_the_upload_rows():
    from repository_app.uploads.views import binary_size

    samples = [(512, "512 B"), (1536, "1.5 KiB"), (4 * 2**20, "4 MiB"), (int(1.25 * 2**30), "1.2 GiB"),
               (64 * 2**30, "64 GiB"), (3 * 2**40, "3 TiB")]  # fmt: skip
    for count, text in samples:
        assert binary_size(count) == text, count
