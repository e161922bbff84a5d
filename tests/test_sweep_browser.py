"""In a real browser: Benchmark from the model page, quick preset, charts grow live."""

from __future__ import annotations

import json

import pytest

from registry import servers
from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_benchmark_from_the_model_page_draws_points_live_without_reloading(
    browser, web_server, celery_worker, admin_credentials, triton
):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    context = browser.new_context()
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_batched/")
        page.click("#benchmark-link")
        page.click("#preset-quick")
        assert page.input_value("#id_concurrency_range") == "1:4:1"
        assert page.input_value("#id_measurement_interval") == "1000"
        page.fill("#id_stability_percentage", "50")  # keeps the run short on two cores
        page.click("#start-sweep")
        page.wait_for_url("**/sweeps/*/")
        page.wait_for_selector("#live-status.ok")
        page.evaluate("window.__marker = 'same page'")
        try:
            wait_js(
                page,
                "document.getElementById('chart-throughput').data[0].x.length >= 1",
            )
        except AssertionError:
            raise AssertionError(f"{console} {page.text_content('body')[:3000]}") from None
        first = page.evaluate("document.getElementById('chart-throughput').data[0].x.length")
        wait_js(
            page,
            f"document.getElementById('chart-throughput').data[0].x.length > {first}",
        )
        wait_js(
            page,
            "document.getElementById('sweep-state').textContent === 'succeeded'",
        )
        assert page.evaluate("document.getElementById('chart-throughput').data[0].x.length") == 4
        assert page.evaluate("window.__marker") == "same page"  # no reload happened
        assert "infer/s" in page.text_content("#recommendation")
        assert page.text_content("#progress-text").startswith("4 / 4 levels")
    finally:
        context.close()
        client.unload("add_batched")


def test_the_benchmark_form_shows_and_sends_only_the_fields_of_the_chosen_mode(
    browser, web_server, admin_credentials, triton
):
    rate = ("request_rate_range", "request_distribution", "max_threads")
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_batched/benchmark/")
        assert page.is_visible("#row-concurrency_range")
        assert all(page.is_hidden(f"#row-{name}") for name in rate)
        assert all(page.is_disabled(f"#id_{name}") for name in rate)  # not sent either
        page.select_option("#id_mode", "request_rate")
        assert page.is_hidden("#row-concurrency_range")
        assert page.is_disabled("#id_concurrency_range")
        assert all(page.is_visible(f"#row-{name}") for name in rate)
        assert not any(page.is_disabled(f"#id_{name}") for name in rate)
        page.select_option("#id_mode", "concurrency")
        assert page.is_visible("#row-concurrency_range")
        assert all(page.is_hidden(f"#row-{name}") for name in rate)
    finally:
        context.close()


def test_a_request_rate_level_behind_its_schedule_is_flagged_in_the_levels_table(
    browser, web_server, admin_credentials
):
    from profiler_app import jobs, sweeps
    from profiler_app.models import SweepPoint
    from profiler_app.params import SweepParams

    params = SweepParams(model="add_batched", mode="request_rate", start=100, end=50_000, step=49_900)  # fmt: skip
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    for level, sent, behind in ((100, 100.2, False), (50_000, 11_873.4, True)):
        extra = {"windows": 3, "send_rate": sent, "behind_schedule": behind}
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=SweepPoint.LEVEL, requests=300, throughput=sent,
            p95_us=1500.0, stable=True, extra=extra,
        )  # fmt: skip
    assert jobs.claim(sweep.pk)
    jobs.finish(sweep.pk, jobs.Outcome("succeeded", ""))
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
        wait_js(page, "document.querySelectorAll('#levels-table tr[data-level]').length === 2")
        rows = page.locator("#levels-table tr[data-level]")
        assert "sent" not in rows.nth(0).text_content()
        flagged = rows.nth(1).locator("td").first
        assert "(sent 11873/s)" in flagged.text_content()
        assert "waiting for a reply" in flagged.locator(".warning").get_attribute("title")
    finally:
        context.close()


