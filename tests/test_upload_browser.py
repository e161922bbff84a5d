"""In a real browser: an admin uploads model.py as version 2 of add_sub with the progress bar,
sees it listed, and loads it on the real Triton (version 2 READY: the policy is latest 1)."""

from __future__ import annotations

import shutil

import pytest

from triton_api.client import TritonClient

from .conftest import login, wait_js
from .test_upload_protocol import MODEL_PY

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_an_admin_uploads_a_python_version_with_progress_and_triton_serves_it(
    browser, web_server, celery_worker, admin_credentials, triton, tmp_path
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.unload("add_sub")  # its page offers Load (not Reload) then
    version_dir = triton.repository / "add_sub" / "2"
    assert not version_dir.exists()
    source = tmp_path / "model.py"
    source.write_bytes(MODEL_PY)
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_sub/")
        page.click("#upload-version-link")
        page.wait_for_selector("#upload-form")
        assert "next free number (2)" in page.text_content("#upload-form")
        page.set_input_files("#upload-file", str(source))
        page.click("#upload-start")
        wait_js(page, "document.querySelector('.upload-done') !== null")
        assert page.text_content(".upload-done") == "version 2 published"
        assert page.evaluate("document.querySelector('#upload-rows progress').value") == len(
            MODEL_PY
        )
        assert page.text_content("[data-k=percent]") == "100.0 %"
        import hashlib

        assert page.text_content(".upload-sha256") == hashlib.sha256(MODEL_PY).hexdigest()
        assert (version_dir / "model.py").read_bytes() == MODEL_PY
        assert page.evaluate("Object.keys(localStorage).length") == 0  # nothing left to resume
        # The version choice follows: the next free number is now 3.
        assert "next free number (3)" in page.text_content("#upload-form")
        assert page.get_attribute("#upload-version", "placeholder") == "3"
        assert page.text_content("#versions-on-disk") == "1, 2"

        page.goto(f"{web_server.url}/models/add_sub/")
        assert page.locator("h3[data-version='2']").count() == 1
        page.wait_for_selector("#live-status.ok")
        page.click("button[data-action=load]")
        wait_js(
            page,
            "document.getElementById('model-versions').textContent.includes('v2 READY')",
        )
        states = {s.version: s.state for s in client.model_states("add_sub")}
        assert states.get("2") == "READY"
    finally:
        context.close()
        client.unload("add_sub")
        shutil.rmtree(version_dir, ignore_errors=True)
        if was_ready:
            client.load("add_sub")
