"""config.pbtxt templates (``${name}`` placeholders filled by a script such as
TensorRT-LLM's fill_template.py): each placeholder named, the rest still checked."""

from __future__ import annotations

from repository_app.modelconfig import (
    fill_template,
    is_template,
    parse_config,
    parse_for_validation,
    template_placeholders,
)
from repository_app.modelconfig.validate import validate_text

TEMPLATE = """name: "tensorrt_llm"
backend: "${triton_backend}"
max_batch_size: ${triton_max_batch_size}
model_transaction_policy { decoupled: ${decoupled_mode} }
dynamic_batching {
  preferred_batch_size: [ ${triton_max_batch_size} ]
  max_queue_delay_microseconds: ${max_queue_delay_microseconds}
}
input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "generation_logits" data_type: ${logits_datatype} dims: [ -1, -1, ${vocab} ] } ]
instance_group [ { count: ${instances} kind: KIND_CPU } ]
parameters: { key: "gpt_model_path" value: { string_value: "${engine_dir}" } }
# parameters: { key: "enable_trt_overlap" value: { string_value: "${enable_trt_overlap}" } }
"""


def test_each_placeholder_is_named_with_its_position() -> None:
    findings = [f for f in validate_text(TEMPLATE) if f.rule == "template.placeholder"]
    first = findings[1]
    assert (first.line, first.col) == (3, 17)
    assert first.is_error
    assert first.message.startswith(
        "template placeholder ${triton_max_batch_size}: fill it, e.g. with fill_template.py"
    )
    named = [(f.line, f.message.split()[2].rstrip(":")) for f in findings]
    assert named == [
        (2, "${triton_backend}"),
        (3, "${triton_max_batch_size}"),
        (4, "${decoupled_mode}"),
        (6, "${triton_max_batch_size}"),
        (7, "${max_queue_delay_microseconds}"),
        (10, "${logits_datatype}"),
        (10, "${vocab}"),
        (11, "${instances}"),
        (12, "${engine_dir}"),
    ]


def test_placeholders_inside_strings_are_named_and_comments_are_skipped() -> None:
    found = template_placeholders(TEMPLATE)
    by_name = {p.name: p for p in found}
    assert by_name["engine_dir"].in_string and by_name["triton_backend"].in_string
    assert not by_name["triton_max_batch_size"].in_string
    assert "enable_trt_overlap" not in by_name


def test_the_rest_is_still_checked_around_the_stand_ins() -> None:
    only_placeholders = {f.rule for f in validate_text(TEMPLATE) if f.is_error}
    assert only_placeholders == {"template.placeholder"}
    broken = TEMPLATE.replace("dims: [ -1 ] allow_ragged", "dims: [ 0 ] allow_ragged")
    [real] = [f for f in validate_text(broken) if f.is_error and f.rule != "template.placeholder"]
    assert real.rule == "input.dims-invalid" and (real.line, real.is_error) == (9, True)


def test_findings_about_a_stand_in_are_dropped() -> None:
    # The backend is "${triton_backend}" (not a known backend) and the preferred size is a
    # stand-in: neither may produce a finding of its own.
    rules = {f.rule for f in validate_text(TEMPLATE, folder_name="tensorrt_llm")}
    assert "model.backend-unknown" not in rules
    assert not {r for r in rules if r.startswith("dynamic-batching.")}


def test_a_template_is_exposed_with_its_placeholder_names() -> None:
    parsed = parse_for_validation(TEMPLATE)
    assert parsed.template is not None and parsed.config is not None
    assert parsed.template.names[:3] == [
        "triton_backend",
        "triton_max_batch_size",
        "decoupled_mode",
    ]
    assert is_template(TEMPLATE) and not is_template('name: "m" # ${not_a_field}\n')
    assert parse_for_validation('name: "m"').template is None
    # parse_config itself is unchanged: the editor never sees stand-in values as real ones.
    assert parse_config(TEMPLATE).config is None


def test_fill_template_replaces_the_given_names_and_keeps_every_other_byte() -> None:
    values = {
        "triton_backend": "tensorrtllm",
        "triton_max_batch_size": 64,
        "decoupled_mode": "False",
        "max_queue_delay_microseconds": 1000,
        "logits_datatype": "TYPE_FP32",
        "vocab": 32000,
        "instances": 1,
        "engine_dir": "/engines/llama",
    }
    filled = fill_template(TEMPLATE, values)
    assert "max_batch_size: 64\n" in filled and 'string_value: "/engines/llama"' in filled
    assert "${enable_trt_overlap}" in filled  # not given: left as it was
    assert filled.replace("${enable_trt_overlap}", "") == fill_template(
        TEMPLATE, {**values, "enable_trt_overlap": ""}
    )
    findings = validate_text(filled, folder_name="tensorrt_llm")
    assert not [f for f in findings if f.is_error], [f.format() for f in findings]
    partial = fill_template(TEMPLATE, {"triton_max_batch_size": 8})
    assert "triton_max_batch_size" not in {p.name for p in template_placeholders(partial)}
