"""Config searches of a decoupled and a sequence model against the real tritonserver:
protocol and shape (responses per request, sequences without error, the configs Triton
serves for each candidate), never speed. Two candidates, one level, short windows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from profiler_app import jobs
from profiler_app.models import Search
from profiler_app.params import SweepParams
from profiler_app.search import creating, reading, runner
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Space
from registry import servers
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "model_repository"
_COUNT = re.search(
    r'key: "RESPONSE_COUNT" value: \{ string_value: "(\d+)" \}',
    (DEMO / "stream_tok" / "config.pbtxt").read_text(),
)
assert _COUNT
RESPONSE_COUNT = int(_COUNT.group(1))


@pytest.fixture()
def client(triton) -> TritonClient:
    return TritonClient(triton.grpc_url, triton.metrics_url)


def _load(client: TritonClient, name: str):  # type: ignore[no-untyped-def]
    client.load(name)
    yield name
    client.unload(name)


@pytest.fixture()
def stream_tok(client, redis_db):  # type: ignore[no-untyped-def]
    yield from _load(client, "stream_tok")


@pytest.fixture()
def seq_accumulate(client, redis_db):  # type: ignore[no-untyped-def]
    yield from _load(client, "seq_accumulate")


def _measure(model: str, **flags: Any) -> SweepParams:
    return SweepParams(
        model=model, start=2, end=2, measurement_window_ms=300, stability_percentage=100,
        max_windows=3, **flags,
    )  # fmt: skip


def _served_while_measured(monkeypatch, client: TritonClient, model: str) -> list[dict]:
    """The config Triton serves for each candidate, read as its measurement starts."""
    served: list[dict] = []
    original = runner._Run._measure

    def measure(self, candidate, live=True):  # type: ignore[no-untyped-def]
        served.append(client.model_config(model))
        return original(self, candidate, live)

    monkeypatch.setattr(runner._Run, "_measure", measure)
    return served


def _run_here(search: Search) -> Search:
    assert jobs.claim(search.sweep_id)
    assert jobs.execute(search.sweep_id) == "succeeded", search.sweep.error
    return Search.objects.select_related("sweep").get(pk=search.pk)


def test_a_quick_search_of_a_decoupled_model_measures_streams_and_ranks_by_responses(
    stream_tok, client, monkeypatch
):
    served = _served_while_measured(monkeypatch, client, stream_tok)
    request = creating.SearchRequest(
        server=servers.default(),
        model=stream_tok,
        # max_batch_size 0: nothing for dynamic batching to batch; instances only.
        space=Space(counts=(1, 2), batching_off=True, batching_on=False),
        measure=_measure(stream_tok, streaming=True),
        constraints=Constraints(first_response_budget_ms=5000, percentile=95),
        objective="max_response_throughput",
        mode="quick",
    )
    search = _run_here(creating.create_search(request, enqueue=False))
    candidates = list(search.candidates.all())
    assert [c.key for c in candidates] == ["1xCPU/mbs0/off", "2xCPU/mbs0/off"]
    assert [int(s["instance_group"][0]["count"]) for s in served] == [1, 2]
    assert all(s["model_transaction_policy"]["decoupled"] for s in served)
    responses: dict[str, float] = {}
    for candidate in candidates:
        assert candidate.state == "measured", candidate.error
        (level,) = candidate.levels
        extra = level["extra"]
        assert level["errors"] == 0 and level["requests"] > 0
        # Over streams: every response of every request, up to its final flag.
        assert extra["responses_per_request"] == RESPONSE_COUNT
        assert extra["first_response_p95_us"] > 0
        responses[candidate.key] = extra["response_throughput"]
    rows = search.result["rows"]
    # Ranked by responses/s: the row's throughput is the level's response throughput, its
    # latency the first response's p95, and infer/s is beside them.
    for row in rows:
        assert row["feasible"] and row["throughput"] == responses[row["key"]]
        assert row["objective"] == row["throughput"]
        assert row["throughput"] == pytest.approx(RESPONSE_COUNT * row["infer_per_s"], rel=0.01)
        (level,) = next(c for c in candidates if c.key == row["key"]).levels
        assert row["latency_us"] == level["extra"]["first_response_p95_us"]
    assert [r["throughput"] for r in rows] == sorted(responses.values(), reverse=True)
    assert search.result["best_key"] == max(responses, key=responses.__getitem__)
    info = reading.search_json(search)
    assert info["metrics"]["throughput"]["unit"] == "responses/s"
    assert info["metrics"]["latency"]["label"] == "first response p95"
    assert "responses/s" in search.result["recommendation"]
    assert int(client.model_config(stream_tok)["instance_group"][0]["count"]) == 1, "restored"


def test_a_search_of_a_sequence_model_keeps_its_sequence_batching(
    seq_accumulate, client, monkeypatch
):
    before = client.model_config(seq_accumulate)
    served = _served_while_measured(monkeypatch, client, seq_accumulate)
    request = creating.SearchRequest(
        server=servers.default(),
        model=seq_accumulate,
        # Dynamic batching asked for (the Space's default): a sequence model never gets it.
        space=Space(counts=(1, 2)),
        measure=_measure(seq_accumulate, sequence_length=3, sequence_length_variation=0),
        constraints=Constraints(latency_budget_ms=5000, percentile=95),
        mode="grid",
    )
    search = _run_here(creating.create_search(request, enqueue=False))
    candidates = list(search.candidates.all())
    assert [c.key for c in candidates] == ["1xCPU/mbs8/seq-direct", "2xCPU/mbs8/seq-direct"]
    assert [int(s["instance_group"][0]["count"]) for s in served] == [1, 2]
    for config in served:  # as Triton served each candidate
        assert config["sequence_batching"] == before["sequence_batching"]
        assert "dynamic_batching" not in config
    for candidate in candidates:
        assert candidate.state == "measured", candidate.error
        (level,) = candidate.levels
        extra = level["extra"]
        # seq_accumulate answers an error for a request of a sequence that never started.
        assert level["errors"] == 0 and level["requests"] > 0
        assert extra["sequences_completed"] > 0 and extra["sequences_failed"] == 0
    assert search.result["best_key"] in {c.key for c in candidates}
    assert "in sequences of 3 requests" in reading.search_json(search)["measured_how"]
    assert client.model_config(seq_accumulate)["sequence_batching"] == before["sequence_batching"]
