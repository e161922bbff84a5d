"""Config search pages, the HTML report, Apply and the API (real Triton, no worker)."""

from __future__ import annotations

import re
import time

import pytest

from common.staticfinders import plotly_js
from profiler_app.models import Search, SearchCandidate, Sweep
from profiler_app.params import SweepParams
from profiler_app.search import creating, ranking, report, runner
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space
from registry import servers
from repository_app.models import ConfigRevision
from team.models import AuditEvent
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODEL = "busy_compute"


@pytest.fixture()
def client(triton) -> TritonClient:
    return TritonClient(triton.grpc_url, triton.metrics_url)


@pytest.fixture()
def busy(client, triton, redis_db):
    path = triton.repository / MODEL / "config.pbtxt"
    saved = path.read_bytes()
    client.load(MODEL)
    yield MODEL
    path.write_bytes(saved)
    client.unload(MODEL)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _finished_search(levels_by_key: dict[str, list[tuple[float, float, float]]]) -> Search:
    """A finished search with the given measured candidates (concurrency, infer/s, p95 µs)."""
    request = creating.SearchRequest(
        model=MODEL,
        space=Space(counts=(1, 2)),
        measure=SweepParams(model=MODEL, start=2, end=2, measurement_window_ms=300, max_windows=3),
        constraints=Constraints(latency_budget_ms=5, percentile=95),
        server=servers.default(),
        mode="grid",
    )
    search = creating.create_search(request, enqueue=False)
    for seq, (key, levels) in enumerate(levels_by_key.items(), start=1):
        count = int(key.split("x")[0])
        SearchCandidate.objects.create(
            search=search,
            key=key,
            seq=seq,
            knobs=Knobs(count, "KIND_CPU", 32, True, 200).to_json(),
            baseline=count == 1,
            state="measured",
            levels=[
                {"concurrency": c, "throughput": t, "p95_us": p, "avg_us": p, "p50_us": p}
                for c, t, p in levels
            ],
        )
    Sweep.objects.filter(pk=search.sweep_id).update(state="succeeded")
    Search.objects.filter(pk=search.pk).update(result=ranking.summarize(search))
    return Search.objects.select_related("sweep").get(pk=search.pk)


TWO = {
    "1xCPU/mbs32/dyn200p": [(2, 1000.0, 2000.0)],
    "2xCPU/mbs32/dyn200p": [(2, 1500.0, 1500.0)],
}


def test_the_ranking_and_recommendation_name_the_gain_over_the_current_config(busy):
    search = _finished_search(TWO)
    result = search.result
    assert [r["key"] for r in result["rows"]] == list(reversed(TWO))
    assert result["best_key"] == "2xCPU/mbs32/dyn200p"
    assert result["recommendation"].startswith("2 CPU instances with dynamic batching (200 µs)")
    assert "1.5× throughput" in result["recommendation"]
    assert "within the 5 ms budget" in result["recommendation"]
    assert result["front"] == [["2xCPU/mbs32/dyn200p", 2]]
    assert result["rows"][0]["diff"] == ["instances 1×CPU → 2×CPU"]
    assert result["rows"][0]["gpu_memory_bytes"] is None


def test_the_html_report_is_self_contained(busy, admin_client):
    search = _finished_search(TWO)
    page = report.build(search)
    bundle = plotly_js().read_text(encoding="utf-8")  # basic when installed, else the full one
    assert bundle[:2000] in page, "plotly.js is inlined"
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I), "no external script"
    ours = page.replace(bundle, "")  # plotly.js itself holds a link to its site
    assert not re.search(r"""(src|href)\s*=\s*["']https?://""", ours, re.I), "no external asset"
    assert "2xCPU/mbs32/dyn200p" in page and "count: 2" in page, "configs included"
    assert "Pareto front" in page and "1.5× throughput" in page
    response = admin_client.get(f"/searches/{search.pk}/report.html")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    assert response.content.decode() == page


