"""How sure a level is, without services: a level's interval and the machine's load in its
stored record (synthetic windows through the engine's merge), rounds spanning their
intervals, the busy-host signal, and stored sweeps' CSV, JSON and page. Nothing here
measures or waits for a measurement to settle."""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import Permission

from profiler_app import export, measure, repeats
from profiler_app.engine import host_load
from profiler_app.engine.merging import build_window, merge_level
from profiler_app.engine.perf_analyzer_csv import CSV_COLUMNS
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams

# Windows of a busy machine's level (infer/s at batch 1, 1 s each): see test_engine_stats.
NOISY = [500, 1000, 1200, 990, 1005, 1010, 1000, 995, 800, 1015]


def _windows(counts: list[int], latency_ns: int = 1_000_000) -> list[Any]:
    """Windows of 1 s with `counts` requests each, all at `latency_ns`."""
    out = []
    for i, count in enumerate(counts):
        lats = np.full(count, latency_ns, dtype=np.int64)
        reply = ("records", np.arange(count), lats, 0, [], 0.01, count, None)
        out.append(build_window(4, i, i * 10**9, (i + 1) * 10**9, [reply], 1))
    return out


def test_a_noisy_level_reports_the_median_of_its_windows_with_its_interval() -> None:
    level = merge_level(4, _windows(NOISY), SweepParams(model="m", start=4, end=4), False)
    assert level.stable and level.throughput == 1000  # the median, not the last 3 merged
    assert level.latency is not None and level.latency.count == sum(NOISY[1:])  # pooled
    stored = level.measured()
    assert stored.stable is True and stored.extra["windows"] == 10
    assert stored.to_json()["extra"][measure.INTERVAL] == {
        "throughput": [990.0, 1015.0],
        "latency": [1000.0, 1000.0],
        "windows": 9,
        "confidence": 0.9609,
        "settled_by": "interval",
    }
    # The spreads are still perf_analyzer's, over the last 3 windows.
    assert stored.extra["throughput_spread"] == pytest.approx(1015 / 800 - 1)


def test_a_level_settled_by_the_rule_is_merged_as_perf_analyzer_merges_it() -> None:
    counts = [500, 700, 1000, 1010, 1020]
    level = merge_level(4, _windows(counts), SweepParams(model="m", start=4, end=4), False)
    assert level.stable and level.throughput == pytest.approx(3030 / 3)
    interval = measure.interval_of(level.measured())
    assert interval is not None and interval.settled_by == "rule" and interval.windows == 3
    assert (interval.low, interval.high) == (1000, 1020)


def test_a_level_that_never_settles_is_kept_with_its_interval() -> None:
    wild = [500, 400, 1600, 900, 2000, 700, 1500, 600, 1800, 1000]
    level = merge_level(4, _windows(wild), SweepParams(model="m", start=4, end=4), False)
    assert not level.stable and level.throughput == 1000
    interval = measure.interval_of(level.measured())
    assert interval is not None and interval.settled_by is None
    assert (interval.low, interval.high, interval.windows) == (600, 1800, 9)


def test_rows_stored_before_intervals_read_without_one() -> None:
    assert measure.interval_of({"level": 1, "extra": {"windows": 3}}) is None
    assert measure.interval_of({"level": 1, "extra": None}) is None
    assert measure.interval_of({"extra": {"interval": {"throughput": "x"}}}) is None
    old = measure.Level.from_json({"level": 2, "throughput": 10.0, "extra": {"windows": 3}})
    assert measure.interval_of(old) is None


