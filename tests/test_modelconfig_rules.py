"""Unit tests for the single-config rules (one sample per rule, plus clean baselines)."""

from __future__ import annotations

import pytest

from repository_app.modelconfig.findings import Finding
from repository_app.modelconfig.validate import ServerFacts, validate_text

VALID = """
name: "resnet"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1000 ] } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]
"""

IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def rules_of(findings: list[Finding], severity: str = "error") -> set[str]:
    return {f.rule for f in findings if f.severity == severity}


def test_a_typical_config_has_no_findings() -> None:
    assert validate_text(VALID, folder_name="resnet", server=ServerFacts([0])) == []


BAD_ERRORS = [
    # (config text, rule id that must be reported as an error)
    (
        'name: "m" platform: "onnxruntim" default_model_filename: "model.onnx"' + IO,
        "model.platform-backend-mismatch",
    ),
    (
        'name: "m" platform: "tensorrt_plan" backend: "onnxruntime"' + IO,
        "model.platform-backend-mismatch",
    ),
    ('name: "m" platform: "onnx"' + IO, "model.platform-unknown"),
    ('name: "m" platform: "ensemble" backend: "python"' + IO, "ensemble.has-backend"),
    (
        'name: "m" backend: "identity" runtime: "../x/libtriton_identity.so"' + IO,
        "model.runtime-escapes",
    ),
    ('name: "m" backend: "onnxruntime" max_batch_size: -1' + IO, "model.max-batch-size-negative"),
    (
        'name: "m" backend: "identity" input [ { data_type: TYPE_FP32 dims: [1] } ]',
        "input.name-missing",
    ),
    ('name: "m" backend: "identity" input [ { name: "a" dims: [1] } ]', "input.data-type-missing"),
    (
        'name: "m" backend: "identity" output [ { name: "a" data_type: TYPE_FP32 } ]',
        "output.dims-missing",
    ),
    (
        'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 dims: [0] } ]',
        "input.dims-invalid",
    ),
    (
        'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 dims: [1] }, { name: "a" data_type: TYPE_FP32 dims: [1] } ]',
        "input.duplicate-name",
    ),
    (
        'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 dims: [4] reshape { shape: [0] } } ]',
        "input.reshape-invalid",
    ),
    (
        'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 dims: [4] reshape { shape: [3] } } ]',
        "input.reshape-size",
    ),
    (
        'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 dims: [2, -1] reshape { shape: [2, -1, -1] } } ]',
        "input.reshape-variable",
    ),
    (
        'name: "m" backend: "identity" output [ { name: "a" data_type: TYPE_FP32 dims: [1] reshape { shape: [] } } ]',
        "output.reshape-empty",
    ),
    (
        'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [3, 4] } ]',
        "input.format-dims",
    ),
    (
        'name: "m" backend: "onnxruntime" input [ { name: "a" data_type: TYPE_INT32 dims: [1] is_shape_tensor: true } ]',
        "input.shape-tensor-platform",
    ),
    (
        'name: "m" backend: "tensorrt" input [ { name: "a" data_type: TYPE_FP32 dims: [1] is_non_linear_format_io: true } ]',
        "input.non-linear-dims",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 16 ] }'
        + IO,
        "dynamic-batching.preferred-above-max",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 0 ] }'
        + IO,
        "dynamic-batching.preferred-not-positive",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { priority_levels: 2 }'
        + IO,
        "dynamic-batching.default-priority-range",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 3 value {} } }'
        + IO,
        "dynamic-batching.priority-policy-range",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }'
        + IO,
        "dynamic-batching.preserve-ordering-priorities",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 } }'
        + IO,
        "dynamic-batching.preserve-ordering-delay",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching {} sequence_batching {}'
        + IO,
        "scheduling.conflict",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 sequence_batching { control_input [ { control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ] }'
        + IO,
        "sequence-batching.control-name-missing",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 sequence_batching { control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1, 2] } ] } ] }'
        + IO,
        "sequence-batching.control-values-count",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 sequence_batching { control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] fp32_false_true: [0, 1] } ] } ] }'
        + IO,
        "sequence-batching.control-values-conflict",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 sequence_batching { control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }'
        + IO,
        "sequence-batching.corrid-data-type",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 sequence_batching { control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID int32_false_true: [0, 1] } ] } ] }'
        + IO,
        "sequence-batching.control-values-not-allowed",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [ 8 ] } }'
        + IO,
        "sequence-batching.preferred-above-max",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 4 sequence_batching { direct { minimum_slot_utilization: 1.5 } }'
        + IO,
        "sequence-batching.slot-utilization",
    ),
    (
        'name: "m" backend: "onnxruntime" sequence_batching {} response_cache { enable: true }'
        + IO,
        "sequence-batching.response-cache",
    ),
    (
        'name: "m" backend: "python" model_transaction_policy { decoupled: true } response_cache { enable: true }'
        + IO,
        "model.decoupled-response-cache",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]' + IO,
        "instance-group.gpus-on-non-gpu",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { kind: KIND_MODEL gpus: [ 0 ] } ]' + IO,
        "instance-group.gpus-on-non-gpu",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { kind: KIND_GPU gpus: [ -2 ] } ]' + IO,
        "instance-group.gpu-invalid",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { profile: "0" } ]' + IO,
        "instance-group.profile-non-tensorrt",
    ),
    (
        'name: "m" backend: "tensorrt" instance_group [ { profile: "abc" } ]' + IO,
        "instance-group.profile-invalid",
    ),
    (  # a digit to str.isdigit, not to int(): was a 500
        'name: "m" backend: "tensorrt" instance_group [ { profile: "\u00b2" } ]' + IO,
        "instance-group.profile-invalid",
    ),
    (  # more digits than int() reads (and than Triton's int holds): was a 500
        'name: "m" backend: "tensorrt" instance_group [ { profile: "' + "9" * 5000 + '" } ]' + IO,
        "instance-group.profile-invalid",
    ),
    (
        'name: "m" backend: "onnxruntime" version_policy { specific { versions: [ 0 ] } }' + IO,
        "version-policy.specific-invalid",
    ),
    (
        'name: "m" backend: "onnxruntime" version_policy { latest { num_versions: 0 } }' + IO,
        "version-policy.latest-zero",
    ),
    (
        'name: "m" backend: "onnxruntime" ensemble_scheduling { step [ { model_name: "a" } ] }'
        + IO,
        "ensemble.scheduling-on-non-ensemble",
    ),
    ('name: "m" platform: "ensemble"' + IO, "ensemble.scheduling-missing"),
    (
        'name: "m" model_metrics { metric_control [ { histogram_options { buckets: [1] } } ] }'
        + IO,
        "metrics.identifier-missing",
    ),
    (
        'name: "m" backend: "onnxruntime" batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT64 source_input: "INPUT0" } ]'
        + IO,
        "batch-input.data-type",
    ),
]


