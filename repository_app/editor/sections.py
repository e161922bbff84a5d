"""The config sections beyond the basics in the editor's form (sequence batching, ensembles,
warmup, rate limiting, optimization, policies, model_metrics, string maps): which tables
they have, where each field and table sits in the config (for labels and findings), and
their initial values, the forms built from them.

What the user changed is applied by ``section_apply`` (tables whose rows belong to rows of
another table: ``section_children``); findings go onto these forms in ``section_findings``.
Nothing here touches a field the form does not show (``coverage`` lists those for the page).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from . import section_forms as sf
from .fields import float32_shortest

Control = pb.ModelSequenceBatching.Control

SEQ_DIRECT = ("seq_direct_max_queue_delay_microseconds", "seq_direct_minimum_slot_utilization")
SEQ_OLDEST = (
    "seq_oldest_max_candidate_sequences",
    "seq_oldest_preferred_batch_size",
    "seq_oldest_max_queue_delay_microseconds",
    "seq_oldest_preserve_ordering",
)
SEQ_COMMON = ("seq_max_sequence_idle_microseconds", "seq_iterative_sequence")
SEQ_FIELDS = ("seq_strategy", *SEQ_DIRECT, *SEQ_OLDEST, *SEQ_COMMON)

# prefix -> (form set class, the parent table's prefix or "")
TABLES: dict[str, tuple[Any, str]] = {
    "control_input": (sf.ControlInputFormSet, ""),
    "seq_state": (sf.StateFormSet, ""),
    "step": (sf.StepFormSet, ""),
    "step_map": (sf.StepMapFormSet, "step"),
    "model_warmup": (sf.WarmupFormSet, ""),
    "warmup_input": (sf.WarmupInputFormSet, "model_warmup"),
    "rl_resource": (sf.ResourceFormSet, "instance_group"),
    "graph_spec": (sf.GraphSpecFormSet, ""),
    "accelerator": (sf.AcceleratorFormSet, ""),
    "accelerator_param": (sf.AcceleratorParamFormSet, "accelerator"),
    "metric_control": (sf.MetricControlFormSet, ""),
    "cc_model_filenames": (sf.StringMapFormSet, ""),
    "metric_tags": (sf.StringMapFormSet, ""),
}
PARENT_NAMES = {
    "step": "Step",
    "model_warmup": "Warmup sample",
    "instance_group": "Instance group",
    "accelerator": "Accelerator",
}
# Where each table's elements live, as a validator field path (for placing findings).
TABLE_PATHS = {
    "control_input": "sequence_batching.control_input",
    "seq_state": "sequence_batching.state",
    "step": "ensemble_scheduling.step",
    "model_warmup": "model_warmup",
    "graph_spec": "optimization.cuda.graph_spec",
    "metric_control": "model_metrics.metric_control",
}
# The main form's fields by the config path they edit (longest prefix wins).
FIELD_PATHS = {
    "sequence_batching": "seq_enabled",
    "sequence_batching.direct": "seq_strategy",
    "sequence_batching.oldest": "seq_strategy",
    "sequence_batching.direct.max_queue_delay_microseconds": SEQ_DIRECT[0],
    "sequence_batching.direct.minimum_slot_utilization": SEQ_DIRECT[1],
    "sequence_batching.oldest.max_candidate_sequences": SEQ_OLDEST[0],
    "sequence_batching.oldest.preferred_batch_size": SEQ_OLDEST[1],
    "sequence_batching.oldest.max_queue_delay_microseconds": SEQ_OLDEST[2],
    "sequence_batching.oldest.preserve_ordering": SEQ_OLDEST[3],
    "sequence_batching.max_sequence_idle_microseconds": SEQ_COMMON[0],
    "sequence_batching.iterative_sequence": SEQ_COMMON[1],
    "model_transaction_policy": "decoupled",
    "response_cache": "response_cache",
    "ensemble_scheduling.max_inflight_requests": "ens_max_inflight_requests",
    "optimization.graph": "opt_graph_level",
    "optimization.priority": "opt_priority",
    "optimization.cuda.graphs": "opt_cuda_graphs",
    "optimization.cuda.busy_wait_events": "opt_cuda_busy_wait_events",
    "optimization.cuda.output_copy_stream": "opt_cuda_output_copy_stream",
    "optimization.input_pinned_memory": "opt_input_pinned_memory",
    "optimization.output_pinned_memory": "opt_output_pinned_memory",
    "optimization.gather_kernel_buffer_threshold": "opt_gather_kernel_buffer_threshold",
    "optimization.eager_batching": "opt_eager_batching",
    "runtime": "runtime",
}

# The config path a main-form field edits, for messages ("cannot read ...").
MAIN_LABELS = {field: path for path, field in FIELD_PATHS.items()} | {
    "seq_enabled": "sequence_batching",
    "seq_strategy": "sequence_batching strategy (direct or oldest)",
    "decoupled": "model_transaction_policy.decoupled",
    "response_cache": "response_cache.enable",
    "opt_graph_level": "optimization.graph.level",
    "opt_input_pinned_memory": "optimization.input_pinned_memory.enable",
    "opt_output_pinned_memory": "optimization.output_pinned_memory.enable",
}


def none_if_zero(value: Any) -> Any:
    """A proto number as the form shows it: 0 (not set) is an empty field."""
    return value or None


def enum_number(enum: Any, value: str) -> int:
    """The number of an enum value's name; "" (not set) is 0."""
    return int(enum.Value(value)) if value else 0


