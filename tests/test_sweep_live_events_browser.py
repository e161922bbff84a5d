"""The sweep page draws each level from its event alone: the event carries the verdict so
far (and perf_analyzer's average, read from its CSV afterwards, comes as the level again);
in a real browser the page fetches its snapshot over HTTP (data.json) once when it opens,
then only again on a gap in the events' sequence."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest

from profiler_app import jobs, sweep_read, sweep_recorder, sweeps
from profiler_app.engine import perf_analyzer_output as pa_output
from profiler_app.models import Sweep
from profiler_app.params import SweepParams
from registry import servers
from repository_app import events

from .conftest import login, wait_for, wait_js

# The page's own count of its data.json fetches: exact the moment a timer fires, where
# the browser's request events reach the test a little later.
COUNT_FETCHES = """
window.__dataFetches = 0;
const nativeFetch = window.fetch;
window.fetch = function (url, options) {
  if (String(url).endsWith("/data.json")) window.__dataFetches += 1;
  return nativeFetch.call(this, url, options);
};
"""
POINTS = "document.getElementById('chart-throughput').data[0].x.length"


def counting_data_fetches(browser):  # type: ignore[no-untyped-def]
    """A browser context and page (a clock installed: time flows, and run_for fires
    whatever timer a page has set) that count the page's data.json fetches, and
    ``fetches()``: their number once every scheduled re-fetch has had its chance and the
    browser's request events agree with the page's own count."""
    context = browser.new_context()
    context.add_init_script(COUNT_FETCHES)
    page = context.new_page()
    page.clock.install()
    requested: list[str] = []
    page.on(
        "request",
        lambda r: requested.append(r.url) if urlparse(r.url).path.endswith("/data.json") else None,
    )

    def fetches() -> int:
        page.clock.run_for(60_000)  # e.g. a re-fetch scheduled 300 ms after an event
        wait_for(
            lambda: page.evaluate("window.__dataFetches") == len(requested),
            120,
            "the browser's data.json requests",
        )
        return len(requested)

    return context, page, fetches


def _level(level: int) -> pa_output.PaLevel:
    return pa_output.PaLevel(
        level, throughput=1000.0 * level, request_count=300,
        percentiles_us={95: 1000.0 * level}, windows=[pa_output.PaWindow(level, 0, 1000.0 * level, 1000)],
    )  # fmt: skip


def _running_sweep(params: SweepParams) -> Sweep:
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    assert jobs.claim(sweep.pk)
    sweep.refresh_from_db()
    return sweep


@pytest.mark.django_db(transaction=True)
def test_a_level_event_carries_the_verdict_so_far_and_the_average_read_afterwards(monkeypatch):
    params = SweepParams(model="add_batched", start=1, end=4, max_windows=10)
    sweep = _running_sweep(params)
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(
        sweep_recorder.events, "publish", lambda group, kind, data: sent.append(data)
    )
    recorder = sweep_recorder.Recorder(sweep, params)
    try:
        recorder.run(recorder.pa_level, _level(1))
        recorder.run(recorder.set_average, 1, 1234.0, None)
    finally:
        recorder.close()
    for data in sent:
        events.check_event("sweep.level", data)
    first, again = sent
    assert first["summary"]["recommendation"].startswith("So far")
    assert first["started_at"] == sweep.started_at.isoformat()
    assert (first["point"]["avg_us"], again["point"]["avg_us"]) == (None, 1234.0)


@pytest.mark.integration
@pytest.mark.browser
def test_levels_reach_the_chart_by_event_and_a_gap_alone_refetches_the_snapshot(
    browser, web_server, admin_credentials
):
    params = SweepParams(model="add_batched", start=1, end=4, max_windows=10)
    sweep = _running_sweep(params)
    recorder = sweep_recorder.Recorder(sweep, params)
    context, page, fetches = counting_data_fetches(browser)

    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
        page.wait_for_selector("#live-status.ok")
        wait_for(lambda: page.evaluate("window.__dataFetches") >= 1, 120, "the fetch on open")
        assert fetches() == 1
        for n in (1, 2, 3):  # in order: each drawn from its event, nothing fetched
            recorder.run(recorder.pa_level, _level(n))
            wait_js(page, f"{POINTS} === {n}")
            assert fetches() == 1, f"data.json fetched after level {n}"
        verdict = sweep_read.knee_summary(sweep)["recommendation"]
        assert verdict and page.text_content("#recommendation") == verdict
        assert page.text_content("#progress-text").startswith("3 / 4 levels")

        events.next_seq(sweep.group)  # a number taken by an event this page never sees
        recorder.run(recorder.pa_level, _level(4))
        wait_js(page, f"{POINTS} === 4")
        wait_for(lambda: page.evaluate("window.__dataFetches") >= 2, 120, "the fetch on a gap")
        assert fetches() == 2
    finally:
        recorder.close()
        context.close()
