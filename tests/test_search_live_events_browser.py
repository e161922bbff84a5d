"""The config search page draws from its events alone: each candidate's levels, the
ranking, and what a run changes in the search (a budget taken from the current config's
knee, the restore's message: `search.changed`); in a real browser the page fetches its
snapshot over HTTP (data.json) once when it opens, then only on a gap in the events'
sequence or an event type it does not know."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from profiler_app import jobs, sweep_read, sweeps
from profiler_app.models import Search, SearchCandidate, Sweep
from profiler_app.search import reading, runner
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space
from registry import servers
from repository_app import events

from .conftest import login, wait_for, wait_js
from .test_sweep_live_events_browser import counting_data_fetches

ONE = Knobs(1, "KIND_CPU", 0, False)  # the current config
TWO = Knobs(2, "KIND_CPU", 0, False)
POINTS = "document.getElementById('chart-pareto').data[0].x.length"
# The current config's knee is at concurrency 2 (11 ms): the budget is twice that.
BASELINE = [(1, 100.0, 10_000.0), (2, 180.0, 11_000.0), (4, 185.0, 20_000.0)]
BUDGET = "p95 ≤ 22 ms"


def _levels(rows: list[tuple[int, float, float]]) -> list[dict[str, Any]]:
    return [{"concurrency": c, "throughput": t, "p95_us": p, "requests": 100} for c, t, p in rows]


def _running_search() -> Search:
    """A running search without a budget (it takes one from the current config's knee):
    the current config measured, the other candidate being measured."""
    now = timezone.now()
    carrier = Sweep.objects.create(
        model="m", server=servers.default().name, state="running", kind="search",
        queued_at=now, started_at=now, heartbeat_at=now,
        params={"model": "m", "start": 1, "end": 4, "budget_auto": True},
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model="m", mode="grid", objective="max_throughput",
        space=Space(counts=(1, 2)).to_json(), constraints=Constraints().to_json(),
        baseline=ONE.to_json(),
    )  # fmt: skip
    SearchCandidate.objects.create(
        search=search, key=ONE.key, seq=1, knobs=ONE.to_json(), baseline=True,
        state="measured", levels=_levels(BASELINE),
    )  # fmt: skip
    SearchCandidate.objects.create(search=search, key=TWO.key, seq=2, knobs=TWO.to_json())
    return Search.objects.select_related("sweep").get(pk=search.pk)


def _run(search: Search) -> runner._Run:
    """The runner's own publishing, without Triton (only what it reads)."""
    run = runner._Run.__new__(runner._Run)
    run.search, run.budget_auto = search, True
    run.params = sweeps.params_of(search.sweep)
    return run


@pytest.mark.django_db
def test_a_budget_from_the_knee_and_the_restore_message_come_as_events(monkeypatch):
    search = _running_search()
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        runner.events, "publish", lambda group, kind, data: sent.append((kind, data))
    )
    _run(search)._set_auto_budget(search.candidates.get(key=ONE.key))
    # The row's message, not the runner's copy (an earlier attempt's, or none).
    Search.objects.filter(pk=search.pk).update(restore_message="the model is unloaded again")
    runner.publish_changed(search)
    for kind, data in sent:
        events.check_event(kind, data)
    (budget_kind, budget), (_, restored) = sent
    assert budget_kind == "search.changed"
    assert budget["constraints_text"] == BUDGET and budget["constraints"]["latency_budget_ms"] == 22
    assert budget["budget_from"].startswith("twice the current config's p95")
    assert restored["restore_message"] == "the model is unloaded again"
    fresh = Search.objects.select_related("sweep").get(pk=search.pk)
    assert {k: reading.search_json(fresh)[k] for k in restored if k != "search"} == {
        k: v for k, v in restored.items() if k != "search"
    }, "the event carries what the snapshot says"


@pytest.mark.integration
@pytest.mark.browser
def test_candidates_ranking_and_changes_reach_the_page_by_event_and_only_a_gap_or_an_unknown_type_refetch(
    browser, web_server, admin_credentials
):
    search = _running_search()
    run = _run(search)
    context, page, fetches = counting_data_fetches(browser)

    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/searches/{search.pk}/")
        page.wait_for_selector("#live-status.ok")
        wait_for(lambda: page.evaluate("window.__dataFetches") >= 1, 120, "the fetch on open")
        wait_js(page, f"{POINTS} === 3")
        assert fetches() == 1

        # A level of the candidate being measured.
        two = search.candidates.get(key=TWO.key)
        live = {**reading.candidate_json(two, search), "levels": _levels([(1, 150, 9_000)])}
        runner.publish_candidate(search, live)
        wait_js(page, f"{POINTS} === 4")
        assert fetches() == 1, "data.json fetched after a level"

        # The budget taken from the current config's knee: its text and the chart's line.
        run._set_auto_budget(search.candidates.get(key=ONE.key))
        wait_js(page, f"document.getElementById('constraints').textContent === '{BUDGET}'")
        assert page.text_content("#budget-from").startswith("(budget: twice the current")
        assert page.evaluate("document.getElementById('chart-pareto').layout.shapes[0].x0") == 22
        assert fetches() == 1, "data.json fetched after the budget"

        # The candidate measured, then the ranking.
        SearchCandidate.objects.filter(pk=two.pk).update(
            state="measured", levels=_levels([(1, 150, 9_000), (2, 260, 10_000)])
        )
        run.publish_candidate(search.candidates.get(key=TWO.key))
        run.publish_result()
        first_row = "document.querySelector('#ranking tbody tr').dataset.key"
        wait_js(page, f"{first_row} === '{TWO.key}'")  # measured, it ranks first
        assert fetches() == 1, "data.json fetched after the ranking"

        # The end: the restore's message, the final state and ranking, by event alone.
        Search.objects.filter(pk=search.pk).update(restore_message="the model is unloaded")
        runner.publish_changed(search)
        Sweep.objects.filter(pk=search.sweep_id).update(
            state="succeeded", finished_at=timezone.now()
        )
        job = Sweep.objects.get(pk=search.sweep_id)
        jobs.publish_state(job)
        runner.SearchKind().ended(job, by_worker=True)
        wait_js(page, "document.getElementById('search-state').textContent === 'succeeded'")
        wait_js(page, "!document.getElementById('btn-apply-best').hidden")
        assert page.text_content("#restore-message") == "Restore: the model is unloaded"
        assert (
            page.text_content("#recommendation")
            == Search.objects.get(pk=search.pk).result["recommendation"]
        )
        assert fetches() == 1, "data.json fetched after the search ended"

        # A number taken by an event this page never sees: the next event reveals the gap.
        events.next_seq(search.sweep.group)
        runner.publish_result(search, Search.objects.get(pk=search.pk).result, "succeeded")
        wait_for(lambda: page.evaluate("window.__dataFetches") >= 2, 120, "the fetch on a gap")
        assert fetches() == 2

        # A type the page has no handler for: it reads the whole state instead.
        sweep_read.publish_summary(Sweep.objects.get(pk=search.sweep_id))
        wait_for(lambda: page.evaluate("window.__dataFetches") >= 3, 120, "the fetch on a type")
        assert fetches() == 3
    finally:
        context.close()
