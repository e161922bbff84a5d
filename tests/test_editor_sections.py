"""Form mode covers all of ModelConfig (issue #21): sequence batching, the decoupled policy,
ensembles, the response cache, warmup, rate limiting, optimization, model_metrics and the
string maps. Each section keeps the editor's guarantees: an unchanged post changes
nothing; a change of one field is that line of the file (written in place, comments kept);
the result reads back as the intended config. Fields with no form are listed on the page
and survive a form save byte for byte. Also: the template banner, the ensemble graph and
the step models' tensors, code-loading accelerator parameters, and the live check judged
with the server's facts."""

from __future__ import annotations

import difflib
from html import unescape as html_unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from tritonclient.grpc import model_config_pb2 as pb

from registry import servers
from repository_app.editor import ensemble_view, form_building, form_mapping, saving
from repository_app.editor.coverage import unshown_fields
from repository_app.modelconfig import ServerFacts, parse_config
from repository_app.models import ConfigRevision
from team.roles import ADMIN, OPERATOR, set_role

NAME = "full"

# A stateful model using every section the form shows, written by hand: comments, one-line
# messages, lists on one line and on many.
FULL = """# A stateful model using every section the form shows, written by hand.
name: "full"
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "START" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]

# State is kept by Triton.
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { max_queue_delay_microseconds: 100 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [
    {
      input_name: "STATE_IN"
      output_name: "STATE_OUT"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
  ]
}
instance_group [
  { count: 2 kind: KIND_GPU rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 1 } },
  { count: 1 kind: KIND_CPU }
]
optimization {
  graph { level: 1 }
  cuda { graphs: true }
  execution_accelerators {
    gpu_execution_accelerator [
      { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } }  # half precision
    ]
  }
  input_pinned_memory { enable: false }
}
model_warmup [
  {
    name: "zeros"
    batch_size: 1
    inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
  }
]
response_cache { enable: false }
model_transaction_policy { decoupled: false }
model_metrics {
  metric_control [
    {
      metric_identifier { family: "nv_inference_first_response_histogram_ms" }
      histogram_options { buckets: [ 1, 10, 100 ] }
    }
  ]
}
metric_tags { key: "team" value: "vision" }
"""

