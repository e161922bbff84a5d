"""A check in a real browser, end to end on the deterministic demo model scale_shift
(OUTPUT = INPUT * SCALE + SHIFT, both from its config): tried and kept as a check, passing;
its config broken (SCALE changed, saved and reloaded) so that its answer changes: the check
fails on the model page and in the CLI, offering the revision to restore; restored and
reloaded, it passes again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]
MODEL = "scale_shift"
VERDICT = '#checks tr[data-check="four values"] [data-k=verdict]'


def _verdict_is(page, word: str) -> None:
    wait_js(page, f"document.querySelector('{VERDICT}')?.textContent === '{word}'")


def test_a_check_fails_when_the_config_changes_the_answer_and_passes_once_restored(
    browser, web_server, celery_worker, admin_credentials, triton, django_user_model
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states(MODEL))
    client.load(MODEL)
    config = triton.repository / MODEL / "config.pbtxt"
    original = config.read_text()
    page = browser.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/{MODEL}/try/")
        page.fill('tr[data-input="INPUT"] textarea', "1 2 3 4")
        page.click("#try-send")
        wait_js(page, "document.getElementById('try-status').textContent === 'answered'")
        shown = page.locator('#try-outputs tr[data-output="OUTPUT"] td').nth(3).text_content()
        assert np.allclose(json.loads(shown or "[]"), np.array([1, 2, 3, 4]) * 2 + 0.5)
        page.fill("#try-check-name", "four values")
        page.click("#try-keep-button")
        wait_js(page, "document.getElementById('try-keep-status').textContent.startsWith('kept')")
        page.click("#checks-card [data-k=run-checks]")
        _verdict_is(page, "passed")

        # Break it: SCALE 2 -> 3, saved through the API and reloaded.
        admin = django_user_model.objects.get(username=admin_credentials[0])
        api = Client()
        api.force_login(admin)
        current = api.get(f"/api/v1/models/{MODEL}/config").json()
        saved = api.put(
            f"/api/v1/models/{MODEL}/config",
            json.dumps({"text": current["text"].replace('string_value: "2"', 'string_value: "3"')}),
            content_type="application/json", HTTP_IF_MATCH=f'"{current["sha256"]}"',
        )  # fmt: skip
        assert saved.status_code == 200, saved.content
        assert api.post(f"/api/v1/models/{MODEL}/reload?wait=1").status_code == 200
        page.goto(f"{web_server.url}/models/{MODEL}/")
        _verdict_is(page, "failed")
        row = page.text_content('#checks tr[data-check="four values"]') or ""
        assert "OUTPUT: 4 of 4 values differ" in row and "after reload" in row
        with pytest.raises(CommandError, match="1 check failed"):
            call_command("triton", "check", MODEL, "--as-user", admin_credentials[0])

        # The offered revision, restored from the config history, then reloaded: passing.
        page.click('#checks tr[data-check="four values"] [data-k=restore]')
        offered = page.url.split("#revision-")[1]
        with page.expect_navigation():
            page.click(f"#revision-{offered} button.restore")
        assert 'string_value: "2"' in config.read_text()
        page.goto(f"{web_server.url}/models/{MODEL}/")
        page.wait_for_selector("#live-status.ok")
        page.click("#control-card button[data-action=reload]")
        _verdict_is(page, "passed")
    finally:
        page.close()
        config.write_text(original)
        if not was_ready:
            client.unload(MODEL)
