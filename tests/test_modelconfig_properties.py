"""Property tests: canonical text round-trips, and no input can crash the validator."""

from __future__ import annotations

from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2 as pb

from repository_app.modelconfig.parsing import parse_config, to_text
from repository_app.modelconfig.validate import validate_text

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
dims = st.lists(st.one_of(st.just(-1), st.integers(1, 4096)), min_size=1, max_size=4)
data_types = st.sampled_from([v for v in pb.DataType.values() if v != pb.TYPE_INVALID])


@st.composite
def model_inputs(draw: st.DrawFn) -> pb.ModelInput:
    io = pb.ModelInput(name=draw(names), data_type=draw(data_types), dims=draw(dims))
    io.format = draw(st.sampled_from(list(pb.ModelInput.Format.values())))
    io.optional = draw(st.booleans())
    if draw(st.booleans()):
        io.reshape.shape.extend(draw(dims))
    return io


@st.composite
def model_outputs(draw: st.DrawFn) -> pb.ModelOutput:
    return pb.ModelOutput(name=draw(names), data_type=draw(data_types), dims=draw(dims))


@st.composite
def model_configs(draw: st.DrawFn) -> pb.ModelConfig:
    config = pb.ModelConfig(
        name=draw(names),
        backend=draw(st.sampled_from(["", "onnxruntime", "python", "tensorrt", "identity"])),
        max_batch_size=draw(st.integers(-2, 1024)),
    )
    config.input.extend(draw(st.lists(model_inputs(), max_size=3)))
    config.output.extend(draw(st.lists(model_outputs(), max_size=3)))
    scheduler = draw(st.sampled_from(["none", "dynamic", "sequence"]))
    if scheduler == "dynamic":
        db = config.dynamic_batching
        db.preferred_batch_size.extend(draw(st.lists(st.integers(-1, 64), max_size=3)))
        db.max_queue_delay_microseconds = draw(st.integers(0, 10**6))
        db.preserve_ordering = draw(st.booleans())
        db.priority_levels = draw(st.integers(0, 4))
        db.default_priority_level = draw(st.integers(0, 4))
    elif scheduler == "sequence":
        sb = config.sequence_batching
        sb.max_sequence_idle_microseconds = draw(st.integers(0, 10**7))
        control = sb.control_input.add(name=draw(names)).control.add()
        control.kind = pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START
        control.int32_false_true.extend([0, 1])
    for _ in range(draw(st.integers(0, 2))):
        group = config.instance_group.add(
            kind=draw(st.sampled_from(list(pb.ModelInstanceGroup.Kind.values()))),
            count=draw(st.integers(0, 8)),
        )
        group.gpus.extend(draw(st.lists(st.integers(-1, 7), max_size=2)))
    if draw(st.booleans()):
        config.parameters[draw(names)].string_value = draw(names)
    return config


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model_configs())
def test_canonical_text_parses_back_to_the_same_config(config: pb.ModelConfig) -> None:
    result = parse_config(to_text(config))
    assert result.findings == []
    assert result.config == config


@settings(max_examples=100, deadline=None)
@given(model_configs())
def test_validating_a_generated_config_never_raises(config: pb.ModelConfig) -> None:
    findings = validate_text(to_text(config), folder_name=config.name)
    assert all(f.severity in ("error", "warning") for f in findings)


def _is_invalid_text(text: str) -> bool:
    try:
        text_format.Parse(text, pb.ModelConfig())
    except Exception:
        return True
    return "\x00" in text


config_like_text = st.lists(
    st.sampled_from(
        [
            'name: "m"',
            "max_batch_size:",
            "8",
            "-1",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "input",
            "dims",
            "data_type: TYPE_FP32",
            '"x"',
            "dynamic_batching",
            "#c\n",
            "\n",
            " ",
            "<",
            ">",
            "\\",
            "'",
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), config_like_text))
def test_arbitrary_text_never_raises_and_invalid_text_gets_a_positioned_error(text: str) -> None:
    findings = validate_text(text)
    if _is_invalid_text(text):
        assert any(f.is_error and f.line is not None for f in findings), findings


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    findings = validate_text(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert any(f.rule == "parse.encoding" for f in findings)
        return
    if _is_invalid_text(text.removeprefix("\ufeff")):
        assert any(f.is_error and f.line is not None for f in findings)
