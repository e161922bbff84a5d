"""Try a model in a real browser: from the model page's link, a bad input refused on its
field, then a request answered with outputs computed here, its statistics, its copies, a
download of the whole output and the Benchmark form's input data; then a decoupled, a
sequence and an ensemble model. Keeping an answer as a check: test_checks_browser."""

from __future__ import annotations

import json

import numpy as np
import pytest

from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_try_add_sub_from_the_model_page(browser, web_server, admin_credentials, triton):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.load("add_sub")
    page = browser.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_sub/")
        page.click("#try-link")
        page.wait_for_selector("#try-form")
        assert page.text_content('tr[data-input="INPUT0"] th .muted') == "FP32 [16]"
        first = 'tr[data-input="INPUT0"] '
        second = 'tr[data-input="INPUT1"] '
        # Three values for sixteen: refused on INPUT0's field, nothing shown as an answer.
        page.fill(first + "textarea", "1 2 3")
        page.select_option(second + "select", "zeros")
        page.click("#try-send")
        wait_js(page, "document.getElementById('try-status').textContent === 'refused'")
        assert page.text_content('[data-field="inputs.INPUT0"]') == (
            "INPUT0: 3 values given, the shape [1, 16] takes 16"
        )
        assert page.is_hidden("#try-answer")
        a = np.arange(16, dtype=np.float32)
        page.fill(first + "textarea", " ".join(str(v) for v in a.tolist()))
        page.select_option(second + "select", "values")
        page.fill(second + "textarea", "[" + ", ".join(["2.5"] * 16) + "]")
        page.click("#try-send")
        wait_js(page, "document.getElementById('try-status').textContent === 'answered'")
        assert page.text_content('[data-field="inputs.INPUT0"]') == ""
        cells = page.locator('#try-outputs tr[data-output="OUTPUT0"] td')
        assert cells.nth(1).text_content() == "FP32" and cells.nth(2).text_content() == "[1,16]"
        assert np.allclose(eval_list(cells.nth(3).text_content()), a + 2.5)
        minus = page.locator('#try-outputs tr[data-output="OUTPUT1"] td').nth(3).text_content()
        assert np.allclose(eval_list(minus), a - 2.5)
        assert page.text_content("#try-statistics tbody tr td") == "add_sub"
        assert "/v2/models/add_sub/infer" in page.text_content("#try-copy-curl")
        with page.expect_download() as download:
            page.click('#try-outputs tr[data-output="OUTPUT0"] a:text(".npy")')
        saved = np.load(download.value.path())
        assert saved.shape == (1, 16) and np.allclose(saved[0], a + 2.5)
        # The request as the Benchmark form's input data (perf_analyzer's shape, no batch).
        page.click("summary:has-text('perf_analyzer')")
        with page.expect_navigation():
            page.click("#try-benchmark")
        document = json.loads(page.input_value("#id_input_data_text"))
        assert np.allclose(document["data"][0]["INPUT0"]["content"], a)
        assert page.input_value("#id_input_data") == "text"
    finally:
        page.close()
        if not was_ready:
            client.unload("add_sub")


def eval_list(text: str | None) -> list[float]:
    return [float(v) for v in json.loads(text or "[]")]


def test_try_a_decoupled_a_sequence_and_an_ensemble_model(
    browser, web_server, admin_credentials, triton
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    models = ("stream_tok", "seq_accumulate", "ensemble_two_step", "add_sub", "add_batched")
    before = {m: any(s.state == "READY" for s in client.model_states(m)) for m in models}
    for model in ("stream_tok", "seq_accumulate", "ensemble_two_step"):
        client.load(model)
    page = browser.new_page()
    answered = "document.getElementById('try-status').textContent === 'answered'"
    try:
        login(page, web_server.url, *admin_credentials)
        # Decoupled: every response, in order (here 8 tokens after PROMPT_ID 100).
        page.goto(f"{web_server.url}/models/stream_tok/try/")
        assert page.is_visible("#try-decoupled")
        page.fill('tr[data-input="PROMPT_ID"] textarea', "100")
        page.click("#try-send")
        wait_js(page, answered)
        wait_js(page, "document.querySelectorAll('#try-responses tbody tr').length === 8")
        rows = page.locator("#try-responses tbody tr td:nth-child(3)").all_text_contents()
        assert rows == [f"TOKEN [{101 + i}]" for i in range(8)]
        # A sequence of 3 steps: the running sum, START and END set for us.
        page.goto(f"{web_server.url}/models/seq_accumulate/try/")
        page.fill('tr[data-input="INPUT"] textarea', "5")
        page.fill("#try-correlation", "4242")
        page.fill("#try-steps", "3")
        page.click("#try-send")
        wait_js(page, answered)
        rows = page.locator("#try-responses tbody tr td:nth-child(3)").all_text_contents()
        assert rows == ["OUTPUT [5]", "OUTPUT [10]", "OUTPUT [15]"]
        # An ensemble: its answer and each step's statistics.
        page.goto(f"{web_server.url}/models/ensemble_two_step/try/")
        page.fill('tr[data-input="INPUT0"] textarea', " ".join(["1.5"] * 16))
        page.select_option('tr[data-input="INPUT1"] select', "zeros")
        page.click("#try-send")
        wait_js(page, answered)
        values = page.locator('#try-outputs tr[data-output="OUTPUT0"] td').nth(3).text_content()
        assert json.loads(values or "[]") == [2.5] * 16
        steps = page.locator("#try-statistics tbody tr td:first-child").all_text_contents()
        assert steps == ["ensemble_two_step", "add_sub", "add_batched"]
    finally:
        page.close()
        for model in (
            "ensemble_two_step",
            "seq_accumulate",
            "stream_tok",
            "add_sub",
            "add_batched",
        ):
            if not before[model]:
                client.unload(model)
