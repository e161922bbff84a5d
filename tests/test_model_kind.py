"""A model's kind from its config, the flags of decoupled and sequence models, and which
flags fit which kind (unit tests: no Triton)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler_app import kind_rules
from profiler_app.engine.perf_analyzer_command import build_command
from profiler_app.model_kind import kind_of, kind_of_served
from profiler_app.params import ParamsError, SweepParams, from_flags
from profiler_app.sweeps import params_of
from registry import servers
from repository_app.modelconfig import parse_config

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


def demo_kind(name: str):
    return kind_of(parse_config((DEMO / name / "config.pbtxt").read_text()).config)


def test_each_demo_model_has_its_kind():
    assert demo_kind("add_batched").kind == "stateless"
    assert demo_kind("busy_compute").kind == "stateless"
    stream = demo_kind("stream_tok")
    assert stream.kind == "decoupled" and stream.decoupled
    seq = demo_kind("seq_accumulate")
    assert seq.kind == "sequence" and seq.strategy == "direct" and not seq.implicit_state
    ensemble = demo_kind("ensemble_two_step")
    assert ensemble.kind == "ensemble" and ensemble.steps == ("add_sub", "add_batched")
    bls = demo_kind("bls_caller")
    assert bls.kind == "stateless" and bls.calls == ("add_sub",)  # BLS: stateless outside
    assert bls.label == "stateless (calls add_sub (BLS))"


@pytest.mark.parametrize(
    ("text", "kind", "strategy", "implicit"),
    [
        ('name: "m" backend: "onnxruntime"', "stateless", "", False),
        ('name: "m" sequence_batching { }', "sequence", "direct", False),
        ('name: "m" sequence_batching { oldest { max_candidate_sequences: 4 } }', "sequence",
         "oldest", False),
        ('name: "m" sequence_batching { direct { } state [ { input_name: "I" output_name: "O"'
         ' data_type: TYPE_FP32 dims: [ 1 ] } ] }', "sequence", "direct", True),
        ('name: "m" model_transaction_policy { decoupled: false }', "stateless", "", False),
        ('name: "m" model_transaction_policy { decoupled: true }', "decoupled", "", False),
        ('name: "m" platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" } ] }',
         "ensemble", "", False),
    ],
)  # fmt: skip
def test_hand_written_configs(text, kind, strategy, implicit):
    found = kind_of(parse_config(text).config)
    assert (found.kind, found.strategy, found.implicit_state) == (kind, strategy, implicit)


def test_a_decoupled_sequence_model_is_both():
    text = 'name: "m" sequence_batching { } model_transaction_policy { decoupled: true }'
    found = kind_of(parse_config(text).config)
    assert found.sequence and found.decoupled
    assert found.label == "sequence (direct, decoupled)"


def test_the_served_json_reads_like_the_file():
    served = {
        "name": "s",
        "sequence_batching": {"oldest": {"max_candidate_sequences": 4}, "state": []},
        "model_transaction_policy": {"decoupled": False},
        "some_field_of_a_newer_triton": 1,
    }
    found = kind_of_served(served)
    assert found.kind == "sequence" and found.strategy == "oldest"
    assert kind_of_served({"name": "t", "model_transaction_policy": {"decoupled": True}}).decoupled


# --- the new flags ---------------------------------------------------------------------------


def test_the_new_flags_take_perf_analyzers_defaults():
    params = from_flags({"model": "m"})
    assert params.streaming is False
    assert params.sequence_length == 20 and params.sequence_length_variation == 20
    assert params.sequence_id_range == ""
    given = from_flags(
        {"model": "m", "streaming": "true", "sequence_length": "5",
         "sequence_length_variation": "0", "sequence_id_range": "10:20"}
    )  # fmt: skip
    assert given.streaming and given.sequence_length == 5
    assert given.sequence_length_variation == 0 and given.sequence_id_range == "10:20"
    assert from_flags(given.flags()) == given  # the round trip SweepParams.validate makes


@pytest.mark.parametrize(
    ("flags", "field", "words"),
    [
        ({"streaming": "maybe"}, "streaming", "true or false"),
        ({"streaming": True, "protocol": "http"}, "streaming", "needs gRPC"),
        ({"sequence_length": "0"}, "sequence_length", "between 1 and"),
        ({"sequence_length_variation": "150"}, "sequence_length_variation", "between 0 and 100"),
        ({"sequence_id_range": "a:b"}, "sequence_id_range", "START:END"),
        ({"sequence_id_range": "9:9"}, "sequence_id_range", "holds no id"),
        ({"sequence_id_range": "0:9"}, "sequence_id_range", "between 1 and"),
    ],
)
def test_a_bad_new_flag_is_refused_on_its_field(flags, field, words):
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", **flags})
    assert list(refused.value.errors) == [field] and words in refused.value.errors[field]


def test_stored_params_of_old_sweeps_read_with_the_defaults():
    class Stored:  # a Sweep row as stored before these flags existed
        params = {"model": "m", "start": 1, "end": 2, "step": 1, "mode": "concurrency"}

    params = params_of(Stored())  # type: ignore[arg-type]
    assert params.streaming is False and params.sequence_length == 20
    assert params.sequence_length_variation == 20 and params.sequence_id_range == ""
    params.validate()


# --- the kind check --------------------------------------------------------------------------


def refused(kind_name: str, engine: str = "perf_analyzer", **flags) -> dict[str, str]:
    params = from_flags({"model": kind_name, **flags})
    return kind_rules.refusals(params, demo_kind(kind_name), engine)


def test_a_decoupled_model_over_http_is_refused_on_the_protocol():
    assert refused("stream_tok", protocol="http") == {
        "protocol": "stream_tok is decoupled: it answers only over gRPC streaming; choose gRPC."
    }


def test_a_decoupled_model_without_streaming_is_refused_not_measured_wrong():
    errors = refused("stream_tok")
    assert list(errors) == ["streaming"] and "turn on --streaming" in errors["streaming"]
    assert refused("stream_tok", streaming=True) == {}


def test_streaming_a_model_that_is_not_decoupled_is_refused():
    errors = refused("add_batched", streaming=True)
    assert list(errors) == ["streaming"]
    assert errors["streaming"].startswith("--streaming applies to decoupled models")


def test_sequence_flags_on_a_model_without_sequence_batching_are_refused_each():
    errors = refused(
        "add_batched", sequence_length=5, sequence_length_variation=0, sequence_id_range="1:9"
    )
    assert errors["sequence_length"] == (
        "--sequence-length applies to sequence models; add_batched has no sequence_batching."
    )
    assert set(errors) == {"sequence_length", "sequence_length_variation", "sequence_id_range"}
    assert refused("add_batched") == {}


def test_a_sequence_id_range_narrower_than_the_concurrency_is_refused():
    errors = refused("seq_accumulate", concurrency_range="1:8:1", sequence_id_range="1:5")
    assert list(errors) == ["sequence_id_range"] and "4 ids" in errors["sequence_id_range"]
    assert refused("seq_accumulate", concurrency_range="1:4:1", sequence_id_range="1:5") == {}


def test_the_built_in_engine_refuses_what_it_does_not_measure_yet():
    # It streams a decoupled model at a concurrency or a request rate, over gRPC only.
    assert refused("stream_tok", engine="builtin", streaming=True) == {}
    assert list(refused("stream_tok", engine="builtin", protocol="http")) == ["protocol"]
    rate = refused("stream_tok", engine="builtin", streaming=True, request_rate_range="10")
    assert rate == {}
    assert refused("ensemble_two_step", engine="builtin") == {}
    assert refused("bls_caller", engine="builtin") == {}


def test_the_built_in_engine_measures_sequence_models_over_both_protocols():
    assert refused("seq_accumulate", engine="builtin") == {}
    assert refused("seq_accumulate", engine="builtin", protocol="http") == {}
    assert refused("seq_accumulate", engine="builtin", request_rate_range="10:20:10") == {}
    assert refused("seq_accumulate", engine="builtin", sequence_length=1) == {}


def test_a_decoupled_sequence_model_is_left_to_perf_analyzer():
    text = 'name: "ds" sequence_batching { } model_transaction_policy { decoupled: true }'
    kind = kind_of(parse_config(text).config)
    params = from_flags({"model": "ds", "streaming": True})
    errors = kind_rules.refusals(params, kind, "builtin")
    assert list(errors) == ["engine"] and "perf_analyzer measures it" in errors["engine"]
    assert kind_rules.refusals(params, kind, "perf_analyzer") == {}
    from profiler_app import kind_presets

    assert {p["engine"] for p in kind_presets.presets_for(kind).values()} == {"perf_analyzer"}


def test_the_sequence_presets_use_the_built_in_engine():
    from profiler_app import kind_presets

    presets = kind_presets.presets_for(demo_kind("seq_accumulate"))
    assert {p["engine"] for p in presets.values()} == {"builtin"}
    assert "long-sequences" in presets


def test_a_sequence_model_takes_batch_size_1_only():
    errors = refused("seq_accumulate", engine="builtin", batch_size=2)
    assert list(errors) == ["batch_size"] and "choose -b 1" in errors["batch_size"]
    assert list(refused("seq_accumulate", batch_size=2)) == ["batch_size"]  # perf_analyzer's too


def test_a_sequence_id_range_narrower_than_the_sequences_of_a_request_rate_is_refused():
    errors = refused(
        "seq_accumulate", request_rate_range="10", num_of_sequences=6, sequence_id_range="1:5"
    )
    assert list(errors) == ["sequence_id_range"]
    assert "fewer than the 6 sequences live at once" in errors["sequence_id_range"]
    assert refused("seq_accumulate", request_rate_range="10", sequence_id_range="1:5") == {}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"num_of_sequences": "0", "request_rate_range": "10"},
         "The number of sequences must be between 1 and 4096."),
        ({"num_of_sequences": "4097", "request_rate_range": "10"},
         "The number of sequences must be between 1 and 4096."),
        ({"num_of_sequences": "two", "request_rate_range": "10"},
         "The number of sequences must be a whole number."),
        ({"num_of_sequences": "8"},
         "The number of sequences applies to request-rate mode: at a concurrency, each request "
         "in flight is a sequence of its own."),
    ],
)  # fmt: skip
def test_the_number_of_sequences_is_refused_on_its_field(flags, message):
    with pytest.raises(ParamsError) as refusal:
        from_flags({"model": "m", **flags})
    assert refusal.value.errors == {"num_of_sequences": message}
    named = refusal.value.named({"num_of_sequences": "--num-of-sequences"})
    assert named["num_of_sequences"].startswith("--num-of-sequences ")


def test_the_number_of_sequences_defaults_to_perf_analyzers_and_round_trips():
    assert from_flags({"model": "m"}).num_of_sequences == 4
    given = from_flags({"model": "m", "request_rate_range": "10", "num_of_sequences": "6"})
    assert given.num_of_sequences == 6 and from_flags(given.flags()) == given
    assert from_flags({"model": "m", "num_of_sequences": ""}).num_of_sequences == 4
    assert list(refused("add_batched", request_rate_range="10", num_of_sequences=6)) == [
        "num_of_sequences"
    ]  # a stateless model has no sequences


def test_perf_analyzer_gets_the_number_of_sequences_only_when_it_is_not_its_default():
    rate = from_flags({"model": "s", "request_rate_range": "10", "num_of_sequences": 6})
    assert "--num-of-sequences 6" in " ".join(build_command(rate, "h:1"))
    default = from_flags({"model": "s", "request_rate_range": "10"})
    assert "--num-of-sequences" not in build_command(default, "h:1")


def test_a_sequence_model_without_sequence_flags_is_told_perf_analyzers_defaults():
    seq = demo_kind("seq_accumulate")
    assert kind_rules.notes(from_flags({"model": "seq_accumulate"}), seq) == [
        "seq_accumulate is a sequence model and no sequence flag was given: perf_analyzer's "
        "defaults apply (--sequence-length 20, --sequence-length-variation 20%, ids from 1)"
    ]
    # As a sweep stores the kind (its label), and in request-rate mode with its own flag.
    rate = from_flags({"model": "seq_accumulate", "request_rate_range": "10"})
    [note] = kind_rules.notes(rate, "sequence (direct)")
    assert note.endswith("ids from 1, --num-of-sequences 4)")
    for flags in ({"sequence_length": 5}, {"sequence_length_variation": 0},
                  {"sequence_id_range": "1:100"}):  # fmt: skip
        assert kind_rules.notes(from_flags({"model": "seq_accumulate", **flags}), seq) == []
    assert kind_rules.notes(from_flags({"model": "add_batched"}), demo_kind("add_batched")) == []
    assert kind_rules.notes(from_flags({"model": "x"}), "") == []  # an older sweep: no kind


def test_perf_analyzer_gets_the_streaming_and_sequence_flags():
    plain = build_command(from_flags({"model": "add_batched"}), "h:1")
    assert "--streaming" not in plain and "--sequence-length" not in plain
    cmd = build_command(
        from_flags({"model": "s", "streaming": True, "sequence_length": 7,
                    "sequence_length_variation": 5, "sequence_id_range": "1:100"}),
        "h:1",
    )  # fmt: skip
    assert "--streaming" in cmd
    text = " ".join(cmd)
    assert "--sequence-length 7 --sequence-length-variation 5 --sequence-id-range 1:100" in text


def test_an_unchanged_default_sweep_params_has_the_same_fields():
    # Built in code (the search does): the new fields' defaults, no refusal.
    SweepParams(model="m").validate()


def test_an_unsafe_model_name_is_never_sent_to_triton_for_its_kind(monkeypatch):
    from profiler_app import kind_presets

    def asked(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("Triton was asked about an unsafe model name")

    monkeypatch.setattr(kind_presets, "get_client", asked)
    kind, why = kind_presets.model_kind(servers.default(), "inj$(id)")
    assert kind is None and "inj$(id)" in why