def test_a_request_rate_sweep_with_an_uploaded_input_data_file_runs_from_the_form(
    browser, web_server, celery_worker, admin_credentials, triton, tmp_path
):
    # The test client posts multipart whatever the page says; a browser sends a file only
    # when the form is multipart, so this is the check that the upload reaches the sweep.
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("add_batched")
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n  {"INPUT0": [1, 2,,]}\n]}')
    good = tmp_path / "input.json"
    good.write_text(json.dumps({"data": [{"INPUT0": [1.0] * 16}, {"INPUT0": [2.0] * 16}]}))
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_batched/benchmark/")
        page.select_option("#id_mode", "request_rate")
        page.fill("#id_request_rate_range", "100")
        page.select_option("#id_request_distribution", "poisson")
        page.fill("#id_max_threads", "2")
        page.fill("#id_measurement_interval", "300")
        page.fill("#id_stability_percentage", "80")
        page.fill("#id_max_trials", "3")
        page.select_option("#id_input_data", "json")
        page.set_input_files("#id_input_data_file", str(bad))
        page.click("#start-sweep")
        error = page.text_content('[data-field="input_data_file"]') or ""
        assert "line 2, column" in error, error
        # What was typed is kept; the file input is empty again, as browsers do.
        assert page.input_value("#id_request_rate_range") == "100"
        page.set_input_files("#id_input_data_file", str(good))
        page.click("#start-sweep")
        page.wait_for_url("**/sweeps/*/")
        wait_js(
            page,
            "document.getElementById('sweep-state').textContent === 'succeeded'",
        )
        text = page.text_content("body") or ""
        assert "input JSON, 2 samples" in text and "poisson arrivals · max threads 2" in text
    finally:
        context.close()
        client.unload("add_batched")


def test_benchmark_of_a_decoupled_model_streams_and_draws_its_response_charts(
    browser, web_server, celery_worker, admin_credentials, triton
):
    """The decoupled kind: its preset turns streaming on (built-in engine, gRPC), and the
    first-response, inter-response, responses/s and goodput charts show every level, and
    the inter-response histogram the last level's gaps."""
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("stream_tok")
    context = browser.new_context()
    page = context.new_page()
    console: list[str] = []
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/stream_tok/")
        page.click("#benchmark-link")
        page.click("#preset-quick")
        assert page.is_checked("#id_streaming")
        page.fill("#id_concurrency_range", "1:2:1")
        page.fill("#id_stability_percentage", "100")  # keeps the run short on two cores
        page.fill("#id_goodput", "time_to_first_token:60000")  # every request meets it
        page.click("#start-sweep")
        page.wait_for_url("**/sweeps/*/")
        wait_js(page, "document.getElementById('sweep-state').textContent === 'succeeded'")
        for chart in ("chart-first-response", "chart-inter-response", "chart-responses"):
            points = page.evaluate(
                f"document.getElementById('{chart}').data[0].y.filter(v => v > 0).length"
            )
            assert points == 2, (chart, console)
        # The live inter-response histogram of the level on show (the last): its windows'
        # counts summed, one per gap, RESPONSE_COUNT - 1 = 7 gaps per completed request.
        assert page.is_visible("#card-histogram")
        bars = page.evaluate("document.getElementById('chart-histogram').data[0].y")
        assert any(v > 0 for v in bars), bars
        requests = page.evaluate(
            "Array.from(SweepPage.points.values()).filter(p => p.window >= 0 && p.level === 2)"
            ".reduce((a, p) => a + p.requests, 0)"
        )
        assert sum(bars) == 7 * requests > 0
        # Goodput beside requests/s: every request met the objective, at both levels.
        assert page.is_visible("#card-goodput")
        rates, goodput = page.evaluate(
            "document.getElementById('chart-goodput').data.map(t => t.y)"
        )
        assert len(goodput) == 2 and all(g > 0 for g in goodput)
        assert goodput == pytest.approx(rates)
        assert not console, console
    finally:
        context.close()
        client.unload("stream_tok")