def test_apply_saves_through_the_editor_path_and_reloads_the_model(busy, admin_client, client):
    search = _finished_search(TWO)
    response = admin_client.post(
        f"/searches/{search.pk}/apply",
        {"key": "2xCPU/mbs32/dyn200p"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200, response.content
    assert "reloaded" in response.json()["message"]
    revision = ConfigRevision.objects.filter(model=MODEL).order_by("-id").first()
    assert revision.source == "form" and f"config search #{search.pk}" in revision.message
    assert "count: 2" in revision.text
    assert AuditEvent.objects.filter(action="config.save", model_name=MODEL).exists()
    assert AuditEvent.objects.filter(action="search.apply", model_name=MODEL).exists()
    assert int(client.model_config(MODEL)["instance_group"][0]["count"]) == 2
    assert Search.objects.get(pk=search.pk).applied_key == "2xCPU/mbs32/dyn200p"


def test_apply_refuses_a_running_search_and_an_unmeasured_candidate(busy, admin_client):
    search = _finished_search(TWO)
    url = f"/searches/{search.pk}/apply"
    bad = admin_client.post(url, {"key": "9xCPU/nope"}, HTTP_ACCEPT="application/json")
    assert bad.status_code == 409 and "measured candidate" in bad.json()["message"]
    Sweep.objects.filter(pk=search.sweep_id).update(state="running")
    busy_reply = admin_client.post(
        url, {"key": "2xCPU/mbs32/dyn200p"}, HTTP_ACCEPT="application/json"
    )
    assert busy_reply.status_code == 409 and "wait for the search" in busy_reply.json()["message"]


def test_the_form_defaults_to_kind_cpu_without_gpus_and_explains_bad_spaces(busy, admin_client):
    page = admin_client.get(f"/models/{MODEL}/find-best-config/").content.decode()
    assert 'id="no-gpu"' in page
    assert re.search(r'<option value="KIND_CPU" selected>', page)
    assert "1 CPU instance with dynamic batching (200 µs)" in page
    response = admin_client.post(
        f"/models/{MODEL}/find-best-config/",
        {"mode": "grid", "kind": "KIND_CPU", "counts": "0:2", "batching_on": "on",
         "concurrency_range": "2", "measurement_interval": 300, "max_trials": 3,
         "stability_percentage": 100, "percentile": "95", "objective": "max_throughput"},
    )  # fmt: skip
    assert response.status_code == 200
    assert "instance counts must be between 1 and 64" in response.content.decode()
    assert not Search.objects.exists()


def test_the_form_takes_its_budget_from_a_benchmark_of_the_current_config(busy, admin_client):
    from profiler_app import sweeps
    from profiler_app.models import SweepPoint

    url = f"/models/{MODEL}/find-best-config/"
    assert "No sweep of the current config yet" in admin_client.get(url).content.decode()
    # A Benchmark of this very config.pbtxt on a busy machine: no level settled.
    sweep = sweeps.create_sweep(
        servers.default(), SweepParams(model=MODEL, start=1, end=4), enqueue=False
    )
    Sweep.objects.filter(pk=sweep.pk).update(state="succeeded")
    for level, tput, p95 in ((1, 900, 1100), (2, 1700, 1200), (4, 1750, 2400)):
        SweepPoint.objects.create(
            sweep=sweep, level=level, window=-1, requests=100, throughput=tput, p95_us=p95,
            stable=False,
        )  # fmt: skip
    page = admin_client.get(url).content.decode()
    assert "No sweep of the current config yet" not in page
    assert f"From sweep #{sweep.pk} of the current config" in page
    budget = re.search(r'<input[^>]*id="id_latency_budget"[^>]*>', page)
    assert budget is not None and 'value="2.4"' in budget.group(), "twice 1.2 ms at its knee"


def test_the_form_queues_a_search_and_the_detail_page_shows_it(busy, admin_client):
    response = admin_client.post(
        f"/models/{MODEL}/find-best-config/",
        {"mode": "grid", "kind": "KIND_CPU", "counts": "1:2", "batching_on": "on",
         "delays": "200", "preferred": "none", "concurrency_range": "2",
         "measurement_interval": 300, "max_trials": 3, "stability_percentage": 100,
         "percentile": "95", "latency_budget": 50, "objective": "max_throughput"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[-2000:]
    search = Search.objects.get()
    assert response["Location"] == f"/searches/{search.pk}/"
    # Queued, or already running when a worker from another test is up.
    # 2 candidates, then both re-measured in 3 rounds (the form's defaults: top 3 and the
    # current config, side by side before ranking).
    assert search.sweep.state in ("queued", "running") and search.sweep.levels_total == 2 + 2 * 3
    runner.cancel(search)  # queued: cancelled at once; running (a worker took it): stops
    _wait_for(lambda: Sweep.objects.get(pk=search.sweep_id).state == "cancelled", 60, "cancel")
    page = admin_client.get(f"/searches/{search.pk}/").content.decode()
    assert 'id="chart-pareto"' in page and f"/ws/sweeps/{search.sweep_id}/" in page
    data = admin_client.get(f"/searches/{search.pk}/data.json").json()
    assert data["search"]["state"] == "cancelled"
    assert all(c["state"] != "measured" or c["levels"] for c in data["candidates"])


def test_the_api_creates_lists_and_cancels_searches(busy, admin_client):
    body = {"model": MODEL, "mode": "grid", "counts": "1:2", "concurrency_range": "2",
            "measurement_interval": 300, "max_trials": 3, "stability_percentage": 100}  # fmt: skip
    created = admin_client.post("/api/v1/searches/", body, content_type="application/json")
    assert created.status_code == 201, created.content
    pk = created.json()["search"]["id"]
    assert [s["id"] for s in admin_client.get("/api/v1/searches/").json()] == [pk]
    cancelled = admin_client.post(f"/api/v1/searches/{pk}/cancel")
    assert cancelled.status_code == 200 and "Cancel" in cancelled.json()["message"]
    _wait_for(lambda: Search.objects.get(pk=pk).sweep.state == "cancelled", 60, "cancel")
    bad = admin_client.post(
        "/api/v1/searches/", {**body, "objective": "min_latency"}, content_type="application/json"
    )
    assert bad.status_code == 400 and "throughput floor" in bad.json()["message"]
