"""A sweep's self-contained HTML report (profiler_app.sweep_report), built from stored rows
only (nothing measured, no Triton): the verdict, the parameters, the server and its Triton
version, the dates and a chart per figure, no link outside the file; the sweep page links
it, the view offers it as a download to those who may see the sweep."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from common.staticfinders import plotly_js
from profiler_app import sweep_report
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from profiler_app.sweeps import params_to_json
from registry import servers
from registry.models import TritonServer
from team.narrowing_admin import narrow

pytestmark = pytest.mark.django_db

FACTS = {
    "server": "default", "grpc_url": "10.0.0.7:8001", "triton_version": "2.51.0",
    "gpu_count": 1, "gpus": [{"uuid": "GPU-a1", "memory_total_bytes": 80 * 2**30}],
    "gpu_metrics": True, "recorded_at": "2026-03-02T09:15:00+00:00",
}  # fmt: skip
CREATED = dt.datetime(2026, 3, 2, 9, 14, 30, tzinfo=dt.UTC)
FINISHED = dt.datetime(2026, 3, 2, 9, 21, 5, tzinfo=dt.UTC)
# (level, infer/s, p95 µs, settled)
LEVELS = [(1, 1000, 1000, True), (2, 1900, 1100, True), (3, 2000, 1500, False)]


def _stored_sweep(params: SweepParams | None = None, extra: dict | None = None, **row) -> Sweep:
    """A finished sweep as a run leaves it: its rows, its server's facts, its verdict."""
    params = params or SweepParams(model="add_batched", start=1, end=3, latency_threshold_ms=1.2)
    sweep = Sweep.objects.create(
        model=params.model, server="default", params=params_to_json(params), state="succeeded",
        server_facts=FACTS, config_text='name: "add_batched"\nmax_batch_size: 64\n',
        config_sha256="c0ffee", levels_total=params.level_count(), name="after the fp16 change",
        **row,
    )  # fmt: skip
    for level, tput, p95, stable in LEVELS:
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=SweepPoint.LEVEL, requests=300, throughput=tput,
            p50_us=p95 / 2, p95_us=p95, p99_us=p95 * 1.2, avg_us=p95 * 0.8,
            server_request_us=p95 / 2, queue_us=100, compute_infer_us=300, stable=stable,
            extra={"windows": 3, "throughput_spread": 0.01 if stable else 0.18, **(extra or {})},
        )  # fmt: skip
    summary = sweep_report.summary_of(sweep)  # as jobs.finish stores it
    Sweep.objects.filter(pk=sweep.pk).update(
        summary=summary, created_at=CREATED, started_at=CREATED, finished_at=FINISHED
    )
    return Sweep.objects.get(pk=sweep.pk)


def _ours(page: str) -> str:
    """The page without the inlined plotly.js (which names its own site)."""
    return page.replace(plotly_js().read_text(encoding="utf-8"), "")


def test_the_report_of_a_stored_sweep_holds_its_verdict_parameters_server_and_dates():
    sweep = _stored_sweep()
    page = sweep_report.build(sweep)
    recommendation = sweep.summary["recommendation"]
    assert recommendation.startswith("Concurrency 2 gives 1,900 infer/s")
    assert f'<strong id="recommendation">{recommendation}</strong>' in page
    assert "Level 3 did not settle" in page  # the caveat
    facts = re.search(r'<table id="facts">(.*?)</table>', page, re.S)
    assert facts is not None
    text = re.sub(r"<[^>]+>", " ", facts.group(1))
    assert "2.51.0, server default at 10.0.0.7:8001" in text
    assert "1 (80.0 GiB)" in text
    assert "concurrency 1:3:1 · batch 1 · grpc · windows 1000 ms" in text
    assert "latency threshold 1.2 ms" in text and "percentile p95" in text
    assert "created 2026-03-02 09:14:30 UTC" in text
    assert "finished 2026-03-02 09:21:05 UTC" in text
    assert f"Sweep #{sweep.pk} after the fp16 change · add_batched" in page
    assert "max_batch_size: 64" in page  # the config it started with


def test_each_figure_has_its_chart_and_nothing_links_outside_the_file():
    page = sweep_report.build(_stored_sweep())
    drawn = json.loads(re.search(r"const FIGURES = (.*);\n", page).group(1))  # type: ignore[union-attr]
    assert list(drawn) == ["throughput", "latency", "tput_latency", "breakdown"]
    for name in drawn:
        assert page.count(f'<div id="{name}" class="chart"></div>') == 1
        assert f'Plotly.newPlot("{name}", FIGURES.{name}.data' in page
    # A level that did not settle is hollow, as on the page; the knee and the budget line.
    assert drawn["throughput"]["data"][0]["marker"]["symbol"] == ["circle", "circle", "circle-open"]
    assert drawn["throughput"]["data"][1]["x"] == [2.0]
    assert drawn["latency"]["layout"]["shapes"][0]["y0"] == 1.2
    assert plotly_js().read_text(encoding="utf-8")[:2000] in page, "plotly.js is inlined"
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I), "no external script"
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", _ours(page), re.I)


