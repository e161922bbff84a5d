"""In a real browser: the Server page's time-range picker draws the stored history of the
chosen range on open, with sweeps and config changes on the timeline, then goes on with
live points; idle charts start at 0."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from profiler_app.models import Sweep
from repository_app import events
from repository_app.models import ConfigRevision, ModelMetricPoint
from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAST = "past_model"  # a model only the stored history knows
RPS = "document.getElementById('chart-rps')"


# Records each extendTraces/addTraces call: (name, chart id, the x values it adds, in ms).
COUNT_PLOTLY_CALLS = """() => {
  window.plotlyCalls = [];
  for (const name of ["extendTraces", "addTraces"]) {
    const original = Plotly[name];
    Plotly[name] = function (gd, update) {
      const xs = name === "addTraces" ? [].concat(update).map(t => t.x[0]) : update.x.map(x => x[0]);
      window.plotlyCalls.push([name, typeof gd === "string" ? gd : gd.id, xs.map(x => x.getTime())]);
      return original.apply(this, arguments);
    };
  }
}"""


def _trace(chart: str, name: str) -> str:
    return f"{chart}.data.find(t => t.name === {name!r})"


def _seed(now: int) -> Sweep:
    """10 s rows from 50 to 10 minutes ago, 1-minute rows from 5 h to 4 h ago, a finished
    sweep and a config change half an hour ago."""
    start = now - 3000 - now % 10
    rows = [
        ModelMetricPoint(ts=start + 10 * i, resolution_s=10, model=PAST, requests_per_s=5.0)
        for i in range(240)
    ]
    hour = now - 5 * 3600 - now % 60
    rows += [
        ModelMetricPoint(ts=hour + 60 * i, resolution_s=60, model=PAST, requests_per_s=2.0)
        for i in range(60)
    ]
    ModelMetricPoint.objects.bulk_create(rows)
    sweep = Sweep.objects.create(model="add_sub", server="default", params={})
    Sweep.objects.filter(pk=sweep.pk).update(
        state=Sweep.State.SUCCEEDED,
        created_at=datetime.fromtimestamp(now - 1900, UTC),
        started_at=datetime.fromtimestamp(now - 1900, UTC),
        finished_at=datetime.fromtimestamp(now - 1600, UTC),
    )
    revision = ConfigRevision.objects.create(
        model="add_sub", text="x", sha256="0" * 64, source="text"
    )
    ConfigRevision.objects.filter(pk=revision.pk).update(
        created_at=datetime.fromtimestamp(now - 1500, UTC)
    )
    return sweep


def test_the_time_range_picker_shows_the_past_then_goes_on_live(
    browser, web_server, celery_worker, triton, admin_credentials
):
    now = int(time.time())
    sweep = _seed(now)
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in client.model_states("add_sub"))
    client.load("add_sub")  # loaded and idle: live points at 0 requests/s
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/server/")
        wait_js(page, "document.body.dataset.historyRange === '1h'")
        assert page.get_attribute("#range-picker [data-range='1h']", "aria-pressed") == "true"
        # The past is drawn on open: the stored 10 s rows, from before the page existed.
        first, points = page.evaluate(
            f"[{_trace(RPS, PAST)}.x[0].getTime() / 1000, {_trace(RPS, PAST)}.y.length]"
        )
        assert first < now - 2900 and points >= 240
        # The sweep is a shaded span and the config change a line, on every chart; both listed.
        kinds = page.evaluate(f"{RPS}.layout.shapes.map(s => s.type)")
        assert sorted(kinds) == ["line", "rect"]
        assert page.evaluate(
            "document.getElementById('chart-queue').layout.shapes.length"
        ) == 2  # fmt: skip
        listed = page.text_content("#markers")
        assert f"sweep #{sweep.pk} add_sub" in listed and "add_sub config #1" in listed
        assert page.get_attribute("#markers .marker-sweep a", "href") == f"/sweeps/{sweep.pk}/"

        # Then live: the poller's points for the loaded model come after the history.
        until = float(page.evaluate("document.body.dataset.historyUntil"))
        wait_js(
            page,
            f"{_trace(RPS, 'add_sub')} && {_trace(RPS, 'add_sub')}.x.some(x => x.getTime() / 1000 > {until})",
        )
        # Idle charts start at 0 (Plotly draws all-zero series from -1 to 1 by itself).
        low, high = page.evaluate(
            "document.getElementById('chart-failures')._fullLayout.yaxis.range"
        )
        assert low == 0 and high >= 1

        # A live event from a server with many models is drawn with one call per chart, not
        # one per model and chart (each call redraws its chart).
        page.evaluate(COUNT_PLOTLY_CALLS)
        at = until + 86_400.5  # a time no other event has
        fields = ("requests_per_s", "failures_per_s", "queue_us", "compute_us", "p99_us",
                  "p50_us", "batch_size", "pending")  # fmt: skip
        many = {f"many_{i}": dict.fromkeys(fields, 1.0) for i in range(12)}
        assert events.publish(
            events.server_group("default"), "server.metrics", {"time": at, "models": many, "gpus": {}}
        )  # fmt: skip
        wait_js(page, f"{_trace(RPS, 'many_11')} !== undefined")
        calls = page.evaluate(f"window.plotlyCalls.filter(c => c[2].includes({at * 1000}))")
        per_chart = Counter((name, chart) for name, chart, _ in calls)
        assert per_chart[("addTraces", "chart-rps")] == 1, calls
        assert max(per_chart.values()) == 1, per_chart
        assert page.evaluate(f"{RPS}.data.filter(t => t.name.startsWith('many_')).length") == 12

        # Another range: the 1-minute rows of five hours ago, the choice kept in the URL.
        page.click("#range-picker [data-range='6h']")
        wait_js(page, "document.body.dataset.historyRange === '6h'")
        assert page.get_attribute("#range-picker [data-range='6h']", "aria-pressed") == "true"
        assert page.get_attribute("#range-picker [data-range='1h']", "aria-pressed") == "false"
        assert page.url.endswith("?range=6h")
        first = page.evaluate(f"{_trace(RPS, PAST)}.x[0].getTime() / 1000")
        assert now - 5 * 3600 - 60 <= first < now - 4 * 3600
        assert "1 min steps" in page.text_content("#history-status")

        page.goto(f"{web_server.url}/server/?range=14d")
        wait_js(page, "document.body.dataset.historyRange === '14d'")
        assert page.get_attribute("#range-picker [data-range='14d']", "aria-pressed") == "true"
    finally:
        context.close()
        if not was_ready:
            client.unload("add_sub")


def test_close_markers_are_staggered_with_their_whole_label_on_hover_and_memory_reads_gib(
    browser, web_server, triton, admin_credentials
):
    from repository_app.models import ServerMetricPoint

    now = int(time.time())
    # Three sweeps and a config change within 30 s: four labels where one fits.
    for offset in (1000, 990, 980):
        sweep = Sweep.objects.create(model="add_sub", server="default", params={})
        at = datetime.fromtimestamp(now - offset, UTC)
        Sweep.objects.filter(pk=sweep.pk).update(
            state=Sweep.State.SUCCEEDED, created_at=at, started_at=at,
            finished_at=datetime.fromtimestamp(now - offset + 5, UTC),
        )  # fmt: skip
    revision = ConfigRevision.objects.create(
        model="add_sub", text="x", sha256="0" * 64, source="text"
    )
    ConfigRevision.objects.filter(pk=revision.pk).update(
        created_at=datetime.fromtimestamp(now - 970, UTC)
    )
    start = now - 600 - now % 10
    gib = 2**30
    rows = [
        ServerMetricPoint(ts=start + 10 * i, resolution_s=10, cpu_utilization=0.5,
                          cpu_memory_used_bytes=25 * gib, cpu_memory_total_bytes=64 * gib)
        for i in range(30)
    ]  # fmt: skip
    ServerMetricPoint.objects.bulk_create(rows)
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/server/")
        wait_js(page, "document.body.dataset.historyRange === '1h'")
        notes = page.evaluate(f"{RPS}.layout.annotations")
        assert len(notes) == 4
        # Each in a row of its own, the fourth shortened; every one whole on hover.
        assert sorted(n.get("yshift", 0) for n in notes) == [0, 12, 24, 24]
        assert sorted(n["text"] for n in notes) == ["c", "sweep", "sweep", "sweep"]
        hovers = [n["hovertext"] for n in notes]
        assert sum("config #" in h for h in hovers) == 1
        assert sum(h.startswith("sweep #") for h in hovers) == 3
        assert all(" · " in h for h in hovers), hovers
        # Memory in GiB on a GiB axis, not "25B" (billions of bytes).
        mem = "document.getElementById('chart-cpu-mem')"
        wait_js(page, f"{mem}.data && {mem}.data.some(t => t.name === 'used')")
        used = page.evaluate(f"{mem}.data.find(t => t.name === 'used').y")
        # The stored points read 25 (GiB); a live point the page appended meanwhile reads
        # this machine's real memory, in GiB too (never a byte count).
        assert sum(value == 25 for value in used) >= len(rows), used
        assert all(value < 2**20 for value in used), used
        assert page.evaluate(f"{mem}.layout.yaxis.ticksuffix") == " GiB"
        assert page.text_content("#cpu-charts") and "(GiB)" in page.text_content("#cpu-charts")
    finally:
        context.close()
