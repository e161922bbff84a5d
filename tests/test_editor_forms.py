"""Form mode: a form save changes only what the user changed; findings land on their fields."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from repository_app.editor import form_building
from repository_app.editor import form_mapping as fm
from repository_app.modelconfig import parse_config

NAME = "rich"

# Everything the form does not show must survive a form save untouched.
RICH = """
# A config using much more than the form shows.
name: "rich"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_FP32 dims: [ 3, -1 ] allow_ragged_batch: true },
  { name: "MASK" data_type: TYPE_INT64 dims: [ -1 ] optional: true }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "labels.txt" } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
}
instance_group [ { name: "g" count: 2 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 1 } ] } } ]
optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 3, 4 ] zero_data: true } } } ]
response_cache { enable: true }
parameters [
  { key: "alpha" value { string_value: "1" } },
  { key: "beta" value { string_value: "2" } }
]
model_transaction_policy { decoupled: false }
"""

BATCHED = """name: "batched"
backend: "python"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 500
  priority_queue_policy { key: 1 value { max_queue_size: 3 } }
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def base_config(text: str):
    parsed = parse_config(text)
    assert parsed.config is not None, parsed.findings
    return parsed.config


def unchanged_post(text: str, name: str = NAME) -> dict[str, Any]:
    return form_building.post_data(form_building.build_forms(base_config(text), name))


def read(text: str, data: dict[str, Any], name: str = NAME) -> fm.FormRound:
    result = fm.read_form(name, text, data)
    return result


def expect(text: str, change) -> Any:
    config = base_config(text)
    change(config)
    return config


def test_posting_the_form_unchanged_changes_nothing_and_keeps_the_text_with_comments():
    result = read(RICH, unchanged_post(RICH))
    assert result.ok and not result.changed
    assert result.text == RICH
    assert not result.comments_dropped


def test_changing_max_batch_size_leaves_everything_the_form_does_not_show():
    data = unchanged_post(RICH)
    data["cfg-max_batch_size"] = "4"
    result = read(RICH, data)
    assert result.ok and result.changed

    def change(c):
        c.max_batch_size = 4

    assert result.config == expect(RICH, change)
    # Written in place: that one line changes, the comments and everything else stay.
    assert not result.comments_dropped
    assert result.text == RICH.replace("max_batch_size: 8", "max_batch_size: 4")
    assert base_config(result.text) == result.config


def test_editing_dims_keeps_the_inputs_hidden_fields():
    data = unchanged_post(RICH)
    data["input-0-dims"] = "3, 8"
    result = read(RICH, data)
    assert result.config is not None
    assert list(result.config.input[0].dims) == [3, 8]
    assert result.config.input[0].allow_ragged_batch is True
    assert result.config.input[1].optional is True
    assert result.config.output[0].label_filename == "labels.txt"


def test_editing_an_instance_group_keeps_its_rate_limiter():
    data = unchanged_post(RICH)
    data["instance_group-0-count"] = "3"
    result = read(RICH, data)
    assert result.config is not None
    group = result.config.instance_group[0]
    assert group.count == 3 and group.name == "g"
    assert group.rate_limiter.resources[0].name == "R"


def test_rows_can_be_added_and_deleted():
    data = unchanged_post(RICH)
    data["output-TOTAL_FORMS"] = "2"  # what "Add row" does
    data["input-0-DELETE"] = "on"
    data["output-1-name"] = "SCORES"
    data["output-1-data_type"] = "TYPE_FP16"
    data["output-1-dims"] = "-1"
    data["output-1-reshape"] = "[]"
    result = read(RICH, data)
    assert result.config is not None
    assert [i.name for i in result.config.input] == ["MASK"]
    assert [o.name for o in result.config.output] == ["OUT", "SCORES"]
    scores = result.config.output[1]
    assert list(scores.dims) == [-1] and scores.HasField("reshape") and not scores.reshape.shape
    assert result.applied is not None and result.applied.rows["input"] == [1]