def test_benchmark_of_an_ensemble_draws_a_chart_per_step(
    browser, web_server, celery_worker, admin_credentials, triton
):
    """The ensemble kind: the built-in engine reads each step's statistics, and the page
    draws a breakdown chart per step (add_sub, add_batched) and the Steps table."""
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    models = ("add_sub", "add_batched", "ensemble_two_step")  # the steps load first
    for name in models:
        client.load(name)
    context = browser.new_context()
    page = context.new_page()
    console: list[str] = []
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/ensemble_two_step/")
        page.click("#benchmark-link")
        assert "per-step breakdown" in page.text_content("#model-kind")
        page.click("#preset-quick")
        page.fill("#id_concurrency_range", "1:2:1")
        page.fill("#id_measurement_interval", "300")
        page.fill("#id_stability_percentage", "100")  # keeps the run short on two cores
        page.fill("#id_max_trials", "3")
        page.click("#start-sweep")
        page.wait_for_url("**/sweeps/*/")
        for step in ("add_sub", "add_batched"):  # drawn live, as levels arrive
            wait_js(
                page,
                f"Array.from(document.querySelectorAll('#step-charts [data-step]')).some("
                f"el => el.dataset.step === '{step}' && el.data && el.data[2].y.length >= 1)",
            )
        wait_js(page, "document.getElementById('sweep-state').textContent === 'succeeded'")
        counts = page.evaluate(
            "Array.from(document.querySelectorAll('#step-charts [data-step]')).map("
            "el => [el.dataset.step, el.data[2].y.filter(v => v > 0).length])"
        )
        assert counts == [["add_sub", 2], ["add_batched", 2]], (counts, console)
        table = page.text_content("#steps-table")
        assert "add_sub" in table and "add_batched" in table
        # The step sentence names the knee or the last settled level; a busy machine may
        # settle none (then the verdict answers from what was measured and says so): never
        # a condition on speed.
        settled = page.evaluate(
            "Array.from(SweepPage.points.values()).some(p => p.window === -1 && p.stable)"
        )
        recommendation = page.text_content("#recommendation")
        if settled:
            assert "of compute at concurrency" in recommendation, recommendation
        else:  # answered from what was measured, the step share with it where it was
            assert "read from what was measured" in recommendation, recommendation
        assert not console, console
    finally:
        context.close()
        for name in reversed(models):
            client.unload(name)


def test_benchmark_of_a_sequence_model_draws_its_requests_by_position(
    browser, web_server, celery_worker, admin_credentials, triton
):
    """The sequence kind: its preset benchmarks with the built-in engine, which sends
    sequences, and the throughput and p95 by position (first, middle, last) chart every
    level."""
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load("seq_accumulate")
    context = browser.new_context()
    page = context.new_page()
    console: list[str] = []
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/seq_accumulate/")
        page.click("#benchmark-link")
        page.click("#preset-quick")
        assert page.input_value("#id_engine") == "builtin"
        assert page.input_value("#id_sequence_length") == "20"
        page.fill("#id_concurrency_range", "1:2:1")
        page.fill("#id_stability_percentage", "100")  # keeps the run short on two cores
        page.click("#start-sweep")
        page.wait_for_url("**/sweeps/*/")
        wait_js(page, "document.getElementById('sweep-state').textContent === 'succeeded'")
        assert page.text_content("#sweep-kind") == "sequence (direct)"
        assert "perf_analyzer's defaults apply" in page.text_content("#kind-note-1")
        for chart in ("chart-position-throughput", "chart-position-latency"):
            traces = page.evaluate(
                f"document.getElementById('{chart}').data.map(t => [t.name, "
                "t.y.filter(v => v > 0).length])"
            )
            assert traces == [["first", 2], ["middle", 2], ["last", 2]], (chart, console)
        assert not console, console
    finally:
        context.close()
        client.unload("seq_accumulate")
