"""In a real browser: click Load and see READY appear without reloading the page."""

import pytest

from repository_app.triton.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_clicking_load_shows_ready_live_on_the_model_and_list_pages(
    browser, web_server, celery_worker, admin_credentials, triton, failing_model
):
    # Start from "not serving", whatever earlier tests left loaded.
    TritonClient(triton.grpc_url, triton.metrics_url).unload("add_batched")
    context = browser.new_context()
    detail, listing = context.new_page(), context.new_page()
    try:
        login(detail, web_server.url, *admin_credentials)
        listing.goto(f"{web_server.url}/models/")
        listing.wait_for_selector("#live-status.ok")
        row_state = listing.locator('tr[data-model="add_batched"] [data-state-cell]')
        # Not serving: never loaded, or unloaded by an earlier test.
        assert row_state.text_content() in ("not loaded", "unloaded")

        detail.goto(f"{web_server.url}/models/add_batched/")
        detail.wait_for_selector("#live-status.ok")
        detail.evaluate("window.__marker = 'same page'")
        assert detail.text_content("#model-state") in ("not loaded", "unloaded")
        detail.click("button[data-action=load]")
        wait_js(detail, "document.getElementById('model-state').textContent === 'READY'")
        assert "add_batched loaded: READY" in detail.text_content("#action-message")
        assert detail.evaluate("window.__marker") == "same page"  # no reload happened
        # The other open page updated too.
        wait_js(
            listing,
            "document.querySelector('tr[data-model=\"add_batched\"] [data-state-cell]').textContent === 'READY'",
        )

        # A failing load shows Triton's reason.
        detail.goto(f"{web_server.url}/models/fails_initialize/")
        detail.wait_for_selector("#live-status.ok")
        detail.click("button[data-action=load]")
        wait_js(
            detail,
            "document.getElementById('action-message').textContent.includes('deliberate failure')",
        )
        assert detail.text_content("#model-state") == "UNAVAILABLE"
        # The server page draws live metrics charts (Plotly served by the project).
        detail.goto(f"{web_server.url}/server/")
        assert detail.text_content("#server-version") == "2.51.0"
        assert "no GPU metrics" in detail.text_content("#gpu-note")
        wait_js(detail, "document.getElementById('chart-pending').data.length > 0")
        names = detail.evaluate("document.getElementById('chart-pending').data.map(t => t.name)")
        assert "add_batched" in names
    finally:
        context.close()
        TritonClient(triton.grpc_url, triton.metrics_url).unload("add_batched")
