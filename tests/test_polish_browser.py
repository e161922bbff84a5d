"""In a real browser: the model list's sort headers look like headers, not like default
blue underlined links, and the server page's idle charts start at 0 instead of -1."""

from __future__ import annotations

import pytest

from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Chromium's default link colour, rgb(0, 0, 238), on a header cell's text colour.
HEADER_STYLE = """(() => {
  const a = document.querySelector('th.sortable a'), th = a.closest('th'), s = getComputedStyle(a);
  return [s.color, s.textDecorationLine, getComputedStyle(th).color];
})()"""


def test_sort_headers_are_styled_and_idle_charts_start_at_zero(
    browser, web_server, celery_worker, triton, admin_credentials
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.load("add_sub")  # loaded and idle: its request rate is 0
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/")
        color, decoration, header_color = page.evaluate(HEADER_STYLE)
        assert color == header_color and color != "rgb(0, 0, 238)"
        assert decoration == "none"

        page.goto(f"{web_server.url}/server/")
        page.wait_for_selector("#live-status.ok")
        chart = "document.getElementById('chart-rps')"
        wait_js(
            page,
            f"{chart}.data.some(t => t.name === 'add_sub' && t.x.length >= 2)",
        )
        assert page.evaluate(f"{chart}.data.find(t => t.name === 'add_sub').y.every(v => v === 0)")
        low, high = page.evaluate(f"{chart}._fullLayout.yaxis.range")
        assert low == 0 and high >= 1
        pending_low, _ = page.evaluate(
            "document.getElementById('chart-pending')._fullLayout.yaxis.range"
        )
        assert pending_low == 0
    finally:
        context.close()
        if not was_ready:
            client.unload("add_sub")
