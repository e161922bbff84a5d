"""In a real browser: Find best config from the model page, Pareto points appear live."""

from __future__ import annotations

import pytest

from triton_api.client import TritonClient

from .conftest import login

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_a_search_started_from_the_model_page_draws_pareto_points_live(
    browser, web_server, celery_worker, admin_credentials, triton
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("busy_compute")
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/busy_compute/")
        page.click("#find-best-config-link")
        assert page.input_value("#id_kind") == "KIND_CPU"  # no GPU on this server
        page.select_option("#id_mode", "grid")
        page.fill("#id_counts", "1:2")
        page.uncheck("#id_batching_off")
        page.fill("#id_delays", "200")
        page.fill("#id_concurrency_range", "2")
        page.fill("#id_measurement_interval", "300")
        page.fill("#id_max_trials", "3")
        page.fill("#id_stability_percentage", "100")
        page.fill("#id_latency_budget", "100")
        page.click("#start-search")
        page.wait_for_url("**/searches/*/")
        page.wait_for_selector("#live-status.ok")
        page.evaluate("window.__marker = 'same page'")
        page.wait_for_function(
            "() => document.getElementById('chart-pareto').data[0].x.length >= 1"
        )
        page.wait_for_function(
            "() => document.getElementById('search-state').textContent === 'succeeded'",
        )
        assert page.evaluate("document.getElementById('chart-pareto').data[0].x.length") == 2
        assert page.evaluate("document.getElementById('chart-pareto').data[1].x.length") >= 1
        assert page.evaluate("window.__marker") == "same page"  # no reload happened
        assert page.locator("#ranking tbody tr").count() == 2
        assert "infer/s" in page.text_content("#recommendation")
        # Apply is offered unless the recommendation is to keep the current config.
        recommendation = page.text_content("#recommendation") or ""
        keeps = "already the best" in recommendation or "keep it" in recommendation
        assert page.is_visible("#btn-apply-best") != keeps
    finally:
        context.close()
        client.unload("busy_compute")