def test_a_new_models_skeleton_loses_each_guidance_comment_once_its_field_is_filled():
    from repository_app.uploads import generate
    from repository_app.uploads.names import backend_files

    skeleton = generate.skeleton("fresh", backend_files("onnxruntime"))
    assert generate.EXAMPLE_INPUT in skeleton and generate.GUIDANCE_HEADER[0] in skeleton
    tensor = {"data_type": "TYPE_FP32", "dims": "4", "reshape": ""}
    data = unchanged_post(skeleton, "fresh")
    data["input-TOTAL_FORMS"] = "1"
    data.update({f"input-0-{k}": v for k, v in {"name": "X", **tensor}.items()})
    inputs_only = read(skeleton, data, "fresh")
    assert inputs_only.ok and inputs_only.changed and not inputs_only.rewrite_reason
    # The input example goes; the output's and the header (which asks for both) stay.
    assert generate.EXAMPLE_INPUT not in inputs_only.text
    assert generate.EXAMPLE_OUTPUT in inputs_only.text
    assert all(line in inputs_only.text for line in generate.GUIDANCE_HEADER)
    data["output-TOTAL_FORMS"] = "1"
    data.update({f"output-0-{k}": v for k, v in {"name": "Y", **tensor}.items()})
    both = read(skeleton, data, "fresh")
    assert both.ok and "#" not in both.text, both.text
    assert base_config(both.text) == both.config
    # Comments of the user's own stay: only the skeleton's exact lines go.
    mine = skeleton.replace('name: "fresh"', '# my note\nname: "fresh"')
    assert "# my note" in read(mine, data, "fresh").text


def test_an_untouched_blank_row_adds_nothing():
    data = unchanged_post(BATCHED, "batched")
    assert data["instance_group-TOTAL_FORMS"] == "1"  # no blank row of its own
    data["instance_group-TOTAL_FORMS"] = "2"  # "Add row", left as it came
    data["instance_group-1-kind"] = "KIND_AUTO"
    result = read(BATCHED, data, "batched")
    assert result.config == base_config(BATCHED)
    assert len(result.editor.instance_groups.forms) == 2  # one existing, one added


def test_parameters_are_renamed_edited_added_and_deleted():
    data = unchanged_post(RICH)
    data["parameters-TOTAL_FORMS"] = "3"  # "Add row"
    data["parameters-0-key"] = "gamma"  # rename alpha, keep its value
    data["parameters-1-DELETE"] = "on"  # delete beta
    data["parameters-2-key"] = "delta"
    data["parameters-2-value"] = "4"
    result = read(RICH, data)
    assert result.config is not None
    params = {k: v.string_value for k, v in result.config.parameters.items()}
    assert params == {"gamma": "1", "delta": "4"}


def test_a_parameter_value_without_key_is_a_form_error():
    data = unchanged_post(RICH)
    data["parameters-TOTAL_FORMS"] = "3"  # "Add row"
    data["parameters-2-value"] = "orphan"
    result = read(RICH, data)
    assert not result.ok
    assert result.editor.parameters.forms[2].errors["key"] == ["a parameter needs a key"]


def test_dynamic_batching_fields_edit_only_themselves_and_keep_priority_policies():
    data = unchanged_post(BATCHED, "batched")
    data["cfg-preferred_batch_size"] = "2, 4"
    data["cfg-max_queue_size"] = "10"
    result = read(BATCHED, data, "batched")

    def change(c):
        del c.dynamic_batching.preferred_batch_size[:]
        c.dynamic_batching.preferred_batch_size.extend([2, 4])
        c.dynamic_batching.default_queue_policy.max_queue_size = 10

    assert result.config == expect(BATCHED, change)


def test_turning_dynamic_batching_off_removes_it():
    data = unchanged_post(BATCHED, "batched")
    del data["cfg-dynamic_batching"]
    result = read(BATCHED, data, "batched")
    assert result.config is not None and not result.config.HasField("dynamic_batching")


