"""Against the real tritonserver: a search with no budget takes it from the current config,
re-measures its top candidates side by side, and reports which Triton ran it.

Levels are forced not to settle (a stability percentage of 0.001%), so every measurement
takes exactly max windows: the test asserts the protocol and the stored shape, never how
fast a candidate was."""

from __future__ import annotations

import pytest

from profiler_app import jobs
from profiler_app.models import Search
from profiler_app.params import SweepParams
from profiler_app.search import confirm, creating, report
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Space
from registry import servers
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODEL = "busy_compute"


@pytest.fixture()
def busy(triton, redis_db):
    client = TritonClient(triton.grpc_url, triton.metrics_url)
    client.load(MODEL)
    yield MODEL
    client.unload(MODEL)


def test_a_search_without_a_budget_re_measures_its_top_candidates_and_reports_its_triton(busy):
    request = creating.SearchRequest(
        model=MODEL,
        space=Space(counts=(1, 2), delays_us=(200,)),
        measure=SweepParams(
            model=MODEL,
            start=2,
            end=2,
            measurement_window_ms=200,
            stability_percentage=0.001,
            max_windows=3,
        ),  # fmt: skip
        constraints=Constraints(latency_budget_ms=None, percentile=95),
        server=servers.default(),
        mode="grid",
        confirm_top=1,
        confirm_rounds=2,
        budget_auto=True,
    )
    search = creating.create_search(request, enqueue=False)
    # 2 candidates, then the top one and the current config twice each.
    assert search.sweep.levels_total == 2 + 2 * 2
    assert jobs.claim(search.sweep_id)
    assert jobs.execute(search.sweep_id) == "succeeded"
    search = Search.objects.select_related("sweep").get(pk=search.pk)
    # The budget: twice the current config's p95 at the knee of what it measured (one level).
    assert search.constraints["latency_budget_ms"] > 0
    assert search.constraints["budget_from"].startswith("twice the current config's p95")
    candidates = list(search.candidates.all())
    assert len(candidates) == 2
    for candidate in candidates:  # the top other one and the current config: both again
        assert [r["round"] for r in candidate.rounds] == [1, 2], candidate.rounds
        # Each round holds its levels, or says why it has none (the protocol, not the load).
        assert all(r.get("levels") or r.get("error") for r in candidate.rounds)
    result = search.result
    good = {c.key: len(confirm.good_rounds(c.rounds)) for c in candidates}
    assert len(result["rows"]) == 2 and result["re_measured"] == sum(n >= 2 for n in good.values())
    assert all(r["rounds"] == good[r["key"]] for r in result["rows"])
    assert result["best_point"] is not None and result["best_point"][1] == 2
    env = search.environment
    assert env["triton_version"] and env["server"] == search.sweep.server
    assert env["gpus"] == [] and env["cpu_count"]
    page = report.build(search)
    assert f"{env['triton_version']} at {env['grpc_url']}" in page
    assert "Latency breakdown at each candidate" in page and "p95 ≤ " in page
    assert "alternating rounds" in page and "GPU memory (MB)" not in page  # no GPU here
