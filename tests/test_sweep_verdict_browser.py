"""In a real browser: unstable levels drawn hollow with the caveat sentence, finished
sweeps and searches without Cancel or Resume, and a sweep's report, downloaded from its
page, drawn offline without a console error."""

from __future__ import annotations

import pytest
from django.utils import timezone

from profiler_app import jobs, sweeps
from profiler_app.models import Search, SearchCandidate, Sweep, SweepPoint
from profiler_app.params import SweepParams
from profiler_app.search import ranking
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space
from registry import servers

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def _finished_sweep() -> Sweep:
    params = SweepParams(model="add_batched", start=1, end=4, max_windows=10)
    sweep = sweeps.create_sweep(
        servers.default(), params, enqueue=False, name="after the fp16 change"
    )
    for level, tput, p95, stable in [
        (1, 1000, 1000, True), (2, 1900, 1100, True), (3, 2000, 1500, False),
        (4, 2900, 1600, False),
    ]:  # fmt: skip
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=SweepPoint.LEVEL, requests=300, throughput=tput,
            p95_us=p95, p50_us=p95 / 2, p99_us=p95 * 1.2, stable=stable,
            extra={"windows": 3 if stable else 10, "throughput_spread": 0.01 if stable else 0.18},
        )  # fmt: skip
    assert jobs.claim(sweep.pk)
    jobs.finish(sweep.pk, jobs.Outcome("succeeded", ""))
    return sweep


def test_unstable_levels_are_hollow_with_the_caveat_and_a_finished_sweep_has_no_cancel(
    browser, web_server, admin_credentials
):
    sweep = _finished_sweep()
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
        wait_js(page, "document.querySelectorAll('#levels-table tr[data-level]').length === 4")
        symbols = page.evaluate("document.getElementById('chart-throughput').data[0].marker.symbol")
        assert symbols == ["circle", "circle", "circle-open", "circle-open"]
        latency = page.evaluate("document.getElementById('chart-latency').data[1].marker.symbol")
        assert latency == symbols
        caveat = page.locator("#verdict-caveat")
        assert caveat.is_visible()
        assert caveat.text_content() == (
            "Levels 3–4 did not settle within 10 windows (spread up to 18%): the knee is "
            "uncertain; raise max windows or the window length."
        )
        recommendation = page.text_content("#recommendation") or ""
        assert recommendation.startswith("Concurrency 2 gives 1,900 infer/s")
        assert "2,900" not in recommendation and "try higher loads" not in recommendation
        axis = page.evaluate("document.getElementById('chart-throughput').layout.xaxis.title.text")
        assert axis == "concurrency"
        # Finished: neither Cancel nor Resume is shown (nor takes room), Re-run is.
        assert not page.is_visible("#btn-cancel") and not page.is_visible("#btn-resume")
        assert page.is_visible("#btn-rerun")
        assert "after the fp16 change" in (page.text_content("h1") or "")
        assert "concurrency 1:4:1" in (page.text_content("#sweep-params") or "")
    finally:
        context.close()


def test_a_finished_search_has_no_cancel_one_best_marker_and_labelled_points(
    browser, web_server, admin_credentials
):
    base, two = Knobs(1, "KIND_CPU", 32, True, 200), Knobs(2, "KIND_CPU", 32, True, 200)
    carrier = Sweep.objects.create(
        model="busy_compute", server="x", state="succeeded", finished_at=timezone.now(),
        kind="search", params={"model": "busy_compute", "start": 2, "end": 4, "step": 2},
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model="busy_compute", mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints(latency_budget_ms=15).to_json(), baseline=base.to_json(),
    )  # fmt: skip
    for seq, knobs, tputs in ((1, base, (900, 1000)), (2, two, (1500, 1800))):
        SearchCandidate.objects.create(
            search=search, key=knobs.key, seq=seq, knobs=knobs.to_json(), baseline=seq == 1,
            state="measured",
            levels=[{"concurrency": c, "throughput": t, "p95_us": 1000.0 * c, "stable": True}
                    for c, t in zip((2, 4), tputs, strict=True)],
        )  # fmt: skip
    Search.objects.filter(pk=search.pk).update(result=ranking.summarize(search))
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/searches/{search.pk}/")
        wait_js(page, "document.querySelectorAll('#ranking tbody tr').length === 2")
        assert not page.is_visible("#btn-cancel") and not page.is_visible("#btn-resume")
        assert page.text_content("#constraints") == "p95 ≤ 15 ms"
        best = page.evaluate("document.getElementById('chart-pareto').data[3]")
        assert len(best["x"]) == 1 and best["hovertext"][0].startswith("#2 2 CPU instances")
        front = page.evaluate("document.getElementById('chart-pareto').data[1]")
        assert front["text"] == ["#2 @2", "#2 @4"]  # labelled: candidate and concurrency
        assert front["x"][-1] == best["x"][0] and front["y"][-1] == best["y"][0]
        legend = page.evaluate("document.getElementById('chart-pareto').layout.legend")
        assert legend["y"] > 1 and legend["yanchor"] == "bottom"  # above the plot
    finally:
        context.close()


def test_the_sweep_report_downloads_from_its_page_and_draws_offline_without_errors(
    browser, web_server, admin_credentials, tmp_path
):
    sweep = _finished_sweep()
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
        with page.expect_download() as download:
            page.click("#export-report")
        report = tmp_path / download.value.suggested_filename
        assert report.name == f"sweep-{sweep.pk}-add_batched.html"
        download.value.save_as(report)
        errors: list[str] = []
        asked: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda request: asked.append(request.url))
        context.set_offline(True)  # one file: nothing to fetch
        page.goto(report.as_uri())
        charts = "document.querySelectorAll('.chart')"
        wait_js(page, f"{charts}.length === 4 && [...{charts}].every(c => c.data)")
        symbols = page.evaluate("document.getElementById('throughput').data[0].marker.symbol")
        assert symbols == ["circle", "circle", "circle-open", "circle-open"]
        assert page.locator(".chart .main-svg").count() >= 4  # drawn, not only given data
        assert (page.text_content("#recommendation") or "").startswith("Concurrency 2 gives")
        assert errors == [] and asked == [report.as_uri()]
    finally:
        context.close()


def test_a_traced_sweep_shows_where_a_request_spends_its_time_per_level(
    browser, web_server, admin_credentials
):
    params = SweepParams(model="add_batched", start=1, end=2, max_windows=10, trace_sample=3)
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    for level, queue, infer in [(1, 10.0, 80.0), (2, 70.0, 20.0)]:
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=SweepPoint.LEVEL, requests=300, throughput=1000,
            p95_us=1000, p50_us=500, p99_us=1200, stable=True,
            extra={"windows": 3, "traced": 3, "traced_total_us": 100.0, "traced_queue_us": queue,
                   "traced_compute_input_us": 5.0, "traced_infer_us": infer,
                   "traced_compute_output_us": 3.0, "traced_response_us": 2.0},
        )  # fmt: skip
    assert jobs.claim(sweep.pk)
    jobs.finish(sweep.pk, jobs.Outcome("succeeded", ""))
    page = browser.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
        wait_js(page, "document.querySelectorAll('#traced-summary li').length === 2")
        assert page.is_visible("#card-traced")
        at_two = page.text_content('#traced-summary li[data-level="2"]') or ""
        assert at_two.startswith("concurrency 2: queue 70 % · compute input 5 % · infer 20 %")
        assert "(3 traced)" in at_two
        stacked = page.evaluate("document.getElementById('chart-traced').data.map(t => t.name)")
        assert stacked == ["queue", "compute input", "infer", "compute output", "response"]
    finally:
        page.close()
