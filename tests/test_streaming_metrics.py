"""Decoupled (streaming, LLM-style) models without a server: the goodput flag and rule,
token counting, the inter-response histogram, the LLM input presets against a model's
inputs, and what a CSV shows where an engine measured no tokens or goodput."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from profiler_app import goodput, llm, measure
from profiler_app.engine import perf_analyzer_csv as pa_csv
from profiler_app.engine import perf_analyzer_output as pa_output
from profiler_app.engine.inputs import InputError, build_payloads, input_specs
from profiler_app.engine.stream_slots import FINAL_FLAG, _Request, count_tokens
from profiler_app.engine.stream_stats import StreamRecords, histogram_counts
from profiler_app.params import ParamsError, from_flags

# --- the goodput flag ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "objectives"),
    [
        ("", {}),
        (
            "time_to_first_token:200 inter_token_latency:30 request_latency:500",
            {"first_response": 200, "inter_token_latency": 30, "request_latency": 500},
        ),
        ("first_response:0.5  inter_response:2.5", {"first_response": 0.5, "inter_response": 2.5}),
        ("REQUEST_LATENCY:1e3", {"request_latency": 1000}),
    ],
)
def test_goodput_objectives_read_aiperfs_names_and_ours(text, objectives):
    assert goodput.parse(text) == objectives
    params = from_flags({"model": "m", "streaming": True, "goodput": text})
    assert goodput.parse(params.goodput) == objectives  # stored canonical, read back alike
    assert params.goodput == goodput.text(objectives)


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("ttft:200", "'ttft:200' names no known metric"),
        ("request_latency", "'request_latency' has no limit"),
        ("request_latency:", "'request_latency:' has no limit"),
        ("request_latency:fast", "'fast' is not a number of ms"),
        ("request_latency:0", "the limit must be above 0 ms"),
        ("request_latency:-5", "the limit must be above 0 ms"),
        ("request_latency:inf", "the limit must be above 0 ms"),
        ("time_to_first_token:9 first_response:10", "sets first_response a second time"),
    ],
)
def test_a_bad_goodput_objective_is_refused_on_its_field_naming_the_bad_part(text, part):
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", "streaming": True, "goodput": text})
    assert list(refused.value.errors) == ["goodput"]
    message = refused.value.errors["goodput"]
    assert message.startswith("Goodput objective ") and part in message, message


def test_a_model_that_does_not_stream_takes_the_request_latency_objective_only():
    assert from_flags({"model": "m", "goodput": "request_latency:50"}).goodput == (
        "request_latency:50"
    )
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", "goodput": "time_to_first_token:20 request_latency:50"})
    message = refused.value.errors["goodput"]
    assert "first_response needs a streaming sweep" in message
    assert "only request_latency applies" in message


def test_the_token_output_is_a_streaming_flag_with_a_tensors_name():
    assert from_flags({"model": "m", "streaming": True, "token_output": "TOKEN"}).token_output == (
        "TOKEN"
    )
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", "token_output": "TOKEN"})
    assert "turn on --streaming" in refused.value.errors["token_output"]
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", "streaming": True, "token_output": "a b; rm -rf"})
    assert refused.value.errors["token_output"].startswith("The token output must be an output")


# --- the goodput rule ---------------------------------------------------------------------


def test_a_request_is_good_when_it_meets_every_objective_and_has_every_value():
    ms = 1_000_000
    latency = np.array([50, 50, 50, 80, 50]) * ms
    first = np.array([10, 25, 10, 10, 10]) * ms
    span = np.array([20, 20, 40, 20, 0]) * ms  # first to last response with outputs
    responses = np.array([5, 5, 5, 5, 1])  # the last request has no gap: no mean gap
    tokens = responses * 2
    objectives = goodput.parse("first_response:20 inter_response:5 request_latency:60")
    mask = goodput.good_mask(
        objectives, latency, first_ns=first, span_ns=span, responses=responses, tokens=tokens
    )
    # mean gaps 5, 5, 10, 5 ms and none: the 2nd fails first_response, the 3rd its mean
    # gap, the 4th the latency, the 5th has no gap to check (AIPerf's rule: not good).
    assert mask.tolist() == [True, False, False, False, False]
    # Per token: the first request's 20 ms over its 9 token gaps is 2.22 ms.
    itl = {"inter_token_latency": 2.3}
    assert goodput.good_mask(itl, latency[:1], span_ns=span[:1], tokens=tokens[:1]).tolist() == [
        True
    ]
    itl = {"inter_token_latency": 2.2}
    assert goodput.good_mask(itl, latency[:1], span_ns=span[:1], tokens=tokens[:1]).tolist() == [
        False
    ]
    exact = goodput.good_mask({"request_latency": 50}, latency)  # the limit itself is met
    assert exact.tolist() == [True, True, True, False, True]
    # A streaming objective on a sweep without stream records: no value, not good.
    assert not goodput.good_mask({"first_response": 1e9}, latency).any()


# --- tokens -------------------------------------------------------------------------------


def _response(request_id: str, *shapes: list[int], final: bool = False):
    response = service_pb2.ModelInferResponse(id=request_id)
    for i, shape in enumerate(shapes):
        response.outputs.add(name="TOKEN" if i == 0 else f"OUT{i}", datatype="INT32", shape=shape)
    if final:
        response.parameters[FINAL_FLAG].bool_param = True
    return response


class _Rec:
    def __init__(self) -> None:
        self.records: list = []
        self.stream: list = []
        self.gaps: list = []


def test_tokens_are_the_responses_or_the_token_outputs_elements():
    assert count_tokens(_response("1", [1]), "") == 1  # one response is one token
    assert count_tokens(_response("1", [1, 4], [7]), "TOKEN") == 4
    assert count_tokens(_response("1", [7]), "OTHER") == 0
    request = _Request("1", t0=1_000, timeout_s=1.0)
    for t, shape in ((2_000, [3]), (5_000, [2]), (9_000, [1])):
        assert not request.add(t, _response("1", shape), "TOKEN")
    assert request.add(9_500, _response("1", final=True), "TOKEN")  # the empty final flag
    rec = _Rec()
    request.record(rec, 9_500)
    # (end, first, responses, empties, latency, span first..last with outputs, tokens)
    assert rec.stream == [(9_500, 1_000, 3, 1, 8_500, 7_000, 6)]
    assert rec.gaps == [(9_500, 3_000), (9_500, 4_000)] and rec.records == [(9_500, 8_500)]


def test_token_figures_follow_aiperfs_definitions():
    records = StreamRecords(
        first_ns=np.array([10, 10, 10]) * 10**6,
        responses=np.array([4, 4, 1]),
        latency_ns=np.array([100, 100, 100]) * 10**6,
        span_ns=np.array([30, 60, 0]) * 10**6,
        tokens=np.array([4, 7, 1]),
    )
    summary = records.summary(duration_s=2.0)
    assert summary.output_token_throughput == 12 / 2.0  # every token over the duration
    assert summary.tokens_per_request == 4.0
    # Per user: (tokens - 1) / span, over requests with 2 tokens or more: 3/0.03, 6/0.06.
    assert summary.output_token_throughput_per_user == pytest.approx(100.0)
    fields = measure.stream_fields(summary)
    assert {name: fields[name] for name in measure.TOKEN_FIELDS} == {
        "output_token_throughput": 6.0,
        "tokens_per_request": 4.0,
        "output_token_throughput_per_user": pytest.approx(100.0),
    }


# --- the histogram ------------------------------------------------------------------------


def test_inter_response_times_are_binned_on_the_fixed_log_edges():
    edges = measure.INTER_RESPONSE_EDGES_US
    assert all(b > a for a, b in zip(edges, edges[1:], strict=False))
    assert edges[0] == 10 and edges[-1] == 10_000_000  # 10 µs to 10 s, 4 bins a decade
    assert all(
        math.isclose(b / a, 10**0.25, rel_tol=1e-2) for a, b in zip(edges, edges[1:], strict=False)
    )
    gaps_us = [1, 10, 17.7, 17.8, 999.9, 1000, 5000, 10_000_000, 10**9]
    counts = histogram_counts(np.array([g * 1000 for g in gaps_us]))
    assert len(counts) == len(edges) + 1 and sum(counts) == len(gaps_us)
    assert counts[0] == 1  # under 10 µs
    assert counts[1] == 2  # [10, 17.8): an edge opens its bin
    assert counts[2] == 1  # 17.8 itself
    assert counts[edges.index(1000.0)] == 1 and counts[edges.index(1000.0) + 1] == 1
    assert counts[-1] == 2  # 10 s and over
    assert histogram_counts(np.empty(0, np.int64)) == [0] * (len(edges) + 1)


# --- the LLM input presets ----------------------------------------------------------------


def _model(inputs: list[tuple[str, str, bool]], batching: bool = False):
    metadata = {
        "inputs": [
            {"name": n, "datatype": t, "shape": [-1, 1] if batching else [1]} for n, t, _ in inputs
        ]
    }
    config = {
        "max_batch_size": 8 if batching else 0,
        "input": [{"name": n, "optional": optional} for n, _, optional in inputs],
    }
    return input_specs(metadata, config)


TRTLLM_MODEL = [
    ("text_input", "BYTES", False), ("max_tokens", "INT32", False), ("stream", "BOOL", True),
    ("bad_words", "BYTES", True), ("temperature", "FP32", True),
]  # fmt: skip
VLLM_MODEL = [
    ("text_input", "BYTES", False), ("stream", "BOOL", True),
    ("sampling_parameters", "BYTES", True), ("exclude_input_in_output", "BOOL", True),
]  # fmt: skip
STREAM_TOK = [("PROMPT_ID", "INT32", False)]


@pytest.mark.parametrize(
    ("preset", "model", "batching"),
    [("trtllm", TRTLLM_MODEL, True), ("vllm", VLLM_MODEL, False)],
)
def test_the_llm_presets_fit_models_with_those_backends_input_names(preset, model, batching):
    document = json.loads(llm.preset_text(preset) or "")  # as the form's JSON field shows it
    assert document == llm.INPUT_PRESETS[preset][1]
    params = from_flags({"model": "llm", "streaming": True, "input_data": document})
    payloads = build_payloads(_model(model, batching), data=params.input_data, batching=batching)
    assert len(payloads) == len(llm.PROMPTS)
    sent = {t.name for t in payloads[0]}  # the optional inputs it leaves out are not sent
    assert sent == set(document["data"][0])
    text = {t.name: t for t in payloads[0]}["text_input"].array
    assert text.ravel()[0] == llm.PROMPTS[0].encode()


@pytest.mark.parametrize("preset", ["trtllm", "vllm"])
def test_an_llm_preset_against_other_input_names_names_the_missing_and_the_extra(preset):
    document = llm.INPUT_PRESETS[preset][1]
    with pytest.raises(InputError) as refused:
        build_payloads(_model(STREAM_TOK), data=document, batching=False)
    message = str(refused.value)
    assert "no value for input(s) PROMPT_ID" in message
    extra = ", ".join(sorted(document["data"][0]))
    assert f"names that are not inputs of the model: {extra}" in message
    assert "(the model takes PROMPT_ID)" in message


def test_an_optional_input_is_given_in_every_sample_or_in_none():
    document = {"data": [{"text_input": ["a"], "stream": [True]}, {"text_input": ["b"]}]}
    with pytest.raises(InputError, match="input stream \\(optional\\) is missing from sample 1"):
        build_payloads(_model(VLLM_MODEL), data=document, batching=False)


# --- what an engine did not measure -------------------------------------------------------


def test_a_perf_analyzer_streaming_level_shows_no_tokens_and_no_goodput_column():
    level = pa_output.PaLevel(
        4, throughput=10.0, response_throughput=80.0, request_count=30, avg_latency_us=900,
        percentiles_us={50: 800, 90: 900, 95: 950, 99: 990},
    ).measured("p95_us")  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(pa_csv.levels_csv([level], streaming=True))))
    assert "Goodput" not in rows[0]
    assert rows[0]["Response Throughput"] == "80"
    for column in (
        "Output Token Throughput",
        "Tokens per Request",
        "Output Token Throughput per User",
    ):
        assert rows[0][column] == ""  # not measured: empty, never 0
    ours = level.__class__.from_json(
        {
            **level.to_json(),
            "extra": {**level.extra, "goodput": 7.5, "output_token_throughput": 80.0},
        }
    )
    rows = list(
        csv.DictReader(io.StringIO(pa_csv.levels_csv([ours], streaming=True, goodput=True)))
    )
    assert rows[0]["Goodput"] == "7.5" and rows[0]["Output Token Throughput"] == "80"


def test_perf_analyzer_is_refused_goodput_and_token_output_on_their_fields():
    params = from_flags({"model": "m", "streaming": True, "goodput": "request_latency:9",
                         "token_output": "TOKEN"})  # fmt: skip
    errors = llm.refusals(params, {"outputs": [{"name": "TOKEN"}]}, "perf_analyzer")
    assert set(errors) == {"goodput", "token_output"}
    assert all("perf_analyzer 2.48 reports no" in m for m in errors.values())
    assert llm.refusals(params, {"outputs": [{"name": "TOKEN"}]}, "builtin") == {}
    wrong = llm.refusals(params, {"outputs": [{"name": "TEXT"}]}, "builtin")
    assert wrong == {"token_output": "m has no output 'TOKEN'; its outputs: TEXT."}


@pytest.mark.django_db
def test_the_command_lines_summary_states_tokens_and_goodput_where_measured():
    from profiler_app import export
    from profiler_app.models import Sweep, SweepPoint

    params = {"model": "m", "streaming": True, "goodput": "first_response:200"}
    sweep = Sweep.objects.create(model="m", server="s", params=params)
    SweepPoint.objects.create(
        sweep=sweep, level=1, window=-1, throughput=10.0, requests=30, p95_us=900.0,
        extra={"output_token_throughput": 80.0, "tokens_per_request": 8.0, "goodput": 5.0,
               "good_share": 0.5},
    )  # fmt: skip
    SweepPoint.objects.create(sweep=sweep, level=2, window=-1, throughput=9.0, p95_us=950.0)
    text = export.summary_text(sweep)
    assert "    Output token throughput: 80.00 tokens/sec (8.0 per request)" in text
    assert "    Goodput: 5.00 requests/sec (50% of requests met every objective)" in text
    assert text.count("Goodput:") == 1  # a level without the figure says nothing of it