def _dtype(value: int) -> str:
    return pb.DataType.Name(value) if value else ""


# --- initial values ----------------------------------------------------------------------


def main_initial(config: pb.ModelConfig) -> dict[str, Any]:
    """The mixins' fields as the file has them."""
    sb = config.sequence_batching
    strategy = sb.WhichOneof("strategy_choice") or ""
    opt = config.optimization
    cuda = opt.cuda

    def pinned(name: str) -> str:
        if not opt.HasField(name):
            return ""
        return "on" if getattr(opt, name).enable else "off"

    return {
        "runtime": config.runtime,
        "seq_enabled": config.HasField("sequence_batching"),
        "seq_strategy": strategy,
        SEQ_DIRECT[0]: none_if_zero(sb.direct.max_queue_delay_microseconds),
        SEQ_DIRECT[1]: none_if_zero(float32_shortest(sb.direct.minimum_slot_utilization)),
        SEQ_OLDEST[0]: none_if_zero(sb.oldest.max_candidate_sequences),
        SEQ_OLDEST[1]: list(sb.oldest.preferred_batch_size),
        SEQ_OLDEST[2]: none_if_zero(sb.oldest.max_queue_delay_microseconds),
        SEQ_OLDEST[3]: sb.oldest.preserve_ordering,
        SEQ_COMMON[0]: none_if_zero(sb.max_sequence_idle_microseconds),
        SEQ_COMMON[1]: sb.iterative_sequence,
        "decoupled": config.model_transaction_policy.decoupled,
        "response_cache": config.response_cache.enable,
        "ens_max_inflight_requests": none_if_zero(config.ensemble_scheduling.max_inflight_requests),
        "opt_graph_level": opt.graph.level if opt.HasField("graph") else None,
        "opt_priority": pb.ModelOptimizationPolicy.ModelPriority.Name(opt.priority)
        if opt.priority
        else "",
        "opt_cuda_graphs": cuda.graphs,
        "opt_cuda_busy_wait_events": cuda.busy_wait_events,
        "opt_cuda_output_copy_stream": cuda.output_copy_stream,
        "opt_input_pinned_memory": pinned("input_pinned_memory"),
        "opt_output_pinned_memory": pinned("output_pinned_memory"),
        "opt_gather_kernel_buffer_threshold": none_if_zero(opt.gather_kernel_buffer_threshold),
        "opt_eager_batching": opt.eager_batching,
    }


def _false_true(ctrl: Any) -> tuple[str, str]:
    for kind in ("int32_false_true", "fp32_false_true", "bool_false_true"):
        values = list(getattr(ctrl, kind))
        if values:
            return kind, sf.false_true_text(kind, values)
    return "", ""


def _control_row(ci: Any) -> dict[str, Any]:
    if not ci.control:
        return {"name": ci.name, "kind": "", "false_true_kind": "", "false_true": "",
                "data_type": ""}  # fmt: skip
    ctrl = ci.control[0]
    kind, values = _false_true(ctrl)
    return {
        "name": ci.name,
        "kind": Control.Kind.Name(ctrl.kind),
        "false_true_kind": kind,
        "false_true": values,
        "data_type": _dtype(ctrl.data_type),
    }


def _state_row(st: Any) -> dict[str, Any]:
    init = st.initial_state[0] if st.initial_state else None
    which = init.WhichOneof("state_data") if init is not None else None
    return {
        "input_name": st.input_name,
        "output_name": st.output_name,
        "data_type": _dtype(st.data_type),
        "dims": list(st.dims),
        "use_same_buffer_for_input_output": st.use_same_buffer_for_input_output,
        "use_growable_memory": st.use_growable_memory,
        "initial_state": which or "",
        "initial_data_file": init.data_file if init is not None else "",
    }


def accelerators(config: pb.ModelConfig) -> list[tuple[str, Any]]:
    """The execution accelerators as the table lists them: the GPU ones, then the CPU ones."""
    ea = config.optimization.execution_accelerators
    return [("gpu", a) for a in ea.gpu_execution_accelerator] + [
        ("cpu", a) for a in ea.cpu_execution_accelerator
    ]