def test_dynamic_batching_cannot_replace_sequence_batching_silently():
    data = unchanged_post(RICH)
    data["cfg-dynamic_batching"] = "on"
    result = read(RICH, data)
    assert not result.ok
    assert "a model has exactly one scheduler" in str(result.editor.config.errors)


def test_version_policy_choices_map_to_the_oneof():
    data = unchanged_post(RICH)
    data["cfg-version_policy"] = "specific"
    data["cfg-specific_versions"] = "1, 3"
    result = read(RICH, data)
    assert result.config is not None
    assert list(result.config.version_policy.specific.versions) == [1, 3]
    data["cfg-version_policy"] = "latest"
    data["cfg-latest_num_versions"] = "2"
    result = read(RICH, data)
    assert result.config is not None
    assert result.config.version_policy.latest.num_versions == 2


def test_platform_choice_sets_platform_and_backend_and_unknown_pairs_stay_selectable():
    data = unchanged_post(RICH)
    assert data["cfg-platform_backend"] == "onnxruntime_onnx|"  # as in the file
    data["cfg-platform_backend"] = "|python"
    result = read(RICH, data)
    assert result.config is not None
    assert (result.config.platform, result.config.backend) == ("", "python")


def test_bad_numbers_are_form_errors_not_crashes():
    data = unchanged_post(BATCHED, "batched")
    data["input-0-dims"] = "16, x"
    data["cfg-max_batch_size"] = "-3"
    result = read(BATCHED, data, "batched")
    assert not result.ok
    assert result.editor.inputs.forms[0].errors["dims"] == [
        "'x' is not a whole number: write numbers separated by commas, e.g. 8, 16"
    ]
    assert "max_batch_size" in result.editor.config.errors


def test_validator_findings_land_on_the_fields_that_cause_them():
    data = unchanged_post(BATCHED, "batched")
    data["cfg-max_batch_size"] = "4"
    result = read(BATCHED, data, "batched")
    assert result.ok
    rules = [f.rule for f in result.editor.config["preferred_batch_size"].findings]
    assert rules == ["dynamic-batching.preferred-above-max"] * 2
    assert not [f for f in result.unplaced if f.is_error]


def test_row_findings_follow_the_rows_after_a_deletion():
    text = BATCHED.replace(
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]',
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]',
    )
    data = unchanged_post(text, "batched")
    data["input-0-DELETE"] = "on"
    data["input-1-dims"] = "0"  # B becomes input[0] in the new config
    result = read(text, data, "batched")
    findings = getattr(result.editor.inputs.forms[1]["dims"], "findings", [])
    assert findings and findings[0].field.startswith("input[0].dims")


def test_comment_detection_ignores_hashes_inside_strings():
    assert fm.has_comments('name: "a"  # note\n')
    assert not fm.has_comments('name: "a#b"\nparameters { key: "x" value { string_value: "#" } }')


@settings(max_examples=25, deadline=None)
@given(
    max_batch=st.integers(min_value=0, max_value=1024),
    count=st.integers(min_value=1, max_value=8),
    delay=st.integers(min_value=0, max_value=10**6),
)
def test_any_edit_of_the_shown_fields_keeps_every_other_field(max_batch, count, delay):
    data = unchanged_post(RICH)
    data["cfg-max_batch_size"] = str(max_batch)
    data["instance_group-0-count"] = str(count)
    result = read(RICH, data)

    def change(c):
        c.max_batch_size = max_batch
        c.instance_group[0].count = count

    assert result.config == expect(RICH, change)
    assert base_config(result.text) == result.config  # written in place, not canonical
    data2 = unchanged_post(BATCHED, "batched")
    data2["cfg-max_queue_delay_microseconds"] = str(delay)
    result2 = read(BATCHED, data2, "batched")

    def change2(c):
        c.dynamic_batching.max_queue_delay_microseconds = delay

    assert result2.config == expect(BATCHED, change2)