def test_rounds_span_their_intervals_and_keep_the_busiest_machine() -> None:
    def round_fields(low: float, high: float, by: str | None, busy: float) -> dict[str, Any]:
        return {
            "throughput": (low + high) / 2, "p95_us": 1000.0, "requests": 100, "stable": True,
            "extra": {
                "windows": 9,
                "interval": {"throughput": [low, high], "latency": [990.0, 1010.0],
                             "windows": 9, "confidence": 0.9609, "settled_by": by},
                "host": {"cpus": 2, "busy": busy, "steal": 0.0, "noisy": busy >= 0.9},
            },
        }  # fmt: skip

    rounds = [
        repeats.round_record(1, round_fields(990, 1010, "rule", 0.5)),
        repeats.round_record(2, round_fields(950, 1030, "interval", 0.95)),
    ]
    merged = repeats.merge_rounds(rounds, "p95_us", round_fields(1, 2, "rule", 0.1)["extra"])
    assert merged["extra"]["interval"] == {
        "throughput": [950, 1030],
        "latency": [990.0, 1010.0],
        "windows": 18,
        "confidence": 0.9609,
        "settled_by": "interval",
    }
    assert merged["extra"]["host"]["busy"] == 0.95
    # A round without an interval (perf_analyzer's): the merged row has none.
    bare = repeats.round_record(3, {"throughput": 1000.0, "extra": {"windows": 3}})
    assert "interval" not in repeats.merge_rounds([*rounds, bare], "p95_us")["extra"]


# --- the busy-host signal -------------------------------------------------------------------


def test_the_cpu_counters_are_read_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 10 3 2 30 0 0\ncpu0 1 2 3 4\n")
    assert host_load.read_cpu(stat) == (1000, 810, 30)  # total, idle + iowait, steal
    stat.write_text("cpu  100 0 50 850\n")  # an old kernel: fewer columns
    assert host_load.read_cpu(stat) == (1000, 850, 0)
    assert host_load.read_cpu(tmp_path / "missing") is None


def test_a_level_on_a_busy_machine_is_flagged() -> None:
    start = host_load.Sample(total=1000, idle=500, steal=0, own_cpu_s=1.0, at=0.0)
    busy_end = host_load.Sample(total=2000, idle=540, steal=10, own_cpu_s=1.5, at=5.0)
    load = host_load.between(start, busy_end, workers_cpu_s=2.5, triton_local=True)
    assert load is not None and load.busy == pytest.approx(0.96) and load.noisy
    assert load.steal == pytest.approx(0.01)
    cpus = load.cpus
    assert load.load_generator == pytest.approx(min(1.0, (2.5 + 0.5) / (5.0 * cpus)))
    quiet_end = host_load.Sample(total=2000, idle=1100, steal=0, own_cpu_s=1.1, at=5.0)
    quiet = host_load.between(start, quiet_end, workers_cpu_s=None, triton_local=False)
    assert quiet is not None and not quiet.noisy and quiet.load_generator is None
    stolen_end = host_load.Sample(total=2000, idle=1100, steal=80, own_cpu_s=1.1, at=5.0)
    stolen = host_load.between(start, stolen_end, workers_cpu_s=None, triton_local=False)
    assert stolen is not None and stolen.noisy  # 8% steal
    assert host_load.between(None, busy_end, workers_cpu_s=None, triton_local=True) is None


def test_tritons_address_is_local_only_when_it_names_this_machine() -> None:
    for url in ("127.0.0.1:8001", "localhost:8001", "[::1]:8001", "http://127.0.0.2:8000",
                "0.0.0.0:8001"):  # fmt: skip
        assert host_load.is_local(url), url
    for url in ("triton:8001", "10.0.0.7:8001", "gpu-box.example.com:8001", "[2001:db8::1]:1"):
        assert not host_load.is_local(url), url


# --- stored sweeps: export and page ---------------------------------------------------------


