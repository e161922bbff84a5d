"""In a real browser: a decoupled model's search page draws and ranks on the metrics it was
judged on (responses/s against the first response's p95), read from each level's extra."""

from __future__ import annotations

import pytest

from profiler_app import measure
from profiler_app.search.objective import Constraints

from .conftest import login, wait_js
from .test_search_kinds import ONE, TWO, _stored_search, _stream_level

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_a_streaming_search_page_draws_responses_against_the_first_response(
    browser, web_server, admin_credentials, redis_db
):
    def row(infer_s: float, responses_s: float, first_us: float) -> dict:
        return measure.search_json(_stream_level(2, infer_s, responses_s, first_us))

    search = _stored_search(
        "max_response_throughput", {"streaming": True},
        Constraints(first_response_budget_ms=30).to_json(),
        {ONE: [row(50, 400, 25_000)], TWO: [row(80, 640, 28_000)]},
    )  # fmt: skip
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/searches/{search.pk}/")
        wait_js(page, "document.getElementById('chart-pareto').data")
        measured = page.evaluate("document.getElementById('chart-pareto').data[0]")
        assert sorted(zip(measured["x"], measured["y"], strict=True)) == [(25, 400), (28, 640)]
        layout = page.evaluate("document.getElementById('chart-pareto').layout")
        assert layout["yaxis"]["title"]["text"] == "response throughput (responses/s)"
        assert layout["xaxis"]["title"]["text"].startswith("first response p95 latency (ms)")
        assert layout["shapes"][0]["x0"] == 30, "the first-response budget on the x axis"
        assert page.text_content("#head-throughput") == "Response throughput (responses/s)"
        assert page.text_content("#head-latency") == "First response p95"
        first = page.locator("#ranking tbody tr").first
        assert "640.0 responses/s" in first.text_content()
        assert "first response p95 28.00 ms" in first.text_content()
    finally:
        context.close()
