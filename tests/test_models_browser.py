"""In a real browser: click Load and see READY appear without reloading the page."""

import pytest

from triton_api.client import TritonClient

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
        # Load while it is not loaded; Unload and Reload once it is (live, as the state).
        shown = "[...document.querySelectorAll('#control-card button[data-action]')]"
        shown += ".filter(b => !b.hidden).map(b => b.dataset.action)"
        assert detail.evaluate(shown) == ["load"]
        detail.click("button[data-action=load]")
        wait_js(detail, "document.getElementById('model-state').textContent === 'READY'")
        # The state and the action's outcome arrive as two events, in either order.
        wait_js(detail, "document.getElementById('action-message').textContent.includes('loaded')")
        assert "add_batched loaded: READY" in detail.text_content("#action-message")
        assert detail.evaluate("window.__marker") == "same page"  # no reload happened
        assert detail.evaluate(shown) == ["unload", "reload"]
        assert detail.is_visible("#control-card button[data-action=unload]")
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


def test_unloading_a_step_names_the_ensembles_it_takes_down_and_their_row_says_why(
    browser, web_server, celery_worker, admin_credentials, triton
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("ensemble_two_step")  # and its steps, add_sub and add_batched
    context = browser.new_context()
    detail, listing = context.new_page(), context.new_page()
    ensemble = 'tr[data-model="ensemble_two_step"]'
    why = "unloaded with add_sub, a step it needs"
    try:
        login(detail, web_server.url, *admin_credentials)
        listing.goto(f"{web_server.url}/models/")
        listing.wait_for_selector("#live-status.ok")
        detail.goto(f"{web_server.url}/models/add_sub/")
        detail.wait_for_selector("#live-status.ok")
        asked: list[str] = []

        def accept(dialog) -> None:  # type: ignore[no-untyped-def]
            asked.append(dialog.message)
            dialog.accept()

        detail.once("dialog", accept)
        detail.click("#control-card button[data-action=unload]")
        wait_js(
            detail,
            "document.getElementById('action-message').textContent.includes('add_sub unloaded')",
        )
        assert "Triton also unloads the ensemble using it: ensemble_two_step." in asked[0]
        assert "and with it ensemble_two_step" in detail.text_content("#action-message")
        assert not any(s.state == "READY" for s in client.model_states("ensemble_two_step"))
        # The ensemble's row says why it went down, live and after a reload.
        wait_js(
            listing,
            f"(document.querySelector('{ensemble} [data-last-outcome]') || {{}}).textContent"
            f"?.includes('{why}')",
        )
        listing.reload()
        assert why in listing.text_content(f"{ensemble} [data-last-outcome]")
        assert listing.text_content(f"{ensemble} [data-state-cell]") == "unloaded"
    finally:
        context.close()
        for name in ("ensemble_two_step", "add_batched", "add_sub"):
            client.unload(name)
