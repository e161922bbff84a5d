"""In a real browser: the drift marker, served versions, the confirmation before unloading a
serving model, a neutral "unloaded", the outcome that survives a refresh, and deleting a
model (admins)."""

from __future__ import annotations

import shutil

import pytest

from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_drift_confirmations_outcome_and_delete(
    browser, web_server, celery_worker, triton, admin_credentials
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    # A private copy: Triton remembers every version it served, and other tests count them.
    folder = triton.repository / "drift_browser"
    shutil.copytree(
        triton.repository / "busy_compute", folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = folder / "config.pbtxt"
    original = config.read_text().replace('"busy_compute"', '"drift_browser"')
    config.write_text(original)
    spare = triton.repository / "spare_model"
    shutil.copytree(
        triton.repository / "add_sub", spare, ignore=shutil.ignore_patterns("__pycache__")
    )
    (spare / "config.pbtxt").write_text(
        (spare / "config.pbtxt").read_text().replace('"add_sub"', '"spare_model"')
    )
    client.load("drift_browser")
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        config.write_text(original.replace("max_batch_size: 32", "max_batch_size: 16"))
        shutil.copytree(folder / "1", folder / "2")
        page.goto(f"{web_server.url}/models/drift_browser/")
        page.wait_for_selector("#live-status.ok")
        assert page.is_visible("#drift-card"), page.content()
        assert "on disk, not served until reload" in page.text_content('[data-version="2"]')

        # Unloading a serving model asks first; dismissing leaves it serving.
        page.once("dialog", lambda dialog: dialog.dismiss())
        page.click("#control-card button[data-action=unload]")
        assert page.text_content("#model-state") == "READY"
        assert any(s.state == "READY" for s in client.model_states("drift_browser"))
        # Accepting unloads; the state reads a neutral "unloaded", not a red UNAVAILABLE.
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#control-card button[data-action=unload]")
        wait_js(page, "document.getElementById('model-state').textContent === 'unloaded'")
        assert "tone-neutral" in page.get_attribute("#model-state", "class")
        # The outcome arrives after it is recorded (the poller may show the state sooner).
        wait_js(
            page,
            "document.getElementById('action-message').textContent.includes('drift_browser unloaded')",
        )
        # The outcome stays after a refresh, until the next action.
        page.reload()
        page.wait_for_selector("#live-status.ok")
        assert "drift_browser unloaded" in page.text_content("#action-message")
        assert "unload by alice" in page.text_content("#action-message")

        # An admin deletes a model after a confirmation listing its files.
        page.goto(f"{web_server.url}/models/spare_model/")
        page.click("#delete-model-link")
        assert "1/model.py" in page.text_content("#delete-files")
        page.click("#delete-confirm")
        page.wait_for_url(f"{web_server.url}/models/")
        assert "model spare_model deleted" in page.content()
        assert not spare.exists()
        assert page.locator('tr[data-model="spare_model"]').count() == 0
    finally:
        context.close()
        client.unload("drift_browser")
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(spare, ignore_errors=True)


def test_the_drift_banner_leaves_live_once_a_reload_serves_the_file(
    browser, web_server, celery_worker, triton, admin_credentials
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    # busy_compute leaves Triton fills (preferred batch size, instance group name...).
    folder = triton.repository / "drift_live"
    shutil.copytree(
        triton.repository / "busy_compute", folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = folder / "config.pbtxt"
    original = config.read_text().replace('"busy_compute"', '"drift_live"')
    config.write_text(original)
    client.load("drift_live")
    page = browser.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/drift_live/")
        page.wait_for_selector("#live-status.ok")
        # What Triton filled in itself is no drift.
        assert page.locator("#drift-card").count() == 0, page.text_content("#drift-slot")
        assert "(the same as config.pbtxt)" in page.text_content("#served-config summary")

        config.write_text(original.replace("max_batch_size: 32", "max_batch_size: 16"))
        page.goto(f"{web_server.url}/models/drift_live/")
        page.wait_for_selector("#live-status.ok")
        assert "max_batch_size: 16 in config.pbtxt, 32 served" in page.text_content("#drift-card")
        page.evaluate("window.sameDocument = true")  # gone if the page navigates
        page.once("dialog", lambda dialog: dialog.accept())  # it is serving: reload asks
        page.click("#drift-reload")
        page.wait_for_selector("#drift-card", state="detached")
        wait_js(
            page,
            "document.getElementById('action-message').textContent.includes('reloaded: READY')",
        )
        assert page.evaluate("window.sameDocument === true")
        assert "(the same as config.pbtxt)" in page.text_content("#served-config summary")
        assert client.model_config("drift_live")["max_batch_size"] == 16
    finally:
        client.unload("drift_live")
        shutil.rmtree(folder, ignore_errors=True)