@pytest.mark.parametrize("text,rule", BAD_ERRORS, ids=[r for _, r in BAD_ERRORS])
def test_it_reports_each_broken_rule_as_an_error(text: str, rule: str) -> None:
    findings = validate_text(text, folder_name="m")
    assert rule in rules_of(findings), [f.format() for f in findings]


def test_every_message_names_the_problem_and_the_fix() -> None:
    for text, rule in BAD_ERRORS:
        for f in validate_text(text, folder_name="m"):
            if f.rule == rule:
                assert ": " in f.message and len(f.message) > 30, f.message


def test_it_rejects_preferred_batch_above_max_with_both_numbers_and_a_position() -> None:
    text = (
        'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\ndynamic_batching {\n  preferred_batch_size: [ 4, 16 ]\n}\n'
        + IO
    )
    [finding] = [f for f in validate_text(text) if f.rule == "dynamic-batching.preferred-above-max"]
    assert "preferred_batch_size 16 exceeds max_batch_size 8" in finding.message
    assert "lower it to at most 8 or raise max_batch_size" in finding.message
    assert finding.field == "dynamic_batching.preferred_batch_size[1]"
    assert (finding.line, finding.col) == (5, 30)


def test_it_flags_a_folder_name_that_differs_from_the_model_name() -> None:
    findings = validate_text(VALID, folder_name="other")
    assert "model.name-mismatch" in rules_of(findings)
    assert "directory name must equal model name" in findings[0].message


def test_a_missing_name_is_only_a_warning_because_triton_uses_the_folder() -> None:
    findings = validate_text(VALID.replace('name: "resnet"', ""), folder_name="resnet")
    assert rules_of(findings, "warning") == {"model.name-missing"}
    assert not rules_of(findings)


WARNINGS = [
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 0 dynamic_batching {}' + IO,
        "dynamic-batching.no-batching",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 input [ { name: "a" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]',
        "io.batch-dim-in-dims",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { count: 0 } ]' + IO,
        "instance-group.count-not-positive",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { count: -3 } ]' + IO,
        "instance-group.count-not-positive",
    ),
    (
        'name: "m" backend: "onnxruntime" instance_group [ { count: 500 } ]' + IO,
        "instance-group.count-huge",
    ),
    (
        'name: "m" backend: "python" output [ { name: "o" data_type: TYPE_FP32 dims: [1] } ]',
        "python.no-inputs",
    ),
    (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 4, 4 ] }'
        + IO,
        "dynamic-batching.preferred-duplicate",
    ),
    ('name: "m" backend: "my_custom_thing"' + IO, "model.backend-unknown"),
    ('name: "m" max_batch_size: 8' + IO, "model.backend-missing"),
    (
        'name: "m" backend: "onnxruntime" input [ { name: "a" dims: [1] } ]',
        "input.data-type-missing",
    ),
]


