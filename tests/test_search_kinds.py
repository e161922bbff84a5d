"""Config search for sequence and decoupled models, without Triton: the space a sequence
model gets (its sequence batcher kept), the metrics a candidate is judged on (responses/s,
tokens/s, goodput; the first-response time), the entries that fit each kind (refused on
their field otherwise), and stored searches that read as before."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from tritonclient.grpc import model_config_pb2 as pb

from profiler_app import jobs, kind_presets, measure, sweeps
from profiler_app.model_kind import kind_of
from profiler_app.models import Search, SearchCandidate, Sweep
from profiler_app.search import (
    confirm,
    creating,
    defaults,
    ranking,
    reading,
    report,
    runner,
    target,
)
from profiler_app.search.forms import SearchForm
from profiler_app.search.objective import Constraints, metrics_for, score
from profiler_app.search.space import Knobs, Space, SpaceError, apply, check_scheduler, knobs_of
from registry import servers
from repository_app.modelconfig import parse_config
from team.roles import OPERATOR, set_role
from triton_api.client import TritonError

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


def _config(name: str, text: str | None = None) -> pb.ModelConfig:
    parsed = parse_config(text if text is not None else (DEMO / name / "config.pbtxt").read_text())
    assert parsed.config is not None
    return parsed.config


OLDEST = (
    (DEMO / "seq_accumulate" / "config.pbtxt")
    .read_text()
    .replace(
        "direct { }", "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 200 }"
    )
)


# --- the space of a sequence model ------------------------------------------------------------


def test_a_sequence_model_s_knobs_keep_its_sequence_batcher():
    direct = knobs_of(_config("seq_accumulate"))
    assert direct == Knobs(1, "KIND_CPU", 8, False, sequence="direct")
    assert direct.key == "1xCPU/mbs8/seq-direct"
    assert direct.describe() == "1 CPU instance with sequence batching (direct), max batch 8"
    oldest = knobs_of(_config("seq_accumulate", OLDEST))
    assert oldest.key == "1xCPU/mbs8/seq-oldest200"
    assert Knobs.from_json(oldest.to_json()) == oldest
    # A stateless model's knobs are stored as they always were (no "sequence" entry).
    assert "sequence" not in Knobs(1, "KIND_CPU", 8, True, 100).to_json()


@pytest.mark.parametrize("text", [None, OLDEST], ids=["direct", "oldest"])
def test_every_candidate_of_a_sequence_model_keeps_its_sequence_batching(text):
    base = _config("seq_accumulate", text)
    current = knobs_of(base)
    # Whatever the space asks for (dynamic batching on, preferred sizes, delays), the grid
    # of a sequence model has no dynamic batching and applies onto its sequence batcher.
    space = Space(
        counts=(1, 2),
        max_batch_sizes=(4, 8),
        batching_off=True,
        batching_on=True,
        delays_us=(0, 500),
        preferred=((), (4,)),
    )
    grid = space.dimensions(current).grid()
    assert len(grid) == 2 * 2 * (2 if current.sequence == "oldest" else 1)
    for knobs in grid:
        assert knobs.sequence == current.sequence and not knobs.batching
        config = apply(base, knobs)
        assert not config.HasField("dynamic_batching")
        kept = pb.ModelSequenceBatching()
        kept.CopyFrom(config.sequence_batching)
        if current.sequence == "oldest":
            assert kept.oldest.max_queue_delay_microseconds == knobs.delay_us
            original = base.sequence_batching.oldest.max_queue_delay_microseconds
            kept.oldest.max_queue_delay_microseconds = original
        assert kept == base.sequence_batching, "nothing else of the sequence batcher changes"
        assert config.max_batch_size == knobs.max_batch_size
        assert config.instance_group[0].count == knobs.count


def test_a_candidate_that_would_lose_or_change_the_sequence_batching_is_impossible():
    base = _config("seq_accumulate")
    with pytest.raises(SpaceError, match="does not fit the model's scheduler"):
        apply(base, Knobs(2, "KIND_CPU", 8, True, 100))  # dynamic batching on it
    with pytest.raises(SpaceError, match="does not fit"):
        apply(base, Knobs(2, "KIND_CPU", 8, False))  # a stateless candidate
    with pytest.raises(SpaceError, match="does not fit"):
        apply(base, Knobs(2, "KIND_CPU", 8, False, 100, sequence="oldest"))  # other strategy
    with pytest.raises(SpaceError, match="does not fit"):  # sequence knobs, stateless model
        apply(_config("busy_compute"), Knobs(1, "KIND_CPU", 8, False, sequence="direct"))
    # The last check, on the configs themselves.
    lost = pb.ModelConfig()
    lost.CopyFrom(base)
    lost.ClearField("sequence_batching")
    changed = pb.ModelConfig()
    changed.CopyFrom(base)
    changed.sequence_batching.max_sequence_idle_microseconds = 1
    both = pb.ModelConfig()
    both.CopyFrom(base)
    both.dynamic_batching.max_queue_delay_microseconds = 100
    for config in (lost, changed, both):
        with pytest.raises(SpaceError, match="must keep its sequence_batching"):
            check_scheduler(base, config)
    check_scheduler(base, apply(base, knobs_of(base)))


# --- the metrics a candidate is judged on -----------------------------------------------------

FIRST_BUDGET = Constraints(first_response_budget_ms=30, percentile=95)
STREAM = metrics_for("max_response_throughput", FIRST_BUDGET, streaming=True)


def _stream_level(level: float, infer_s: float, responses_s: float, first_us: float, **extra):
    return measure.Level(
        level,
        infer_s,
        requests=100,
        p95_us=first_us * 3,
        extra={"response_throughput": responses_s, "first_response_p95_us": first_us, **extra},
    )


def _score(levels, c=FIRST_BUDGET, objective_name="max_response_throughput", m=STREAM):
    points = [p for p in (m.point(lv, c) for lv in levels) if p is not None]
    return score(points, c, objective_name, None, m)


def test_the_metrics_are_named_by_the_objective_and_what_streams():
    c = Constraints(percentile=99)
    plain = metrics_for("max_throughput", c)
    assert (plain.throughput.unit, plain.latency.key, plain.latency.label) == (
        "infer/s", "p99_us", "p99",
    )  # fmt: skip
    streams = metrics_for("max_response_throughput", c, streaming=True)
    assert streams.throughput.key == "response_throughput"
    assert streams.throughput.text(1234.4) == "1,234 responses/s"
    assert streams.latency.key == "first_response_p99_us"
    assert streams.latency.label == "first response p99"
    assert metrics_for(
        "max_response_throughput", c, streaming=True, tokens=True
    ).throughput.unit == ("tokens/s")
    assert metrics_for("max_goodput", c).throughput.key == "goodput"


def test_max_response_throughput_within_a_first_response_budget():
    levels = [
        _stream_level(1, 40, 320, 21_000),
        _stream_level(2, 70, 560, 26_000),
        _stream_level(4, 90, 720, 45_000),  # more responses, but the first comes too late
    ]
    s = _score(levels)
    assert s.feasible and s.objective == 560 and s.level.concurrency == 2
    late = _score([_stream_level(4, 90, 720, 45_000)])
    assert not late.feasible
    assert late.reason == "first response p95 over the 30 ms first-response budget"
    assert s.better_than(late)
    # A request-latency budget applies to the time to the final response beside it.
    both = Constraints(first_response_budget_ms=30, latency_budget_ms=70)
    assert _score(levels, both).level.concurrency == 1  # p95 78 ms at concurrency 2
    # Ties on responses/s: the lower first-response time wins.
    tie = _score([_stream_level(1, 40, 560, 25_000), _stream_level(2, 70, 560, 22_000)])
    assert tie.level.concurrency == 2


def test_goodput_zero_is_a_miss_and_min_latency_reads_the_first_response():
    c = Constraints(percentile=95)
    m = metrics_for("max_goodput", c, streaming=True)
    none_good = _score([_stream_level(1, 40, 320, 21_000, goodput=0.0)], c, "max_goodput", m)
    assert not none_good.feasible and "no request met the goodput objectives" in none_good.reason
    good = _score(
        [_stream_level(1, 40, 320, 21_000, goodput=30.0), _stream_level(2, 70, 560, 26_000,
         goodput=35.0)], c, "max_goodput", m,
    )  # fmt: skip
    assert good.feasible and good.objective == 35 and good.better_than(none_good)
    floor = Constraints(min_throughput=50)
    m = metrics_for("min_latency", floor, streaming=True)
    fast = _score(
        [_stream_level(1, 40, 320, 21_000), _stream_level(2, 70, 560, 26_000)], floor,
        "min_latency", m,
    )  # fmt: skip
    assert fast.feasible and fast.objective == 26_000, "the lowest first response at the floor"


def test_a_first_response_budget_on_levels_that_did_not_stream_is_a_miss():
    level = measure.Level(1, 100, requests=10, p95_us=1000)
    m = metrics_for("max_throughput", FIRST_BUDGET)
    s = _score([level], FIRST_BUDGET, "max_throughput", m)
    assert not s.feasible and s.reason == "first response p95 not measured"


def test_re_measured_streaming_candidates_keep_their_stream_figures_as_medians():
    rounds = [
        {"round": n, "levels": [measure.search_json(_stream_level(2, 70, r, f))]}
        for n, (r, f) in enumerate([(500, 20_000), (560, 24_000), (600, 22_000)], start=1)
    ]
    (level,) = confirm.median_levels(rounds)
    assert level["extra"]["response_throughput"] == 560
    assert level["extra"]["first_response_p95_us"] == 22_000
    spread = confirm.objective_spread(rounds, lambda levels: _score(
        [measure.Level.from_json(lv) for lv in levels]))  # fmt: skip
    assert spread is not None and spread.median == 560


# --- stored searches --------------------------------------------------------------------------


def _stored_search(objective_name: str, params: dict[str, Any], constraints: dict[str, Any],
                   levels: dict[Knobs, list[dict[str, Any]]]) -> Search:  # fmt: skip
    carrier = Sweep.objects.create(
        model="m", server="x", state="succeeded", finished_at=timezone.now(), kind="search",
        params={"model": "m", "start": 2, "end": 2, **params},
    )  # fmt: skip
    knobs = list(levels)
    search = Search.objects.create(
        sweep=carrier, model="m", mode="grid", objective=objective_name,
        space=Space(counts=(1, 2)).to_json(), constraints=constraints,
        baseline=knobs[0].to_json(),
    )  # fmt: skip
    for seq, (k, rows) in enumerate(levels.items(), start=1):
        SearchCandidate.objects.create(
            search=search, key=k.key, seq=seq, knobs=k.to_json(), baseline=seq == 1,
            state="measured", levels=rows,
        )  # fmt: skip
    return Search.objects.select_related("sweep").get(pk=search.pk)


ONE = Knobs(1, "KIND_CPU", 0, False)
TWO = Knobs(2, "KIND_CPU", 0, False)


@pytest.mark.django_db
def test_an_old_stored_search_reads_as_before():
    # As stored before: levels saying `concurrency`, no streaming flag, no first-response key.
    old = {"latency_budget_ms": 5, "percentile": 95, "min_throughput": None,
           "gpu_memory_limit_mb": None}  # fmt: skip
    search = _stored_search(
        "max_throughput", {}, old,
        {ONE: [{"concurrency": 2, "throughput": 1000.0, "p95_us": 2000.0}],
         TWO: [{"concurrency": 2, "throughput": 1500.0, "p95_us": 1500.0}]},
    )  # fmt: skip
    result = ranking.summarize(search)
    assert (
        result["best_key"] == TWO.key
        and "1.5× throughput (1,500 vs 1,000 infer/s)" in (result["recommendation"])
    )
    assert result["rows"][0]["throughput"] == 1500 and result["rows"][0]["latency_us"] == 1500
    data = reading.search_json(search)
    assert data["metrics"]["throughput"]["unit"] == "infer/s"
    assert data["metrics"]["latency"]["key"] == "p95_us" and data["measured_how"] == ""
    assert data["constraints_text"] == "p95 ≤ 5 ms"


@pytest.mark.django_db
def test_a_streaming_search_ranks_reports_and_names_responses_and_the_first_response():
    def row(infer_s, responses_s, first_us):
        return measure.search_json(_stream_level(2, infer_s, responses_s, first_us))

    search = _stored_search(
        "max_response_throughput", {"streaming": True},
        Constraints(first_response_budget_ms=30).to_json(),
        {ONE: [row(50, 400, 25_000)], TWO: [row(80, 640, 28_000)]},
    )  # fmt: skip
    result = ranking.summarize(search)
    assert [r["key"] for r in result["rows"]] == [TWO.key, ONE.key], "by responses/s"
    best = result["rows"][0]
    assert best["throughput"] == 640 and best["infer_per_s"] == 80
    assert best["latency_us"] == 28_000, "the first response's p95"
    text = result["recommendation"]
    assert "1.6× response throughput (640 vs 400 responses/s)" in text
    assert "at first response p95 28.00 ms, within the 30 ms first-response budget" in text
    assert result["front_points"][-1]["throughput"] == 640
    data = reading.search_json(search)
    assert data["constraints_text"] == "first response p95 ≤ 30 ms"
    assert data["measured_how"] == "over gRPC streams"
    page = report.build(search)
    assert "Response throughput (responses/s)" in page and "first response p95 (ms)" in page
    assert "Response throughput vs first response p95 latency" in page
    figs = report.figures(reading.snapshot(search.pk))
    assert figs["pareto"]["layout"]["yaxis"]["title"]["text"] == "response throughput (responses/s)"
    assert figs["pareto"]["layout"]["xaxis"]["title"]["text"] == "first response p95 latency (ms)"
    assert figs["pareto"]["layout"]["shapes"][0]["x0"] == 30, "the first-response budget line"


def test_budgets_default_to_the_first_response_of_a_decoupled_model():
    # Requests/s flatten after concurrency 2 (its knee), where the first response takes 11 ms.
    levels = [
        measure.search_json(_stream_level(c, t, 8 * t, f))
        for c, t, f in [(1, 100, 10_000), (2, 180, 11_000), (4, 185, 20_000)]
    ]
    assert defaults.auto_budget(levels, "first_response_p95_us") == (22.0, 2)
    probe = defaults.probe_params("stream_tok", streaming=True)
    assert probe.streaming and probe.protocol == "grpc"
    found = defaults.Suggestion(3, 2, 11.0, 22.0, "1:4:1", "first response p95",
                                "first_response_budget")  # fmt: skip
    initial = SearchForm.initial_for(knobs_of(_config("stream_tok")), False, None, found)
    assert initial["first_response_budget"] == 22.0 and "latency_budget" not in initial
    assert not initial["batching_on"], "max_batch_size 0: nothing for dynamic batching to batch"
    assert "first-response budget of 22 ms" in found.sentence()


# --- entries that fit the kind ----------------------------------------------------------------

BASE = {
    "mode": "grid", "kind": "KIND_CPU", "counts": "1:2", "batching_off": "on",
    "concurrency_range": "2", "measurement_interval": "300", "max_trials": "3",
    "stability_percentage": "100", "percentile": "95", "objective": "max_throughput",
    "latency_budget": "500",
}  # fmt: skip


@pytest.fixture()
def repository(settings, tmp_path, monkeypatch):
    for name in ("busy_compute", "seq_accumulate", "stream_tok"):
        shutil.copytree(DEMO / name, tmp_path / name)
    settings.MODEL_REPOSITORY = tmp_path

    def no_triton(*args: Any, **kwargs: Any) -> Any:
        raise TritonError("Triton is not running in this test", unreachable=True)

    # The kind comes from config.pbtxt; nothing is loaded, and refusals come first.
    for module in (target, runner, sweeps, kind_presets, defaults):
        monkeypatch.setattr(module, "get_client", no_triton)
    monkeypatch.setattr(creating.control, "check_can_control", lambda server: None)
    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)
    return tmp_path


def _form(model: str, **changes: str) -> SearchForm:
    kind = kind_of(_config(model))
    data = {k: v for k, v in {**BASE, **changes}.items() if v is not None}
    form = SearchForm(data, model=model, server=servers.default(), kind=kind)
    form.is_valid()
    return form


REFUSED = [
    # (model, changes, the field that answers, words of its message)
    ("busy_compute", {"objective": "max_goodput"}, "goodput", "Max goodput counts the requests"),
    ("busy_compute", {"first_response_budget": "20"}, "first_response_budget",
     "busy_compute is stateless and answers each request once"),
    ("busy_compute", {"objective": "max_response_throughput"}, "objective",
     "counts a decoupled model's responses over gRPC streams"),
    ("busy_compute", {"sequence_length": "5"}, "sequence_length",
     "--sequence-length applies to sequence models"),
    ("busy_compute", {"token_output": "OUTPUT0"}, "token_output", "turn on --streaming"),
    ("busy_compute", {"goodput": "time_to_first_token:200"}, "goodput",
     "needs a streaming sweep"),
    ("seq_accumulate", {"batching_on": "on"}, "batching_on",
     "dynamic batching would replace its sequence batcher"),
    ("seq_accumulate", {"delays": "100"}, "delays", "direct strategy"),
    ("seq_accumulate", {"sequence_id_range": "1:2"}, "sequence_id_range", "widen it"),
    ("stream_tok", {"objective": "max_goodput"}, "goodput", "time_to_first_token:200"),
    ("busy_compute", {"objective": "min_latency"}, "min_throughput", "throughput floor"),
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("model", "changes", "field", "words"), REFUSED)
def test_entries_that_do_not_fit_the_kind_are_refused_on_their_field(
    repository, model, changes, field, words
):
    form = _form(model, **changes)
    assert form.search_request is None
    assert field in form.errors, form.errors
    assert any(words in e for e in form.errors[field]), form.errors[field]


@pytest.mark.django_db
def test_entries_that_fit_make_a_streaming_or_a_sequence_search(repository):
    stream = _form(
        "stream_tok", objective="max_response_throughput", latency_budget=None,
        first_response_budget="200", goodput="time_to_first_token:100", token_output="TOKEN",
    )  # fmt: skip
    request = stream.search_request
    assert request is not None, stream.errors
    assert request.measure.streaming and request.measure.token_output == "TOKEN"
    assert request.constraints.first_response_budget_ms == 200 and not request.budget_auto
    auto = _form("stream_tok", latency_budget=None).search_request
    assert auto is not None and auto.budget_auto, "no budget: the first response's, measured"
    seq = _form("seq_accumulate", sequence_length="3", sequence_length_variation="0")
    assert seq.search_request is not None, seq.errors
    assert (
        seq.search_request.measure.sequence_length == 3 and not seq.search_request.measure.streaming
    )
    baseline, runs = creating.plan(seq.search_request)
    assert baseline.sequence == "direct" and runs == 2 + 2 * 3  # re-measured 3 times


@pytest.mark.django_db
def test_the_api_refuses_on_the_field_and_the_page_shows_what_fits(repository, monkeypatch):
    monkeypatch.setattr(target, "has_gpus", lambda server: False)
    user = get_user_model().objects.create_user("olga", password="pw-olga-12345")
    set_role(user, OPERATOR)
    client = Client()
    client.force_login(user)
    refused = client.post(
        "/api/v1/searches/",
        {"model": "busy_compute", **BASE, "objective": "max_goodput"},
        content_type="application/json",
    )
    assert refused.status_code == 400 and refused.json()["field"] == "goodput"
    bad_budget = client.post(
        "/api/v1/searches/",
        {"model": "busy_compute", **BASE, "first_response_budget": 20},
        content_type="application/json",
    )
    assert bad_budget.status_code == 400 and bad_budget.json()["field"] == "first_response_budget"
    assert not Search.objects.exists()
    stream_page = client.get("/models/stream_tok/find-best-config/").content.decode()
    assert 'id="id_first_response_budget"' in stream_page
    assert (
        'value="max_response_throughput"' in stream_page and 'id="id_token_output"' in stream_page
    )
    assert 'id="id_sequence_length"' not in stream_page
    assert "Candidates are measured over gRPC streams" in stream_page
    seq_page = client.get("/models/seq_accumulate/find-best-config/").content.decode()
    assert 'id="id_sequence_length"' in seq_page and 'id="id_batching_on"' not in seq_page
    assert 'id="id_first_response_budget"' not in seq_page
    assert 'value="max_response_throughput"' not in seq_page
    plain_page = client.get("/models/busy_compute/find-best-config/").content.decode()
    assert 'id="id_sequence_length"' not in plain_page and 'id="id_batching_on"' in plain_page
    assert 'value="max_goodput"' in plain_page


@pytest.mark.django_db
def test_a_streaming_search_without_a_budget_takes_its_first_response_budget_from_its_baseline():
    levels = [
        measure.search_json(_stream_level(c, t, 8 * t, f))
        for c, t, f in [(1, 100, 10_000), (2, 180, 11_000), (4, 185, 20_000)]
    ]
    search = _stored_search("max_response_throughput", {"streaming": True, "budget_auto": True},
                            Constraints().to_json(), {ONE: levels})  # fmt: skip
    run = runner._Run.__new__(runner._Run)  # only what the budget reads
    run.search, run.budget_auto = search, True
    run.params = sweeps.params_of(search.sweep)
    run._set_auto_budget(search.candidates.get())
    stored = Search.objects.get(pk=search.pk).constraints
    assert stored["first_response_budget_ms"] == 22.0 and stored["latency_budget_ms"] is None
    assert stored["budget_from"].startswith("twice the current config's first response p95")