def test_a_streaming_sweep_with_goodput_and_counted_tokens_gets_their_charts():
    params = SweepParams(
        model="stream_tok", start=1, end=3, streaming=True, goodput="first_response:50",
        token_output="TOKENS",
    )  # fmt: skip
    extra = {
        "goodput": 800.0, "good_share": 0.9, "response_throughput": 9000.0,
        "first_response_p50_us": 20000.0, "inter_response_p95_us": 4000.0,
        "output_token_throughput": 9000.0, "output_token_throughput_per_user": 250.0,
    }  # fmt: skip
    sweep = _stored_sweep(params, extra, model_kind="decoupled")
    names = list(sweep_report.figures(sweep, sweep_report.levels_of(sweep), sweep.summary))
    assert names == [
        "throughput", "latency", "tput_latency", "breakdown", "goodput", "first_response",
        "inter_response", "responses", "tokens", "tokens_per_user",
    ]  # fmt: skip
    page = sweep_report.build(sweep)
    assert all(f'<div id="{name}" class="chart">' in page for name in names)
    assert "goodput first_response:50 ms" in page and "grpc streaming" in page


def test_a_sequence_sweep_of_the_built_in_engine_gets_its_position_charts():
    params = SweepParams(model="seq_accumulate", start=1, end=3)
    extra = {"first_throughput": 100.0, "middle_p95_us": 900.0, "last_p95_us": 1100.0}
    sweep = _stored_sweep(params, extra, model_kind="sequence (direct)")
    names = list(sweep_report.figures(sweep, sweep_report.levels_of(sweep), sweep.summary))
    assert names[-2:] == ["position_throughput", "position_latency"]
    assert "length 20 ± 20% · ids from 1" in sweep_report.build(sweep)


def test_a_queued_sweep_without_levels_has_a_report_that_says_so():
    params = SweepParams(model="add_batched", start=1, end=3)
    sweep = Sweep.objects.create(
        model="add_batched", server="default", params=params_to_json(params), state="queued"
    )
    page = sweep_report.build(sweep)
    assert "No level completed, so there is nothing to recommend." in page
    assert "version not recorded, server default" in page and "started not yet" in page
    assert '<div id="throughput" class="chart"></div>' in page
    assert "(no config.pbtxt was recorded)" in page


def test_what_users_typed_is_escaped():
    sweep = _stored_sweep()
    Sweep.objects.filter(pk=sweep.pk).update(
        name="<script>alert(1)</script>", note="</script><img src=x onerror=alert(2)>"
    )
    page = sweep_report.build(Sweep.objects.get(pk=sweep.pk))
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_page_links_the_report_and_the_view_offers_it_as_a_download(admin_client, redis_db):
    sweep = _stored_sweep()
    detail = admin_client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert f'href="/sweeps/{sweep.pk}/report.html" id="export-report"' in detail
    response = admin_client.get(f"/sweeps/{sweep.pk}/report.html")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="sweep-{sweep.pk}-add_batched.html"'
    )
    assert response.content.decode() == sweep_report.build(sweep)


def test_a_search_jobs_report_is_the_searchs(admin_client):
    from profiler_app.models import Search

    carrier = Sweep.objects.create(
        model="busy_compute", server="default", kind=Sweep.Kind.SEARCH, state="succeeded",
        params={"model": "busy_compute"}, finished_at=timezone.now(),
    )  # fmt: skip
    search = Search.objects.create(sweep=carrier, model="busy_compute")
    response = admin_client.get(f"/sweeps/{carrier.pk}/report.html")
    assert response.status_code == 302
    assert response["Location"] == f"/searches/{search.pk}/report.html"


def test_no_report_of_a_sweep_on_a_server_hidden_from_the_user(tmp_path: Path, settings):
    settings.TRITON_TIMEOUT_S = 0.3
    row = TritonServer(
        name="far", grpc_url="127.0.0.2:1", http_url="127.0.0.2:2",
        metrics_url="http://127.0.0.2:3/metrics", repository=str(tmp_path),
    )  # fmt: skip
    row.full_clean()
    row.save()
    assert servers.get("far")
    users = get_user_model().objects
    admin = users.create_superuser("ada", password="pw-ada-secret-1")
    olga = users.create_user("olga", password="pw-olga-secret-1")
    narrow(admin, olga, server="far", role="none")
    sweep = _stored_sweep()
    Sweep.objects.filter(pk=sweep.pk).update(server="far")
    client = Client()
    client.force_login(olga)
    assert client.get(f"/sweeps/{sweep.pk}/report.html").status_code == 404
    assert Client().get(f"/sweeps/{sweep.pk}/report.html").status_code == 302  # to log in