# A two-step ensemble over the models "pre" and "cls" of REPOSITORY.
ENSEMBLE = """name: "ens"
platform: "ensemble"   # runs pre, then cls
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "pre"
      model_version: -1
      input_map { key: "RAW" value: "IN" }
      output_map { key: "FEAT" value: "mid" }
    },
    {
      model_name: "cls"
      model_version: -1
      input_map { key: "X" value: "mid" }
      output_map { key: "Y" value: "OUT" }
    }
  ]
}
"""
PRE = """name: "pre"
backend: "python"
input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "FEAT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
CLS = """name: "cls"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "SCORES" data_type: TYPE_FP32 dims: [ 2 ] }
]
"""

# Fields no form shows, in odd layouts: a form save must keep every byte of them.
UNSHOWN = """name: "plain"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt" } ]
batch_input [
  {
    kind: BATCH_ACCUMULATED_ELEMENT_COUNT   # offsets of each request
    target_name: "INDEX"
    data_type: TYPE_FP32
    source_input: "IN"
  }
]
batch_output [{target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "IN"}]
dynamic_batching {
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy { key: 1 value { max_queue_size: 8 } }
}
instance_group [ { name: "gpu" count: 1 kind: KIND_GPU passive: false host_policy: "numa0" } ]
model_operations { op_library_filename: "libcustom_ops.so" }
model_repository_agents { agents [ { name: "checksum" parameters { key: "MD5:1/model.onnx" value: "abc" } } ] }
"""
# Half-written sections: every select must offer what the file has, so a browser posts it.
SPARSE = """name: "sparse"
backend: "python"
sequence_batching { control_input [ { name: "X" } ] state [ { input_name: "S" } ] }
instance_group [ { rate_limiter { } } ]
optimization {
  execution_accelerators { cpu_execution_accelerator [ { } ] }
  output_pinned_memory { enable: true }
}
model_warmup [ { inputs { key: "X" value { } } } ]
model_metrics { metric_control [ { } ] }
"""
UNSHOWN_LINES = [line for line in UNSHOWN.splitlines() if line.split(":")[0].strip() not in (
    "name", "backend", "max_batch_size", "max_queue_delay_microseconds", "priority_levels",
    "default_priority_level")]  # fmt: skip


def parsed(text: str) -> pb.ModelConfig:
    result = parse_config(text)
    assert result.config is not None, result.findings
    return result.config


def unchanged(text: str, name: str = NAME) -> dict[str, Any]:
    return form_building.post_data(form_building.build_forms(parsed(text), name))


def diff(before: str, after: str) -> list[str]:
    """The changed lines of a unified diff, as '-line' / '+line'."""
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("---", "+++"))
    ]


def edited(text: str, change):  # type: ignore[no-untyped-def]
    config = parsed(text)
    change(config)
    return config


def _set(obj: Any, attr: str, value: Any) -> None:
    setattr(obj, attr, value)


def _strategy_oldest(c: pb.ModelConfig) -> None:
    c.sequence_batching.oldest.max_candidate_sequences = 4  # replaces direct (a oneof)


def _add_end_control(c: pb.ModelConfig) -> None:
    ci = c.sequence_batching.control_input.add(name="END")
    ci.control.add(
        kind=pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END
    ).int32_false_true.extend([0, 1])


def _initial_zeros(c: pb.ModelConfig) -> None:
    st = c.sequence_batching.state[0]
    st.initial_state.add(name="STATE_IN_initial", data_type=pb.TYPE_FP32, dims=[-1], zero_data=True)


def _move_resource(c: pb.ModelConfig) -> None:
    del c.instance_group[0].rate_limiter.resources[:]
    c.instance_group[1].rate_limiter.resources.add(name="R1", count=4)


def _global_resource(c: pb.ModelConfig) -> None:
    r = c.instance_group[1].rate_limiter.resources.add(name="CPU_SLOT", count=1)
    setattr(r, "global", True)


def _set_buckets(c: pb.ModelConfig) -> None:
    del c.model_metrics.metric_control[0].histogram_options.buckets[:]
    c.model_metrics.metric_control[0].histogram_options.buckets.extend([1, 5, 10, 100])


def _graph_spec(c: pb.ModelConfig) -> None:
    spec = c.optimization.cuda.graph_spec.add(batch_size=4)
    spec.input["IN"].dim.extend([16])


CASES = [
    # (id, posted changes, the diff, the intended config)
    ("sequence idle time", {"cfg-seq_max_sequence_idle_microseconds": "2000000"},
     ["-  max_sequence_idle_microseconds: 5000000", "+  max_sequence_idle_microseconds: 2000000"],
     lambda c: _set(c.sequence_batching, "max_sequence_idle_microseconds", 2000000)),
    ("sequence direct slot utilization", {"cfg-seq_direct_minimum_slot_utilization": "0.5"},
     ["-  direct { max_queue_delay_microseconds: 100 }",
      "+  direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 }"],
     lambda c: _set(c.sequence_batching.direct, "minimum_slot_utilization", 0.5)),
    ("sequence strategy oldest",
     {"cfg-seq_strategy": "oldest", "cfg-seq_oldest_max_candidate_sequences": "4"},
     ["+  oldest { max_candidate_sequences: 4 }", "-  direct { max_queue_delay_microseconds: 100 }"],
     _strategy_oldest),
    ("sequence iterative", {"cfg-seq_iterative_sequence": "on"},
     ["+  iterative_sequence: true"],
     lambda c: _set(c.sequence_batching, "iterative_sequence", True)),
    ("control values", {"control_input-0-false_true": "1, 0"},
     ['-    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },',
      '+    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1, 0 ] } ] },'],
     lambda c: c.sequence_batching.control_input[0].control[0].int32_false_true.__setitem__(
         slice(None), [1, 0])),
    ("control data type", {"control_input-1-data_type": "TYPE_INT64"},
     ['-    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }',
      '+    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64 } ] }'],
     lambda c: _set(c.sequence_batching.control_input[1].control[0], "data_type", pb.TYPE_INT64)),
    ("control added",
     {"control_input-TOTAL_FORMS": "3", "control_input-2-name": "END",
      "control_input-2-kind": "CONTROL_SEQUENCE_END",
      "control_input-2-false_true_kind": "int32_false_true", "control_input-2-false_true": "0, 1"},
     ['-    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }',
      '+    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] },',
      '+    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }'],
     _add_end_control),
    ("state dims", {"seq_state-0-dims": "-1, 4"},
     ["-      dims: [ -1 ]", "+      dims: [ -1, 4 ]"],
     lambda c: c.sequence_batching.state[0].dims.append(4)),
    ("state initial zeros", {"seq_state-0-initial_state": "zero_data"},
     ["+      initial_state [", "+        {", "+          data_type: TYPE_FP32",
      "+          dims: [ -1 ]", "+          zero_data: true", '+          name: "STATE_IN_initial"',
      "+        }", "+      ]"],
     _initial_zeros),
    ("decoupled", {"cfg-decoupled": "on"},
     ["-model_transaction_policy { decoupled: false }", "+model_transaction_policy { decoupled: true }"],
     lambda c: _set(c.model_transaction_policy, "decoupled", True)),
    ("response cache", {"cfg-response_cache": "on"},
     ["-response_cache { enable: false }", "+response_cache { enable: true }"],
     lambda c: _set(c.response_cache, "enable", True)),
    ("warmup batch size", {"model_warmup-0-batch_size": "2"},
     ["-    batch_size: 1", "+    batch_size: 2"],
     lambda c: _set(c.model_warmup[0], "batch_size", 2)),
    ("warmup input data", {"warmup_input-0-data": "random_data"},
     ['-    inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }',
      '+    inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } }'],
     lambda c: _set(c.model_warmup[0].inputs["IN"], "random_data", True)),
    ("rate-limiter resource count", {"rl_resource-0-count": "2"},
     ['-  { count: 2 kind: KIND_GPU rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 1 } },',
      '+  { count: 2 kind: KIND_GPU rate_limiter { resources [ { name: "R1" count: 2 } ] priority: 1 } },'],
     lambda c: _set(c.instance_group[0].rate_limiter.resources[0], "count", 2)),
    ("rate-limiter priority", {"instance_group-0-rate_limiter_priority": "3"},
     ['-  { count: 2 kind: KIND_GPU rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 1 } },',
      '+  { count: 2 kind: KIND_GPU rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 3 } },'],
     lambda c: _set(c.instance_group[0].rate_limiter, "priority", 3)),
    ("rate-limiter global resource added",
     {"rl_resource-TOTAL_FORMS": "2", "rl_resource-1-parent": "1", "rl_resource-1-name": "CPU_SLOT",
      "rl_resource-1-count": "1", "rl_resource-1-global_": "on"},
     ["-  { count: 1 kind: KIND_CPU }",
      '+  { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "CPU_SLOT" global: true count: 1 } ] } }'],
     _global_resource),
    ("rate-limiter resource moved to another group", {"rl_resource-0-parent": "1"},
     ['-  { count: 2 kind: KIND_GPU rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 1 } },',
      "-  { count: 1 kind: KIND_CPU }",
      "+  { count: 2 kind: KIND_GPU rate_limiter { priority: 1 } },",
      '+  { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R1" count: 4 } ] } }'],
     _move_resource),
    ("graph level", {"cfg-opt_graph_level": "-1"},
     ["-  graph { level: 1 }", "+  graph { level: -1 }"],
     lambda c: _set(c.optimization.graph, "level", -1)),
    ("model priority", {"cfg-opt_priority": "PRIORITY_MAX"},
     ["+  priority: PRIORITY_MAX"],
     lambda c: _set(c.optimization, "priority", pb.ModelOptimizationPolicy.PRIORITY_MAX)),
    ("cuda graphs off", {"cfg-opt_cuda_graphs": ""},
     ["-  cuda { graphs: true }", "+  cuda { graphs: false }"],
     lambda c: _set(c.optimization.cuda, "graphs", False)),
    ("busy-wait events", {"cfg-opt_cuda_busy_wait_events": "on"},
     ["-  cuda { graphs: true }", "+  cuda { graphs: true busy_wait_events: true }"],
     lambda c: _set(c.optimization.cuda, "busy_wait_events", True)),
    ("cuda graph spec added",
     {"graph_spec-TOTAL_FORMS": "1", "graph_spec-0-batch_size": "4", "graph_spec-0-input": "IN: 16"},
     ["-  cuda { graphs: true }",
      '+  cuda { graphs: true graph_spec [ { batch_size: 4 input [ { key: "IN" value { dim: [ 16 ] } } ] } ] }'],
     _graph_spec),
    ("accelerator parameter", {"accelerator_param-0-value": "FP32"},
     ['-      { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } }  # half precision',
      '+      { name: "tensorrt" parameters { key: "precision_mode" value: "FP32" } }  # half precision'],
     lambda c: c.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters.__setitem__(
         "precision_mode", "FP32")),
    ("cpu accelerator added",
     {"accelerator-TOTAL_FORMS": "2", "accelerator-1-where": "cpu", "accelerator-1-name": "openvino"},
     ['+    cpu_execution_accelerator [ { name: "openvino" } ]'],
     lambda c: c.optimization.execution_accelerators.cpu_execution_accelerator.add(name="openvino")),
    ("input pinned memory back to the default", {"cfg-opt_input_pinned_memory": ""},
     ["-  input_pinned_memory { enable: false }"],
     lambda c: c.optimization.ClearField("input_pinned_memory")),
    ("gather kernel threshold", {"cfg-opt_gather_kernel_buffer_threshold": "2"},
     ["+  gather_kernel_buffer_threshold: 2"],
     lambda c: _set(c.optimization, "gather_kernel_buffer_threshold", 2)),
    ("eager batching", {"cfg-opt_eager_batching": "on"},
     ["+  eager_batching: true"],
     lambda c: _set(c.optimization, "eager_batching", True)),
    ("histogram buckets", {"metric_control-0-buckets": "1, 5, 10, 100"},
     ["-      histogram_options { buckets: [ 1, 10, 100 ] }",
      "+      histogram_options { buckets: [ 1, 5.0, 10, 100 ] }"],
     _set_buckets),
    ("metric tag", {"metric_tags-0-value": "speech"},
     ['-metric_tags { key: "team" value: "vision" }', '+metric_tags { key: "team" value: "speech" }'],
     lambda c: c.metric_tags.__setitem__("team", "speech")),
    ("cc model filename added",
     {"cc_model_filenames-TOTAL_FORMS": "1", "cc_model_filenames-0-key": "8.0",
      "cc_model_filenames-0-value": "model_sm80.onnx"},
     ['+cc_model_filenames [ { key: "8.0" value: "model_sm80.onnx" } ]'],
     lambda c: c.cc_model_filenames.__setitem__("8.0", "model_sm80.onnx")),
    ("runtime", {"cfg-runtime": "libtriton_onnxruntime.so"},
     ['+runtime: "libtriton_onnxruntime.so"'],
     lambda c: _set(c, "runtime", "libtriton_onnxruntime.so")),
]  # fmt: skip


def test_posting_every_section_unchanged_changes_nothing():
    result = form_mapping.read_form(NAME, FULL, unchanged(FULL))
    assert result.ok and not result.changed, form_mapping.field_errors(result.editor)
    assert result.text == FULL
    result = form_mapping.read_form("ens", ENSEMBLE, unchanged(ENSEMBLE, "ens"))
    assert result.ok and not result.changed and result.text == ENSEMBLE


@pytest.mark.parametrize(
    ("changes", "lines", "change"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_one_field_of_a_section_changes_that_line_and_reads_back(changes, lines, change):
    data = unchanged(FULL)
    data.update(changes)
    result = form_mapping.read_form(NAME, FULL, data)
    assert result.ok and result.changed, form_mapping.field_errors(result.editor)
    assert not result.rewrite_reason  # written in place: comments stay
    assert diff(FULL, result.text) == lines
    assert parsed(result.text) == edited(FULL, change) == result.config


ENSEMBLE_CASES = [
    ("step map value", {"step_map-1-value": "features"},
     ['-      output_map { key: "FEAT" value: "mid" }', '+      output_map { key: "FEAT" value: "features" }'],
     lambda c: c.ensemble_scheduling.step[0].output_map.__setitem__("FEAT", "features")),
    ("step map entry added",
     {"step_map-TOTAL_FORMS": "5", "step_map-4-parent": "1", "step_map-4-direction": "output",
      "step_map-4-key": "SCORES", "step_map-4-value": "scores"},
     ['+      output_map { key: "SCORES" value: "scores" }'],
     lambda c: c.ensemble_scheduling.step[1].output_map.__setitem__("SCORES", "scores")),
    ("step model version", {"step-1-model_version": "2"},
     ["-      model_version: -1", "+      model_version: 2"],
     lambda c: _set(c.ensemble_scheduling.step[1], "model_version", 2)),
    ("max in-flight requests", {"cfg-ens_max_inflight_requests": "16"},
     ["+  max_inflight_requests: 16"],
     lambda c: _set(c.ensemble_scheduling, "max_inflight_requests", 16)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "lines", "change"),
    [c[1:] for c in ENSEMBLE_CASES],
    ids=[c[0] for c in ENSEMBLE_CASES],
)
def test_an_ensemble_step_edit_changes_that_line_and_reads_back(changes, lines, change):
    data = unchanged(ENSEMBLE, "ens")
    data.update(changes)
    result = form_mapping.read_form("ens", ENSEMBLE, data)
    assert result.ok and result.changed, form_mapping.field_errors(result.editor)
    assert diff(ENSEMBLE, result.text) == lines
    assert parsed(result.text) == edited(ENSEMBLE, change) == result.config


def test_a_new_step_gets_the_latest_version_and_its_maps_from_the_map_table():
    data = unchanged(ENSEMBLE, "ens")
    data.update({
        # The row "Add row" gives posts its preset version -1; an emptied one means latest.
        "step-TOTAL_FORMS": "4", "step-2-model_name": "post", "step-2-model_version": "-1",
        "step-3-model_name": "audit", "step-3-model_version": "",
        "step_map-TOTAL_FORMS": "5", "step_map-4-parent": "2", "step_map-4-direction": "input",
        "step_map-4-key": "SCORES", "step_map-4-value": "OUT",
    })  # fmt: skip
    result = form_mapping.read_form("ens", ENSEMBLE, data)
    assert result.config is not None, form_mapping.field_errors(result.editor)
    new = result.config.ensemble_scheduling.step[2:]
    assert [(s.model_name, s.model_version, dict(s.input_map)) for s in new] == [
        ("post", -1, {"SCORES": "OUT"}),
        ("audit", -1, {}),
    ]
    assert result.config.ensemble_scheduling.step[:2] == parsed(ENSEMBLE).ensemble_scheduling.step


def test_a_map_key_written_twice_for_a_step_is_a_form_error():
    data = unchanged(ENSEMBLE, "ens")
    data.update({
        "step_map-TOTAL_FORMS": "5", "step_map-4-parent": "0", "step_map-4-direction": "input",
        "step_map-4-key": "RAW", "step_map-4-value": "other",
    })  # fmt: skip
    result = form_mapping.read_form("ens", ENSEMBLE, data)
    assert not result.ok
    assert "'RAW' is in this step's input_map twice" in str(
        form_mapping.field_errors(result.editor)["step_map-4-key"]
    )


@pytest.mark.parametrize(
    ("prefix", "key", "message"),
    [
        ("warmup_input", "IN", "input 'IN' is in this warmup sample twice"),
        ("warmup_input", "", "name the input"),
        ("accelerator_param", "precision_mode",
         "parameter 'precision_mode' is given twice for this accelerator"),
        ("accelerator_param", "", "a parameter needs a key"),
    ],
)  # fmt: skip
def test_a_keyed_child_row_needs_a_key_of_its_own(prefix, key, message):
    # A second row under the first one's parent, a copy of it but for its key.
    data = unchanged(FULL)
    data.update({
        k.replace(f"{prefix}-0-", f"{prefix}-1-"): v
        for k, v in data.items() if k.startswith(f"{prefix}-0-")
    })  # fmt: skip
    data.update({f"{prefix}-TOTAL_FORMS": "2", f"{prefix}-1-key": key})
    result = form_mapping.read_form(NAME, FULL, data)
    assert not result.ok
    assert form_mapping.field_errors(result.editor)[f"{prefix}-1-key"] == [message]


def test_a_second_scheduler_is_refused_on_its_field_not_silently_swapped():
    plain = 'name: "full"\nbackend: "python"\nmax_batch_size: 4\ndynamic_batching { }\n'
    data = unchanged(plain)
    data["cfg-seq_enabled"] = "on"
    result = form_mapping.read_form(NAME, plain, data)
    assert not result.ok
    assert "uses dynamic_batching" in str(
        form_mapping.field_errors(result.editor)["cfg-seq_enabled"]
    )
    # Sequence settings without ticking sequence batching say what is missing.
    data = unchanged(plain)
    data["cfg-seq_max_sequence_idle_microseconds"] = "10"
    result = form_mapping.read_form(NAME, plain, data)
    assert not result.ok and "tick this" in str(form_mapping.field_errors(result.editor))


def test_a_bad_control_value_is_a_format_error_and_findings_land_on_the_row():
    data = unchanged(FULL)
    data["control_input-0-false_true"] = "0, yes"
    result = form_mapping.read_form(NAME, FULL, data)
    assert not result.ok
    assert "'yes' is not a whole number" in str(
        form_mapping.field_errors(result.editor)["control_input-0-false_true"]
    )
    data = unchanged(FULL)
    data["control_input-0-false_true"] = "0, 1, 2"  # parses; the validator judges the count
    result = form_mapping.read_form(NAME, FULL, data)
    targets = form_mapping.finding_targets(result.editor, result.findings)
    counted = [t for f, t in zip(result.findings, targets, strict=True) if "exactly 2" in f.message]
    assert counted == ["control_input-0-false_true"]


def test_the_fields_no_form_shows_are_listed_with_their_lines():
    labels = [(u.label, u.line) for u in unshown_fields(UNSHOWN)]
    assert labels == [
        ("input[0]: allow_ragged_batch", 4),
        ("output[0]: label_filename", 5),
        ("batch_input", 6),
        ("batch_output", 14),
        ("dynamic_batching: priority_queue_policy", 19),
        ("instance_group[0]: name, passive, host_policy", 21),
        ("model_operations", 22),
        ("model_repository_agents", 23),
    ]
    assert unshown_fields(FULL) == []  # the form shows every field of FULL


def test_ensemble_graph_has_the_steps_as_nodes_and_the_tensors_as_edges():
    graph = ensemble_view.graph(parsed(ENSEMBLE))
    assert [(n["id"], n["label"]) for n in graph["nodes"]] == [
        ("in", "ensemble inputs"),
        ("step0", "pre"),
        ("step1", "cls"),
        ("out", "ensemble outputs"),
    ]
    assert [(e["from"], e["to"], e["tensor"]) for e in graph["edges"]] == [
        ("in", "step0", "IN"),
        ("step1", "out", "OUT"),
        ("step0", "step1", "mid"),
    ]
    broken = parsed(ENSEMBLE.replace('value: "mid" }\n    },', 'value: "mid2" }\n    },'))
    edges = {e["tensor"]: e for e in ensemble_view.graph(broken)["edges"]}
    assert edges["mid"]["missing"] and edges["mid2"]["unused"]


# --- through the page ---------------------------------------------------------------------


@pytest.fixture()
def repo(tmp_path: Path, settings, monkeypatch) -> Path:
    # These configs name GPUs: judge them without a server, whether or not the suite's
    # CPU-only Triton (a session fixture that re-points settings) has started by now.
    monkeypatch.setattr("repository_app.server_facts.server_facts", lambda *_: None)
    root = tmp_path / "repo"
    for name, text in {
        NAME: FULL,
        "ens": ENSEMBLE,
        "pre": PRE,
        "cls": CLS,
        "plain": UNSHOWN,
        "tpl": TEMPLATE,
        "sparse": SPARSE,
    }.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(text)
    settings.MODEL_REPOSITORY = root
    return root


def client_for(django_user_model, name: str, role: str) -> Client:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user(name, password=f"pw-{name}-12345")
    set_role(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def operator(django_user_model) -> Client:  # type: ignore[no-untyped-def]
    return client_for(django_user_model, "otto", OPERATOR)


@pytest.fixture()
def admin(django_user_model) -> Client:  # type: ignore[no-untyped-def]
    return client_for(django_user_model, "ada", ADMIN)


def on_disk(root: Path, name: str) -> str:
    return (root / name / "config.pbtxt").read_text()


def form_post(root: Path, name: str, action: str = "save", **changes: str) -> dict[str, str]:
    text = on_disk(root, name)
    data = unchanged(text, name)
    data.update(
        mode="form", action=action, base_sha=saving.read_current(name, servers.default()).sha256
    )
    data.update(base_text=text, **changes)
    return data


@pytest.mark.django_db
def test_a_form_save_keeps_the_fields_with_no_form_byte_for_byte(repo, admin):
    page = admin.get("/models/plain/config/").content.decode()
    assert 'id="unshown-fields"' in page and "model_repository_agents" in page
    assert '<code>batch_input</code> <span class="small muted">(line 6)</span>' in page
    response = admin.post(
        "/models/plain/config/",
        form_post(
            repo,
            "plain",
            **{
                "cfg-max_batch_size": "8",
                "cfg-opt_eager_batching": "on",
                "model_warmup-TOTAL_FORMS": "1",
                "model_warmup-0-name": "w",
                "model_warmup-0-batch_size": "1",
            },
        ),
    )
    assert response.status_code == 302, response.content.decode()[-3000:]
    after = on_disk(repo, "plain")
    for line in UNSHOWN_LINES:
        assert line in after.splitlines(), f"lost or changed: {line!r}"
    assert diff(UNSHOWN, after) == [
        "-max_batch_size: 16",
        "+max_batch_size: 8",
        "+optimization { eager_batching: true }",
        '+model_warmup [ { name: "w" batch_size: 1 } ]',
    ]


@pytest.mark.django_db
def test_an_operator_changing_an_accelerator_path_parameter_gets_the_403(repo, operator, admin):
    changes = {
        "accelerator_param-TOTAL_FORMS": "2",
        "accelerator_param-1-parent": "0",
        "accelerator_param-1-key": "trt_engine_cache_path",
        "accelerator_param-1-value": "/tmp/engines",
    }
    response = operator.post(f"/models/{NAME}/config/", form_post(repo, NAME, **changes))
    assert response.status_code == 403
    html = response.content.decode()
    assert "only admins" in html.lower() and "trt_engine_cache_path" in html
    assert on_disk(repo, NAME) == FULL
    # A tuning parameter is not code: the Operator may change it.
    tuned = form_post(repo, NAME, **{"accelerator_param-0-value": "FP32"})
    assert operator.post(f"/models/{NAME}/config/", tuned).status_code == 302
    # An Admin may set the path.
    response = admin.post(f"/models/{NAME}/config/", form_post(repo, NAME, **changes))
    assert response.status_code == 302
    assert 'key: "trt_engine_cache_path" value: "/tmp/engines"' in on_disk(repo, NAME)


@pytest.mark.django_db
def test_the_live_check_judges_with_the_servers_version(repo, operator, monkeypatch):
    facts = ServerFacts(gpus_known=False, version=(2, 50))
    monkeypatch.setattr("repository_app.server_facts.server_facts", lambda *_: facts)
    data = form_post(repo, "plain", action="check")
    data.update({
        "metric_control-TOTAL_FORMS": "1",
        "metric_control-0-family": "nv_inference_first_response_histogram_ms",
        "metric_control-0-buckets": "1, 10",
    })  # fmt: skip
    body = operator.post("/models/plain/config/", data, HTTP_ACCEPT="application/json").json()
    newer = [f for f in body["findings"] if "2.52" in f["message"]]
    assert newer and newer[0]["severity"] == "error" and "2.50" in newer[0]["message"]
    assert newer[0]["target"] == "table:metric_control"
    # The save refuses it with the same facts, and says so on the page.
    data["action"] = "save"
    response = operator.post("/models/plain/config/", data)
    assert response.status_code == 422 and "2.52" in response.content.decode()
    assert on_disk(repo, "plain") == UNSHOWN


@pytest.mark.django_db
def test_the_ensemble_page_offers_the_step_models_tensors_and_draws_the_graph(repo, operator):
    html = operator.get("/models/ens/config/").content.decode()
    assert 'id="ensemble-graph"' in html and 'id="ensemble-data"' in html
    assert '<datalist id="step-output-cls"><option value="Y">' in html
    assert '<option value="SCORES">' in html
    assert 'list="ensemble-tensors"' in html and '<option value="mid">' in html
    # The live check answers with the graph of the form as it is now.
    data = form_post(repo, "ens", action="check", **{"step_map-1-value": "features"})
    body = operator.post("/models/ens/config/", data, HTTP_ACCEPT="application/json").json()
    tensors = {e["tensor"] for e in body["ensemble_graph"]["edges"]}
    assert "features" in tensors


@pytest.mark.django_db
def test_an_ensemble_map_edit_saves_that_line(repo, operator):
    response = operator.post(
        "/models/ens/config/", form_post(repo, "ens", **{"step_map-1-value": "features",
                                                         "step_map-2-value": "features"})
    )  # fmt: skip
    assert response.status_code == 302
    assert diff(ENSEMBLE, on_disk(repo, "ens")) == [
        '-      output_map { key: "FEAT" value: "mid" }',
        '+      output_map { key: "FEAT" value: "features" }',
        '-      input_map { key: "X" value: "mid" }',
        '+      input_map { key: "X" value: "features" }',
    ]
    assert ConfigRevision.objects.filter(model="ens", source="form").count() == 1


TEMPLATE = """name: "tpl"
backend: "python"
max_batch_size: ${triton_max_batch_size}
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters { key: "engine_dir" value { string_value: "${engine_dir}" } }
dynamic_batching { max_queue_delay_microseconds: ${max_queue_delay_microseconds} }
"""


@pytest.mark.django_db
def test_a_template_shows_the_banner_and_filling_it_gives_unsaved_text(repo, operator):
    response = operator.get("/models/tpl/config/")
    html = response.content.decode()
    assert 'id="template-banner"' in html and "This is a template" in html
    for name, where in (
        ("triton_max_batch_size", "3:17"),
        ("engine_dir", "5:55"),
        ("max_queue_delay_microseconds", "6:50"),
    ):
        assert f'data-placeholder="{name}"' in html and where in html
    assert 'name="tpl-engine_dir"' in html
    response = operator.post("/models/tpl/config/", {
        "mode": "text", "action": "fill_template", "text": TEMPLATE,
        "base_sha": saving.read_current("tpl", servers.default()).sha256,
        "tpl-triton_max_batch_size": "8", "tpl-engine_dir": "/engines/llama",
    })  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200 and 'name="mode" value="text"' in html
    assert "max_batch_size: 8\n" in html and "string_value: &quot;/engines/llama&quot;" in html
    assert "still to fill: ${max_queue_delay_microseconds}" in html
    assert on_disk(repo, "tpl") == TEMPLATE  # nothing saved


def test_every_top_level_field_has_a_form_or_is_named_text_mode_only():
    """A ModelConfig field of a newer tritonclient must be given a form or named."""
    from repository_app.editor.coverage import FORM_FIELDS, TEXT_MODE_ONLY

    shown = {f.split(".", 1)[0] for f in FORM_FIELDS}
    for fd in pb.ModelConfig.DESCRIPTOR.fields:
        assert (fd.name in shown) != (fd.name in TEXT_MODE_ONLY), fd.name
    assert sorted(TEXT_MODE_ONLY) == [
        "batch_input",
        "batch_output",
        "model_operations",
        "model_repository_agents",
    ]


class _BrowserForm(HTMLParser):
    """What a browser posts for the editor's form as rendered: text inputs' values,
    checked boxes, each select's selected (or first) option, textareas; never the rows of
    a <template> (the "Add row" prototypes)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}
        self.in_form = self.in_template = False
        self.select: str | None = None
        self.select_first: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id") == "editor-form":
            self.in_form = True
        if not self.in_form or self.in_template or "disabled" in a:
            if tag == "template":
                self.in_template = True
            return
        if tag == "template":
            self.in_template = True
        elif tag == "input" and a.get("name"):
            kind = a.get("type", "text")
            if kind in ("submit", "button"):
                return
            if kind == "checkbox":
                if "checked" in a:
                    self.data[a["name"]] = a.get("value") or "on"
            else:
                self.data[a["name"]] = a.get("value", "")
        elif tag == "select":
            self.select, self.select_first = a.get("name"), None
        elif tag == "option" and self.select:
            if self.select_first is None:
                self.select_first = a.get("value", "")
                self.data.setdefault(self.select, self.select_first)
            if "selected" in a:
                self.data[self.select] = a.get("value", "")
        elif tag == "textarea":
            self.textarea = a.get("name")
            self.data[self.textarea] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "template":
            self.in_template = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None
        elif tag == "form":
            self.in_form = False

    def handle_data(self, data: str) -> None:
        if self.textarea and not self.in_template:
            self.data[self.textarea] += data


def as_a_browser_posts(html: str) -> dict[str, str]:
    parser = _BrowserForm()
    parser.feed(html)
    data = parser.data
    if "base_text" in data:  # a browser drops the newline that opens a textarea
        data["base_text"] = html_unescape(data["base_text"]).removeprefix("\n")
    return {k: html_unescape(v) for k, v in data.items()}


@pytest.mark.django_db
@pytest.mark.parametrize("model", [NAME, "ens", "plain", "sparse"])
def test_saving_the_form_as_the_browser_shows_it_changes_nothing(repo, admin, model):
    before = on_disk(repo, model)
    html = admin.get(f"/models/{model}/config/").content.decode()
    data = as_a_browser_posts(html)
    assert data["mode"] == "form"
    response = admin.post(f"/models/{model}/config/", {**data, "action": "save"})
    assert response.status_code == 200, response.content.decode()[-2000:]
    assert "Nothing changed in the form" in response.content.decode()
    assert on_disk(repo, model) == before