def _warmup_input_row(parent: int, key: str, value: Any) -> dict[str, Any]:
    return {
        "parent": parent,
        "key": key,
        "data_type": _dtype(value.data_type),
        "dims": list(value.dims),
        "data": value.WhichOneof("input_data_type") or "",
        "input_data_file": value.input_data_file,
    }


def table_initial(config: pb.ModelConfig) -> dict[str, list[dict[str, Any]]]:
    """Each table's rows as the file has them (child rows carry their parent's row)."""
    sb = config.sequence_batching
    steps = config.ensemble_scheduling.step
    return {
        "control_input": [_control_row(ci) for ci in sb.control_input],
        "seq_state": [_state_row(st) for st in sb.state],
        "step": [{"model_name": s.model_name, "model_version": s.model_version} for s in steps],
        "step_map": [
            {"parent": i, "direction": direction, "key": key, "value": getattr(s, attr)[key]}
            for i, s in enumerate(steps)
            for direction, attr in (("input", "input_map"), ("output", "output_map"))
            for key in sorted(getattr(s, attr))
        ],
        "model_warmup": [
            {"name": w.name, "batch_size": w.batch_size, "count": none_if_zero(w.count)}
            for w in config.model_warmup
        ],
        "warmup_input": [
            _warmup_input_row(i, key, w.inputs[key])
            for i, w in enumerate(config.model_warmup)
            for key in sorted(w.inputs)
        ],
        "rl_resource": [
            {"parent": i, "name": r.name, "global_": getattr(r, "global"), "count": r.count}
            for i, g in enumerate(config.instance_group)
            for r in g.rate_limiter.resources
        ],
        "graph_spec": [
            {
                "batch_size": g.batch_size,
                "input": {k: list(g.input[k].dim) for k in sorted(g.input)},
            }
            for g in config.optimization.cuda.graph_spec
        ],
        "accelerator": [{"where": w, "name": a.name} for w, a in accelerators(config)],
        "accelerator_param": [
            {"parent": i, "key": key, "value": a.parameters[key]}
            for i, (_, a) in enumerate(accelerators(config))
            for key in sorted(a.parameters)
        ],
        "metric_control": [
            {
                "family": m.metric_identifier.family,
                "buckets": list(m.histogram_options.buckets),
            }
            for m in config.model_metrics.metric_control
        ],
        "cc_model_filenames": [
            {"key": k, "value": config.cc_model_filenames[k]}
            for k in sorted(config.cc_model_filenames)
        ],
        "metric_tags": [
            {"key": k, "value": config.metric_tags[k]} for k in sorted(config.metric_tags)
        ],
    }


def parent_labels(config: pb.ModelConfig) -> dict[str, list[str]]:
    """How each parent table's rows are named in its children's "parent" column."""
    return {
        "step": [f"{i + 1}: {s.model_name or '?'}" for i, s in enumerate(config.ensemble_scheduling.step)],
        "model_warmup": [f"{i + 1}: {w.name or '?'}" for i, w in enumerate(config.model_warmup)],
        "instance_group": [
            f"{i + 1}: {g.count or 1} × {pb.ModelInstanceGroup.Kind.Name(g.kind)}"
            for i, g in enumerate(config.instance_group)
        ],
        "accelerator": [f"{i + 1}: {w} {a.name or '?'}" for i, (w, a) in enumerate(accelerators(config))],
    }  # fmt: skip


def _parent_choices(labels: list[str], data: Mapping[str, Any] | None, prefix: str) -> list:
    count = len(labels)
    if data is not None:
        # Rows added in the browser (TOTAL_FORMS); bounded as Django bounds formsets.
        with contextlib.suppress(TypeError, ValueError):
            count = max(count, min(int(data.get(f"{prefix}-TOTAL_FORMS", 0)), count + 1000))
    return [(i, labels[i] if i < len(labels) else f"{i + 1}: (new row)") for i in range(count)]


def build_tables(
    config: pb.ModelConfig, data: Mapping[str, Any] | None
) -> dict[str, djforms.BaseFormSet]:
    initial = table_initial(config)
    labels = parent_labels(config)
    tables: dict[str, djforms.BaseFormSet] = {}
    for prefix, (formset_class, parent) in TABLES.items():
        kwargs: dict[str, Any] = {}
        if parent:
            kwargs["form_kwargs"] = {
                "parent_choices": _parent_choices(labels[parent], data, parent),
                "parent_label": PARENT_NAMES[parent],
            }
        tables[prefix] = formset_class(data, initial=initial[prefix], prefix=prefix, **kwargs)
    return tables