@pytest.mark.parametrize("text,rule", WARNINGS, ids=[r for _, r in WARNINGS])
def test_it_reports_accepted_but_surprising_configs_as_warnings(text: str, rule: str) -> None:
    findings = validate_text(text, folder_name="m")
    assert rule in rules_of(findings, "warning"), [f.format() for f in findings]
    assert not rules_of(findings), [f.format() for f in findings]


def test_strict_mode_turns_autofillable_gaps_into_errors() -> None:
    text = 'name: "m" max_batch_size: 8 input [ { name: "a" dims: [1] } ]'
    assert not rules_of(validate_text(text))
    assert {"model.backend-missing", "input.data-type-missing"} <= rules_of(
        validate_text(text, strict=True)
    )


def test_an_unset_count_is_not_flagged_because_triton_fills_the_default() -> None:
    text = 'name: "m" backend: "onnxruntime" instance_group [ { kind: KIND_CPU } ]' + IO
    assert validate_text(text) == []


class TestServerFacts:
    def test_it_rejects_a_gpu_the_server_does_not_have(self) -> None:
        findings = validate_text(
            VALID.replace("gpus: [ 0 ]", "gpus: [ 3 ]"), server=ServerFacts([0, 1])
        )
        [f] = [f for f in findings if f.rule == "instance-group.gpu-unavailable"]
        assert f.is_error and "gpu id 3" in f.message and "0, 1" in f.message

    def test_it_rejects_kind_gpu_on_a_server_without_gpus_and_says_why(self) -> None:
        findings = validate_text(VALID, server=ServerFacts([]))
        [f] = [f for f in findings if f.rule == "instance-group.no-gpus"]
        assert "has kind KIND_GPU but no GPUs are available" in f.message
        assert "KIND_CPU" in f.message

    def test_without_server_facts_it_cannot_judge_positive_gpu_ids(self) -> None:
        assert validate_text(VALID.replace("gpus: [ 0 ]", "gpus: [ 7 ]")) == []

    def test_kind_auto_on_a_missing_gpu_only_warns_because_triton_falls_back_to_cpu(self) -> None:
        text = VALID.replace("kind: KIND_GPU count: 2 gpus: [ 0 ]", "gpus: [ 5 ]")
        findings = validate_text(text, server=ServerFacts([0]))
        assert rules_of(findings, "warning") == {"instance-group.gpu-unavailable"}


ENSEMBLE = """
name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "mid" } },
  { model_name: "b" model_version: -1 input_map { key: "x" value: "mid" } output_map { key: "y" value: "OUT" } }
] }
"""


class TestEnsembleConfig:
    def test_a_well_formed_ensemble_is_clean(self) -> None:
        assert validate_text(ENSEMBLE, folder_name="pipe") == []

    @pytest.mark.parametrize(
        "old,new,rule",
        [
            ('value: "mid" } },', 'value: "OUT" } },', "ensemble.tensor-written-twice"),
            ('key: "x" value: "mid"', 'key: "x" value: "nowhere"', "ensemble.output-not-written"),
            ('output [ { name: "OUT"', 'output [ { name: "GONE"', "ensemble.output-unused"),
            ('input [ { name: "IN"', 'input [ { name: "UNUSED"', "ensemble.input-unused"),
            (
                '{ model_name: "a" model_version: -1',
                "{ model_version: -1",
                "ensemble.step-model-name-missing",
            ),
            (
                "max_batch_size: 8",
                "max_batch_size: 8 instance_group [ { count: 1 } ]",
                "ensemble.instance-group",
            ),
            (
                "max_batch_size: 8",
                'max_batch_size: 8 model_warmup [ { name: "w" } ]',
                "ensemble.model-warmup",
            ),
            (
                "max_batch_size: 8",
                "max_batch_size: 8 optimization { priority: PRIORITY_MAX }",
                "ensemble.optimization",
            ),
        ],
    )
    def test_it_rejects_broken_ensembles(self, old: str, new: str, rule: str) -> None:
        assert old in ENSEMBLE
        findings = validate_text(ENSEMBLE.replace(old, new), folder_name="pipe")
        assert rule in rules_of(findings), [f.format() for f in findings]

    def test_it_reports_the_disconnected_tensor_behind_an_unwritten_output(self) -> None:
        text = ENSEMBLE.replace('key: "x" value: "mid"', 'key: "x" value: "nowhere"')
        [f] = [f for f in validate_text(text) if f.rule == "ensemble.output-not-written"]
        assert "at least one of its depending tensors, 'nowhere', is not connected" in f.message
