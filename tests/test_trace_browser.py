"""Trace in a real browser: from the model page, tracing turned on by the worker (the page
hears it), ten requests of an ensemble traced and drawn with their steps nested, then
stopped."""

from __future__ import annotations

import numpy as np
import pytest

from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_ten_traced_requests_of_the_ensemble_nest_their_steps(
    browser, web_server, celery_worker, admin_credentials, triton
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    models = ("ensemble_two_step", "add_sub", "add_batched")
    before = {m: any(s.state == "READY" for s in client.model_states(m)) for m in models}
    client.load("ensemble_two_step")
    page = browser.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/ensemble_two_step/")
        page.click("#trace-link")
        page.wait_for_selector("#live-status.ok")
        page.fill("#trace-count", "10")
        page.click("#trace-start")
        wait_js(
            page,
            "document.getElementById('trace-status').textContent.startsWith('Tracing the next 10')",
        )
        ones = np.ones((1, 16), np.float32)
        for _ in range(10):
            client.infer("ensemble_two_step", [("INPUT0", "FP32", ones), ("INPUT1", "FP32", ones)],
                         ["OUTPUT0"], max_request_bytes=1 << 20, max_response_bytes=1 << 20,
                         timeout_s=30)  # fmt: skip
        page.click("#trace-read")
        wait_js(page, "document.querySelectorAll('.trace-timeline').length === 10")
        first = page.locator(".trace-timeline").first
        labels = first.locator(".trace-parts tr[data-model]").evaluate_all(
            "rows => rows.map(r => r.dataset.model)"
        )
        assert labels == ["ensemble_two_step", "add_sub", "add_batched"]
        # The steps are nested under the request (indented), each with its own parts.
        assert (
            first.locator(".trace-parts tr[data-model=add_sub] td")
            .first.text_content()
            .startswith("\u00a0")
        )
    finally:
        page.close()
        for model in models:
            client.update_trace_settings(model, {"trace_level": ["OFF"]})
        for model in models:
            if not before[model]:
                client.unload(model)
