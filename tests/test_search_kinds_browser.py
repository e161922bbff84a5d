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


def test_the_chart_and_the_ranking_number_candidates_alike_and_keep_it_offers_no_apply(
    browser, web_server, admin_credentials, redis_db
):
    def level(throughput: float, p95_us: float) -> dict:
        return {"concurrency": 2, "throughput": throughput, "p95_us": p95_us, "requests": 100}

    budget = Constraints(latency_budget_ms=5).to_json()
    # #1 is the current config; #2 ranks first: both lie on the Pareto front.
    better = _stored_search(
        "max_throughput", {}, budget, {ONE: [level(1000, 1000)], TWO: [level(1500, 1500)]}
    )
    # Here the current config is the best: the page says keep it, and offers nothing to apply.
    kept = _stored_search(
        "max_throughput", {}, budget, {ONE: [level(1500, 1000)], TWO: [level(1000, 1500)]}
    )
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/searches/{better.pk}/")
        wait_js(page, "document.querySelectorAll('#ranking tbody tr').length === 2")
        assert page.text_content("#ranking thead th") == "Rank"
        front = page.evaluate("SearchPage.front().map(p => [p.key, p.short])")
        assert sorted(short for _, short in front) == ["#1 @2", "#2 @2"]
        for key, short in front:
            number = short.split(" @")[0]
            cells = page.locator(f'#ranking tr[data-key="{key}"] td')
            assert cells.nth(1).text_content().startswith(number + " "), (key, short)
        assert page.locator("#ranking tbody tr").first.locator("td").first.text_content() == "1"
        assert page.is_visible("#btn-apply-best")

        page.goto(f"{web_server.url}/searches/{kept.pk}/")
        wait_js(page, "document.querySelectorAll('#ranking tbody tr').length === 2")
        assert "already the best" in page.text_content("#recommendation")
        assert page.locator("#btn-apply-best").count() == 1 and page.is_hidden("#btn-apply-best")
    finally:
        context.close()