def _stored_sweep(*, with_intervals: bool, busy: bool = False) -> Sweep:
    params = dataclasses.asdict(SweepParams(model="add_batched", start=1, end=2, max_windows=10))
    sweep = Sweep.objects.create(
        model="add_batched", server="t:8001", params=params, engine="builtin",
        state=Sweep.State.SUCCEEDED, levels_total=2,
    )  # fmt: skip
    for level, tput, low, high in ((1, 1000.0, 950.0, 1040.0), (2, 1900.0, 1800.0, 1990.0)):
        extra: dict[str, Any] = {"windows": 10, "throughput_spread": 0.2, "latency_spread": 0.1}
        if with_intervals:
            extra["interval"] = {"throughput": [low, high], "latency": [980.0, 1020.0],
                                 "windows": 9, "confidence": 0.9609, "settled_by": None}  # fmt: skip
        if busy:
            extra["host"] = {"cpus": 2, "busy": 0.98, "steal": 0.0, "load_per_cpu": 2.5,
                             "load_generator": 0.35, "triton_local": True}  # fmt: skip
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=SweepPoint.LEVEL, throughput=tput, requests=900,
            p50_us=900, p90_us=950, p95_us=1000, p99_us=1100, avg_us=920, stable=False,
            extra=extra,
        )  # fmt: skip
    from profiler_app import sweep_read

    Sweep.objects.filter(pk=sweep.pk).update(summary=sweep_read.knee_summary(sweep))
    sweep.refresh_from_db()
    return sweep


@pytest.mark.django_db
def test_the_csv_adds_each_levels_interval_after_perf_analyzers_columns() -> None:
    rows = list(csv.DictReader(io.StringIO(export.to_csv(_stored_sweep(with_intervals=True)))))
    assert list(rows[0]) == [*CSV_COLUMNS, *export.INTERVAL_CSV_COLUMNS]
    assert [(r["Concurrency"], r["Throughput Low"], r["Throughput High"]) for r in rows] == [
        ("1", "950", "1040"),
        ("2", "1800", "1990"),
    ]
    assert rows[0]["Latency Low"] == "980" and rows[0]["Interval Windows"] == "9"
    assert rows[0]["Interval Confidence"] == "0.9609" and rows[0]["Settled By"] == ""
    # Sweeps without intervals (perf_analyzer's, stored before) keep perf_analyzer's columns.
    plain = export.to_csv(_stored_sweep(with_intervals=False))
    assert next(csv.reader(io.StringIO(plain))) == CSV_COLUMNS


@pytest.mark.django_db
def test_the_json_export_and_the_summary_text_carry_the_interval() -> None:
    sweep = _stored_sweep(with_intervals=True, busy=True)
    data = json.loads(json.dumps(export.to_json(sweep)))
    levels = [p for p in data["points"] if p["window"] == -1]
    assert levels[0]["extra"]["interval"]["throughput"] == [950.0, 1040.0]
    assert data["sweep"]["summary"]["sureness"] == "unsure"
    assert data["sweep"]["summary"]["host_note"].startswith("The host itself is the noise")
    text = export.summary_text(sweep)
    assert "    Interval: 950.00..1040.00 infer/sec (96% over 9 windows; did not settle)" in text
    assert "Unsure: no level settled" in text and "The host itself is the noise" in text


@pytest.fixture()
def viewer(django_user_model, client, redis_db):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("vera", password="pw-vera-1")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_the_page_shows_the_answer_how_sure_it_is_the_busy_host_and_the_budget(viewer) -> None:
    sweep = _stored_sweep(with_intervals=True, busy=True)
    text = html.unescape(viewer.get(f"/sweeps/{sweep.pk}/").content.decode())
    assert (
        "No level settled within 10 windows, so this is read from what was measured: "
        "concurrency 2 gives 1,900 ± 100 infer/s at p95 1.00 ms;"
    ) in text
    sureness = text.split('<p id="verdict-sureness" class="small" >')[1].split("</p>")[0]
    assert sureness.startswith("Unsure: no level settled, so this is read from what was")
    note = text.split('<p id="host-note" class="warning" >')[1].split("</p>")[0]
    assert note.startswith("The host itself is the noise: during concurrency 1–2")
    assert '<span id="level-budget">(each level measures up to 10 s)</span>' in text
    # The page's data carries each level's interval, for the table and the error bars.
    # (PostgreSQL's jsonb orders keys and may drop ".0": match the pair, not the layout.)
    assert re.search(r'"interval": \{[^}]*"throughput": \[950(\.0)?, 1040(\.0)?\]', text), text


@pytest.mark.django_db
def test_a_sweep_stored_before_intervals_renders_as_before(viewer) -> None:
    sweep = _stored_sweep(with_intervals=False)
    summary = {"recommendation": "No level settled within 10 windows, so there is nothing "
               "to recommend.", "caveat": "Levels 1–2 did not settle."}  # fmt: skip
    Sweep.objects.filter(pk=sweep.pk).update(summary=summary)  # an older verdict, as stored
    text = html.unescape(viewer.get(f"/sweeps/{sweep.pk}/").content.decode())
    assert "so there is nothing to recommend." in text
    assert '<p id="verdict-sureness" class="small" hidden></p>' in text
    assert '<p id="host-note" class="warning" hidden></p>' in text


# --- the page in a real browser -------------------------------------------------------------


def _finished_busy_sweep() -> Sweep:
    """Levels 1 and 3 settled by the rule, 2 within its interval, 4 did not settle; the
    machine was busy during 3 and 4."""
    from profiler_app import jobs, sweeps
    from registry import servers

    params = SweepParams(model="add_batched", start=1, end=4, max_windows=10)
    sweep = sweeps.create_sweep(servers.default(), params, enqueue=False)
    for level, tput, low, high, by, busy in [
        (1, 1000, 995, 1010, "rule", 0.6), (2, 1900, 1850, 1960, "interval", 0.8),
        (3, 2600, 2580, 2610, "rule", 0.97), (4, 2900, 2300, 3400, None, 0.99),
    ]:  # fmt: skip
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=SweepPoint.LEVEL, requests=300, throughput=tput,
            p95_us=1000 + 100 * level, p50_us=900, p99_us=1500, stable=by is not None,
            extra={
                "windows": 3 if by == "rule" else 10, "throughput_spread": 0.2,
                "interval": {"throughput": [low, high], "latency": None, "windows": 9,
                             "confidence": 0.9609, "settled_by": by},
                "host": {"cpus": 2, "busy": busy, "steal": 0.0, "load_generator": 0.3,
                         "triton_local": True},
            },
        )  # fmt: skip
    assert jobs.claim(sweep.pk)
    jobs.finish(sweep.pk, jobs.Outcome("succeeded", ""))
    return sweep


@pytest.mark.integration
@pytest.mark.browser
def test_the_levels_table_and_chart_show_each_levels_interval(
    browser, web_server, admin_credentials
) -> None:
    from .conftest import login, wait_js

    sweep = _finished_busy_sweep()
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
        wait_js(page, "document.querySelectorAll('#levels-table tr[data-level]').length === 4")
        cells = page.evaluate(
            "[...document.querySelectorAll('#levels-table tr[data-level]')]"
            ".map(r => [r.cells[1].textContent, r.cells[10].textContent])"
        )
        assert cells == [
            ["1000.0 ± 10.0", "yes"],
            ["1900.0 ± 60.0", "within ±3%"],
            ["2600.0 ± 20.0", "yes"],
            ["2900.0 ± 600.0", "no (spread 20%)"],
        ]
        busy = page.evaluate(
            "[...document.querySelectorAll('#levels-table .host-busy')].map(e => e.textContent)"
        )
        assert busy == ["host 97% busy", "host 99% busy"]
        bars = page.evaluate("document.getElementById('chart-throughput').data[0].error_y")
        assert bars["symmetric"] is False and bars["array"] == [10, 60, 10, 500]
        assert bars["arrayminus"] == [5, 50, 20, 600]
        assert page.is_visible("#host-note") and page.is_visible("#verdict-sureness")
        assert (page.text_content("#host-note") or "").startswith(
            "The host itself is the noise: during concurrency 3–4"
        )
        assert (page.text_content("#verdict-sureness") or "").startswith("Unsure: level 4")
    finally:
        context.close()
