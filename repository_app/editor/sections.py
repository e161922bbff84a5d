"""The rest of ModelConfig in the editor's form: initial values, the tables, and applying
what changed (the counterpart of form_mapping for the first sections).

Same contract as form_mapping: a copy of the base config gets exactly the fields Django
reports as changed; tables are matched by position (row i edits element i); a table whose
rows belong to rows of another table (``CHILD_TABLES``: rate-limiter resources, warmup
inputs, ensemble tensor maps, accelerator parameters) rebuilds only the parents whose rows
changed, from rows that show every field of the child, so an untouched child reads back
equal and ``text_edit.edit_in_place`` leaves its line alone. Nothing here touches a field
the form does not show (``coverage`` lists those for the page).

A model has one scheduler (dynamic batching, sequence batching or an ensemble): setting
one field of another scheduler would silently drop the file's own (a protobuf oneof), so
that is refused with a message on the field instead.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from . import section_forms as sf
from .fields import float32_shortest
from .rows import apply_rows, changed, deleted, formset_changed, row_values

Control = pb.ModelSequenceBatching.Control
Accelerator = pb.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator

SEQ_DIRECT = ("seq_direct_max_queue_delay_microseconds", "seq_direct_minimum_slot_utilization")
SEQ_OLDEST = (
    "seq_oldest_max_candidate_sequences",
    "seq_oldest_preferred_batch_size",
    "seq_oldest_max_queue_delay_microseconds",
    "seq_oldest_preserve_ordering",
)
SEQ_COMMON = ("seq_max_sequence_idle_microseconds", "seq_iterative_sequence")
SEQ_FIELDS = ("seq_strategy", *SEQ_DIRECT, *SEQ_OLDEST, *SEQ_COMMON)
OPT_FIELDS = tuple(sf.OptimizationFields.base_fields)
SCHEDULERS = ("dynamic_batching", "sequence_batching", "ensemble_scheduling")

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


def _none_if_zero(value: Any) -> Any:
    return value or None


def _enum(enum: Any, value: str) -> int:
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
        SEQ_DIRECT[0]: _none_if_zero(sb.direct.max_queue_delay_microseconds),
        SEQ_DIRECT[1]: _none_if_zero(float32_shortest(sb.direct.minimum_slot_utilization)),
        SEQ_OLDEST[0]: _none_if_zero(sb.oldest.max_candidate_sequences),
        SEQ_OLDEST[1]: list(sb.oldest.preferred_batch_size),
        SEQ_OLDEST[2]: _none_if_zero(sb.oldest.max_queue_delay_microseconds),
        SEQ_OLDEST[3]: sb.oldest.preserve_ordering,
        SEQ_COMMON[0]: _none_if_zero(sb.max_sequence_idle_microseconds),
        SEQ_COMMON[1]: sb.iterative_sequence,
        "decoupled": config.model_transaction_policy.decoupled,
        "response_cache": config.response_cache.enable,
        "ens_max_inflight_requests": _none_if_zero(
            config.ensemble_scheduling.max_inflight_requests
        ),
        "opt_graph_level": opt.graph.level if opt.HasField("graph") else None,
        "opt_priority": pb.ModelOptimizationPolicy.ModelPriority.Name(opt.priority)
        if opt.priority
        else "",
        "opt_cuda_graphs": cuda.graphs,
        "opt_cuda_busy_wait_events": cuda.busy_wait_events,
        "opt_cuda_output_copy_stream": cuda.output_copy_stream,
        "opt_input_pinned_memory": pinned("input_pinned_memory"),
        "opt_output_pinned_memory": pinned("output_pinned_memory"),
        "opt_gather_kernel_buffer_threshold": _none_if_zero(opt.gather_kernel_buffer_threshold),
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


def _accelerators(config: pb.ModelConfig) -> list[tuple[str, Any]]:
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
            {"name": w.name, "batch_size": w.batch_size, "count": _none_if_zero(w.count)}
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
        "accelerator": [{"where": w, "name": a.name} for w, a in _accelerators(config)],
        "accelerator_param": [
            {"parent": i, "key": key, "value": a.parameters[key]}
            for i, (_, a) in enumerate(_accelerators(config))
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
        "accelerator": [f"{i + 1}: {w} {a.name or '?'}" for i, (w, a) in enumerate(_accelerators(config))],
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


# --- applying the changes ----------------------------------------------------------------


@dataclass
class SectionRows:
    """Where each table row landed, for placing findings on rows."""

    rows: dict[str, list[int]]
    # prefix -> {(parent element, key or position): row}
    children: dict[str, dict[tuple[int, Any], int]]
    maps: dict[str, dict[str, int]]


def _other_scheduler(config: pb.ModelConfig, mine: str) -> str | None:
    current = config.WhichOneof("scheduling_choice")
    return current if current and current != mine else None


def _scheduler_refusal(other: str, mine: str) -> str:
    return (
        f"this model uses {other}; a model has exactly one scheduler, so {mine} cannot be "
        f"added: remove {other} first"
    )


def _apply_sequence(config: pb.ModelConfig, form: djforms.Form, tables: dict) -> bool:
    names = set(form.changed_data) - set(form.errors)
    data = form.cleaned_data
    enabled = bool(data.get("seq_enabled"))
    touched = bool(names & set(SEQ_FIELDS)) or any(
        formset_changed(tables[p]) for p in ("control_input", "seq_state")
    )
    if not enabled:
        if "seq_enabled" in names:
            config.ClearField("sequence_batching")
        elif touched:
            form.add_error(
                "seq_enabled", "tick this to use sequence batching: the settings below need it"
            )
            return False
        return True
    if not config.HasField("sequence_batching"):
        other = _other_scheduler(config, "sequence_batching")
        if other:
            form.add_error("seq_enabled", _scheduler_refusal(other, "sequence batching"))
            return False
        config.sequence_batching.SetInParent()
    sb = config.sequence_batching
    current = sb.WhichOneof("strategy_choice") or ""
    selected = data.get("seq_strategy") or ""
    if not selected and names & set(SEQ_DIRECT):
        selected = "direct"  # "(not set: direct)" with a direct field filled in
    if selected != current:
        if current:
            sb.ClearField(current)
        if selected:
            getattr(sb, selected).SetInParent()
    # Only the chosen strategy's fields count (the page hides the other's).
    if selected == "direct":
        if SEQ_DIRECT[0] in names:
            sb.direct.max_queue_delay_microseconds = data[SEQ_DIRECT[0]] or 0
        if SEQ_DIRECT[1] in names:
            sb.direct.minimum_slot_utilization = data[SEQ_DIRECT[1]] or 0.0
    elif selected == "oldest":
        if SEQ_OLDEST[0] in names:
            sb.oldest.max_candidate_sequences = data[SEQ_OLDEST[0]] or 0
        if SEQ_OLDEST[1] in names:
            del sb.oldest.preferred_batch_size[:]
            sb.oldest.preferred_batch_size.extend(data[SEQ_OLDEST[1]] or [])
        if SEQ_OLDEST[2] in names:
            sb.oldest.max_queue_delay_microseconds = data[SEQ_OLDEST[2]] or 0
        if SEQ_OLDEST[3] in names:
            sb.oldest.preserve_ordering = bool(data[SEQ_OLDEST[3]])
    if SEQ_COMMON[0] in names:
        sb.max_sequence_idle_microseconds = data[SEQ_COMMON[0]] or 0
    if SEQ_COMMON[1] in names:
        sb.iterative_sequence = bool(data[SEQ_COMMON[1]])
    return True


def _apply_control_row(ci: Any, form: djforms.Form, names: list[str]) -> None:
    data = form.cleaned_data
    if "name" in names:
        ci.name = data.get("name") or ""
    rest = set(names) - {"name"}
    if not rest:
        return
    ctrl = ci.control[0] if ci.control else ci.control.add()
    if "kind" in rest and data.get("kind"):
        ctrl.kind = Control.Kind.Value(data["kind"])
    if "data_type" in rest:
        ctrl.data_type = _enum(pb.DataType, data.get("data_type") or "")
    if rest & {"false_true_kind", "false_true"} and "false_true" not in form.errors:
        for kind in ("int32_false_true", "fp32_false_true", "bool_false_true"):
            ctrl.ClearField(kind)
        kind = data.get("false_true_kind") or ""
        if kind:
            getattr(ctrl, kind).extend(data.get("false_true_values") or [])


def _apply_state_row(st: Any, form: djforms.Form, names: list[str]) -> None:
    data = form.cleaned_data
    for name in ("input_name", "output_name"):
        if name in names:
            setattr(st, name, data.get(name) or "")
    if "data_type" in names:
        st.data_type = _enum(pb.DataType, data.get("data_type") or "")
    if "dims" in names:
        del st.dims[:]
        st.dims.extend(data.get("dims") or [])
    for name in ("use_same_buffer_for_input_output", "use_growable_memory"):
        if name in names:
            setattr(st, name, bool(data.get(name)))
    if not {"initial_state", "initial_data_file"} & set(names):
        return
    choice = data.get("initial_state") or ""
    if not choice:
        del st.initial_state[:]
        return
    if st.initial_state:
        init = st.initial_state[0]
    else:  # a new initial state describes the state itself
        init = st.initial_state.add()
        init.name = f"{st.input_name or 'state'}_initial"
        init.data_type = st.data_type
        init.dims.extend(st.dims)
    if choice == "zero_data":
        init.zero_data = True
    else:
        init.data_file = data.get("initial_data_file") or ""


def _apply_step_row(step: Any, form: djforms.Form, names: list[str]) -> None:
    data = form.cleaned_data
    if "model_name" in names:
        step.model_name = data.get("model_name") or ""
    if "model_version" in names:
        version = data.get("model_version")
        step.model_version = -1 if version is None else version


def _apply_warmup_row(w: Any, form: djforms.Form, names: list[str]) -> None:
    data = form.cleaned_data
    if "name" in names:
        w.name = data.get("name") or ""
    for name in ("batch_size", "count"):
        if name in names:
            setattr(w, name, data.get(name) or 0)


def _apply_graph_spec_row(spec: Any, form: djforms.Form, names: list[str]) -> None:
    data = form.cleaned_data
    if "batch_size" in names:
        spec.batch_size = data.get("batch_size") or 0
    if "input" in names:
        spec.ClearField("input")
        for key, dims in (data.get("input") or {}).items():
            spec.input[key].dim.extend(dims)


def _apply_metric_row(mc: Any, form: djforms.Form, names: list[str]) -> None:
    data = form.cleaned_data
    if "family" in names:
        mc.metric_identifier.family = data.get("family") or ""
    if "buckets" in names:
        mc.histogram_options.SetInParent()
        del mc.histogram_options.buckets[:]
        mc.histogram_options.buckets.extend(data.get("buckets") or [])


def _apply_main_sections(config: pb.ModelConfig, form: djforms.Form) -> bool:
    names = set(form.changed_data) - set(form.errors)
    data = form.cleaned_data
    ok = True
    if "runtime" in names:
        config.runtime = data.get("runtime") or ""
    if "decoupled" in names:
        config.model_transaction_policy.decoupled = bool(data.get("decoupled"))
    if "response_cache" in names:
        config.response_cache.enable = bool(data.get("response_cache"))
    if "ens_max_inflight_requests" in names:
        other = _other_scheduler(config, "ensemble_scheduling")
        if other:
            form.add_error("ens_max_inflight_requests", _scheduler_refusal(other, "an ensemble"))
            ok = False
        else:
            config.ensemble_scheduling.max_inflight_requests = (
                data.get("ens_max_inflight_requests") or 0
            )
    opt = config.optimization
    if "opt_graph_level" in names:
        level = data.get("opt_graph_level")
        if level is None:
            opt.ClearField("graph")
        else:
            opt.graph.level = level
    if "opt_priority" in names:
        opt.priority = _enum(pb.ModelOptimizationPolicy.ModelPriority, data.get("opt_priority"))
    for name in ("graphs", "busy_wait_events", "output_copy_stream"):
        if f"opt_cuda_{name}" in names:
            setattr(opt.cuda, name, bool(data.get(f"opt_cuda_{name}")))
    for name in ("input_pinned_memory", "output_pinned_memory"):
        if f"opt_{name}" in names:
            choice = data.get(f"opt_{name}") or ""
            if not choice:
                opt.ClearField(name)
            else:
                getattr(opt, name).enable = choice == "on"
    if "opt_gather_kernel_buffer_threshold" in names:
        opt.gather_kernel_buffer_threshold = data.get("opt_gather_kernel_buffer_threshold") or 0
    if "opt_eager_batching" in names:
        opt.eager_batching = bool(data.get("opt_eager_batching"))
    return ok


def _apply_accelerators(
    config: pb.ModelConfig, formset: djforms.BaseFormSet, initial: list[dict]
) -> tuple[list[int], dict[int, int]]:
    """Rebuild both accelerator lists from the rows when any changed; returns the row map
    (element k of gpu + cpu came from row result[k]) and parent row -> element."""
    existing = _accelerators(config)
    if not formset_changed(formset):
        rows = list(range(len(existing)))
        return rows, {i: i for i in rows}
    kept: list[tuple[str, Any, int]] = []
    for i, form in enumerate(formset.forms):
        if deleted(form) or (i >= len(existing) and not form.has_changed()):
            continue
        values = row_values(form, initial[i] if i < len(initial) else {})
        accelerator = Accelerator()
        if i < len(existing):
            accelerator.CopyFrom(existing[i][1])
        if "name" in changed(form) or i >= len(existing):
            accelerator.name = values.get("name") or ""
        kept.append((values.get("where") or "gpu", accelerator, i))
    ea = config.optimization.execution_accelerators
    ordered = [k for k in kept if k[0] == "gpu"] + [k for k in kept if k[0] != "gpu"]
    del ea.gpu_execution_accelerator[:]
    del ea.cpu_execution_accelerator[:]
    for where, accelerator, _ in ordered:
        kind = "gpu_execution_accelerator" if where == "gpu" else "cpu_execution_accelerator"
        getattr(ea, kind).add().CopyFrom(accelerator)
    rows = [i for _, _, i in ordered]
    return rows, {row: k for k, row in enumerate(rows)}


# A child table: its parents in the new config, how to empty a parent and add a row to it.
@dataclass(frozen=True)
class ChildSpec:
    prefix: str
    parents: Callable[[pb.ModelConfig], list[Any]]
    clear: Callable[[Any], None]
    # (parent element, the row's values) -> the child's identity (key or position), or an
    # error message for the row
    add: Callable[[Any, dict[str, Any]], tuple[Any, str]]


def _add_step_map(step: Any, values: dict[str, Any]) -> tuple[Any, str]:
    key = values.get("key") or ""
    if not key:
        return None, "name the step model's tensor"
    field = step.input_map if values.get("direction") != "output" else step.output_map
    which = "input_map" if field is step.input_map else "output_map"
    if key in field:
        return None, f"'{key}' is in this step's {which} twice"
    field[key] = values.get("value") or ""
    return (which, key), ""


def _add_warmup_input(w: Any, values: dict[str, Any]) -> tuple[Any, str]:
    key = values.get("key") or ""
    if not key:
        return None, "name the input"
    if key in w.inputs:
        return None, f"input '{key}' is in this warmup sample twice"
    entry = w.inputs[key]
    entry.data_type = _enum(pb.DataType, values.get("data_type") or "")
    entry.dims.extend(values.get("dims") or [])
    data = values.get("data") or ""
    if data == "zero_data":
        entry.zero_data = True
    elif data == "random_data":
        entry.random_data = True
    elif data == "input_data_file":
        entry.input_data_file = values.get("input_data_file") or ""
    return key, ""


def _add_resource(group: Any, values: dict[str, Any]) -> tuple[Any, str]:
    resource = group.rate_limiter.resources.add()
    resource.name = values.get("name") or ""
    setattr(resource, "global", bool(values.get("global_")))
    resource.count = values.get("count") or 0
    return len(group.rate_limiter.resources) - 1, ""


def _clear_resources(group: Any) -> None:
    if group.HasField("rate_limiter"):
        del group.rate_limiter.resources[:]


def _add_accelerator_param(accelerator: Any, values: dict[str, Any]) -> tuple[Any, str]:
    key = values.get("key") or ""
    if not key:
        return None, "a parameter needs a key"
    if key in accelerator.parameters:
        return None, f"parameter '{key}' is given twice for this accelerator"
    accelerator.parameters[key] = values.get("value") or ""
    return key, ""


def _clear_maps(step: Any) -> None:
    step.ClearField("input_map")
    step.ClearField("output_map")


CHILD_TABLES = {
    "step_map": ChildSpec(
        "step_map", lambda c: list(c.ensemble_scheduling.step), _clear_maps, _add_step_map
    ),
    "warmup_input": ChildSpec(
        "warmup_input",
        lambda c: list(c.model_warmup),
        lambda w: w.ClearField("inputs"),
        _add_warmup_input,
    ),
    "rl_resource": ChildSpec(
        "rl_resource", lambda c: list(c.instance_group), _clear_resources, _add_resource
    ),
    "accelerator_param": ChildSpec(
        "accelerator_param",
        lambda c: [a for _, a in _accelerators(c)],
        lambda a: a.ClearField("parameters"),
        _add_accelerator_param,
    ),
}


def _apply_children(
    spec: ChildSpec,
    config: pb.ModelConfig,
    formset: djforms.BaseFormSet,
    initial: list[dict[str, Any]],
    parent_of_row: dict[int, int] | None,
) -> tuple[dict[tuple[int, Any], int], bool]:
    """Rebuild the parents whose child rows changed (see the module docstring)."""
    placed: dict[tuple[int, Any], int] = {}
    if parent_of_row is None:  # the parent table could not be applied
        return placed, True
    ok = True
    entries: list[tuple[int, dict[str, Any], int]] = []
    affected: set[int] = set()
    for j, form in enumerate(formset.forms):
        origin = initial[j] if j < len(initial) else None
        old_parent = parent_of_row.get(origin["parent"]) if origin is not None else None
        if deleted(form):
            if old_parent is not None:
                affected.add(old_parent)
            continue
        if origin is None and not form.has_changed():
            continue
        values = row_values(form, origin or {})
        parent_row = values.get("parent")
        if parent_row is None:
            form.add_error("parent", "choose the row this belongs to")
            ok = False
            continue
        parent = parent_of_row.get(parent_row)
        if parent is None:  # its parent row was deleted: it goes with it
            if old_parent is not None:
                affected.add(old_parent)
            continue
        if origin is None or changed(form):
            affected.add(parent)
            if old_parent is not None:
                affected.add(old_parent)
        entries.append((parent, values, j))
    parents = spec.parents(config)
    for parent in affected:
        spec.clear(parents[parent])
    for parent, values, j in entries:
        if parent not in affected:
            continue
        ident, error = spec.add(parents[parent], values)
        if error:
            formset.forms[j].add_error("key" if "key" in formset.forms[j].fields else None, error)
            ok = False
            continue
        placed[(parent, ident)] = j
    if spec.prefix == "rl_resource":
        for parent in affected:
            group = parents[parent]
            if not group.rate_limiter.resources and not group.rate_limiter.priority:
                group.ClearField("rate_limiter")
    # Rows of untouched parents keep their places (for findings).
    counters: dict[int, int] = {}
    for parent, values, j in entries:
        if parent in affected:
            continue
        if spec.prefix == "rl_resource":
            position = counters.get(parent, 0)
            counters[parent] = position + 1
            placed[(parent, position)] = j
        elif spec.prefix == "step_map":
            which = "output_map" if values.get("direction") == "output" else "input_map"
            placed[(parent, (which, values.get("key")))] = j
        else:
            placed[(parent, values.get("key"))] = j
    return placed, ok


def _apply_string_map(
    target: Any, formset: djforms.BaseFormSet, initial: list[dict[str, Any]]
) -> tuple[dict[str, int], bool]:
    """map<string, string> rows (cc_model_filenames, metric_tags): as the parameters table."""
    rows: dict[str, int] = {}
    ok = True
    removals: list[str] = []
    updates: list[tuple[str, str, int]] = []
    for i, form in enumerate(formset.forms):
        origin = initial[i] if i < len(initial) else None
        if deleted(form):
            if origin is not None:
                removals.append(origin["key"])
            continue
        if origin is None and not form.has_changed():
            continue
        names = changed(form)
        values = row_values(form, origin or {})
        key = values.get("key") or ""
        if not key:
            form.add_error("key", "a row needs a key")
            ok = False
            continue
        if origin is not None and not names:
            rows[key] = i
            continue
        if origin is not None and "key" in names:
            removals.append(origin["key"])
        updates.append((key, values.get("value") or "", i))
    for key in removals:
        if key in target:
            del target[key]
    for key, value, i in updates:
        target[key] = value
        rows[key] = i
    return rows, ok


def apply_sections(
    config: pb.ModelConfig,
    main: djforms.Form,
    tables: dict[str, djforms.BaseFormSet],
    base_rows: dict[str, list[int]],
    base: pb.ModelConfig,
) -> tuple[SectionRows, bool]:
    """Apply the sections' changes to ``config`` (already a copy of ``base`` with the first
    sections applied; ``base_rows`` has their row maps, e.g. the instance groups')."""
    initial = table_initial(base)
    ok = _apply_main_sections(config, main)
    rows: dict[str, list[int]] = {}
    seq_ok = _apply_sequence(config, main, tables)
    ok = ok and seq_ok
    if seq_ok and config.HasField("sequence_batching"):
        sb = config.sequence_batching
        rows["control_input"] = apply_rows(
            sb.control_input, tables["control_input"], _apply_control_row
        )
        rows["seq_state"] = apply_rows(sb.state, tables["seq_state"], _apply_state_row)

    parent_of_row: dict[str, dict[int, int] | None] = {}
    step_table = tables["step"]
    if formset_changed(step_table) or formset_changed(tables["step_map"]):
        other = _other_scheduler(config, "ensemble_scheduling")
        if other:
            first = next((f for f in step_table.forms if f.has_changed()), None)
            (first or main).add_error(None, _scheduler_refusal(other, "an ensemble"))
            ok = False
            parent_of_row["step"] = None
        else:
            rows["step"] = apply_rows(config.ensemble_scheduling.step, step_table, _apply_step_row)
    if "step" not in parent_of_row:
        rows.setdefault("step", list(range(len(config.ensemble_scheduling.step))))
        parent_of_row["step"] = {row: k for k, row in enumerate(rows["step"])}

    rows["model_warmup"] = apply_rows(
        config.model_warmup, tables["model_warmup"], _apply_warmup_row
    )
    parent_of_row["model_warmup"] = {r: k for k, r in enumerate(rows["model_warmup"])}
    groups = base_rows.get("instance_group", list(range(len(config.instance_group))))
    parent_of_row["instance_group"] = {r: k for k, r in enumerate(groups)}

    rows["graph_spec"] = apply_rows(
        config.optimization.cuda.graph_spec, tables["graph_spec"], _apply_graph_spec_row
    )
    rows["accelerator"], parent_of_row["accelerator"] = _apply_accelerators(
        config, tables["accelerator"], initial["accelerator"]
    )
    rows["metric_control"] = apply_rows(
        config.model_metrics.metric_control, tables["metric_control"], _apply_metric_row
    )

    children: dict[str, dict[tuple[int, Any], int]] = {}
    for prefix, spec in CHILD_TABLES.items():
        parent_prefix = TABLES[prefix][1]
        placed, child_ok = _apply_children(
            spec, config, tables[prefix], initial[prefix], parent_of_row[parent_prefix]
        )
        children[prefix] = placed
        ok = ok and child_ok

    maps: dict[str, dict[str, int]] = {}
    for prefix in ("cc_model_filenames", "metric_tags"):
        maps[prefix], map_ok = _apply_string_map(
            getattr(config, prefix), tables[prefix], initial[prefix]
        )
        ok = ok and map_ok
    return SectionRows(rows, children, maps), ok


def unchanged_rows(config: pb.ModelConfig) -> SectionRows:
    """Row maps for forms showing ``config`` unchanged (row i is element i)."""
    initial = table_initial(config)
    rows = {
        "control_input": list(range(len(config.sequence_batching.control_input))),
        "seq_state": list(range(len(config.sequence_batching.state))),
        "step": list(range(len(config.ensemble_scheduling.step))),
        "model_warmup": list(range(len(config.model_warmup))),
        "graph_spec": list(range(len(config.optimization.cuda.graph_spec))),
        "accelerator": list(range(len(_accelerators(config)))),
        "metric_control": list(range(len(config.model_metrics.metric_control))),
    }
    children: dict[str, dict[tuple[int, Any], int]] = {p: {} for p in CHILD_TABLES}
    counters: dict[int, int] = {}
    for j, row in enumerate(initial["rl_resource"]):
        position = counters.get(row["parent"], 0)
        counters[row["parent"]] = position + 1
        children["rl_resource"][(row["parent"], position)] = j
    for j, row in enumerate(initial["step_map"]):
        which = "output_map" if row["direction"] == "output" else "input_map"
        children["step_map"][(row["parent"], (which, row["key"]))] = j
    for prefix in ("warmup_input", "accelerator_param"):
        for j, row in enumerate(initial[prefix]):
            children[prefix][(row["parent"], row["key"])] = j
    maps = {
        prefix: {row["key"]: i for i, row in enumerate(initial[prefix])}
        for prefix in ("cc_model_filenames", "metric_tags")
    }
    return SectionRows(rows, children, maps)


# --- findings onto the sections' fields and rows ---------------------------------------------

# The row field that shows a path below a table element (its first segment; deeper ones
# named with a dot, e.g. "control.int32_false_true").
_ROW_FIELD = {
    "control_input": {"name": "name", "control.kind": "kind", "control.data_type": "data_type",
                      "control.int32_false_true": "false_true",
                      "control.fp32_false_true": "false_true",
                      "control.bool_false_true": "false_true", "control": "false_true_kind"},
    "seq_state": {"input_name": "input_name", "output_name": "output_name",
                  "data_type": "data_type", "dims": "dims", "initial_state": "initial_state",
                  "use_same_buffer_for_input_output": "use_same_buffer_for_input_output",
                  "use_growable_memory": "use_growable_memory"},
    "step": {"model_name": "model_name", "model_version": "model_version"},
    "model_warmup": {"name": "name", "batch_size": "batch_size", "count": "count"},
    "graph_spec": {"batch_size": "batch_size", "input": "input"},
    "metric_control": {"metric_identifier": "family", "histogram_options": "buckets"},
}  # fmt: skip
_CHILD_PATHS = [
    # (regex, child prefix, the field a finding on the entry itself goes to)
    (
        r"^ensemble_scheduling\.step\[(\d+)\]\.(input_map|output_map)\[\"([^\"]*)\"\](.*)$",
        "step_map",
        "value",
    ),
    (r"^model_warmup\[(\d+)\]\.inputs\[\"([^\"]*)\"\]\.?(\w*)", "warmup_input", "key"),
    (r"^instance_group\[(\d+)\]\.rate_limiter\.resources\[(\d+)\]\.?(\w*)", "rl_resource", "name"),
]
_MAP_PATHS = {"cc_model_filenames", "metric_tags"}
# A finding on a whole message shown as a table (e.g. model_metrics newer than the server).
_CONTAINERS = {
    "model_metrics": "metric_control",
    "ensemble_scheduling.step": "step",
    "optimization.cuda.graph_spec": "graph_spec",
    "sequence_batching.control_input": "control_input",
    "sequence_batching.state": "seq_state",
}


def _names(path: str) -> str:
    """A path below an element with its indices dropped: control[0].kind -> control.kind."""
    return re.sub(r"\[[^\]]*\]", "", path)


def place(
    path: str, main: djforms.Form, tables: dict[str, djforms.BaseFormSet], placed: SectionRows
) -> Any:
    """Where the form shows a finding on ``path``: a bound field, a row (form), a table
    (formset) or None when these sections do not show it."""
    for pattern, prefix, entry_field in _CHILD_PATHS:
        m = re.match(pattern, path)
        if m is None:
            continue
        parent = int(m.group(1))
        if prefix == "step_map":
            ident: Any = (m.group(2), m.group(3))
            rest = m.group(4).lstrip(".")
        elif prefix == "rl_resource":
            ident, rest = int(m.group(2)), m.group(3)
        else:
            ident, rest = m.group(2), m.group(3)
        row = placed.children.get(prefix, {}).get((parent, ident))
        table = tables[prefix]
        if row is None or row >= len(table.forms):
            return table
        form = table.forms[row]
        name = {"global": "global_"}.get(rest, rest) or entry_field
        return form[name] if name in form.fields else form
    top = path.split("[", 1)[0].split(".", 1)[0]
    if top in _MAP_PATHS:
        m = re.match(rf'^{top}\["([^"]*)"\]', path)
        row = placed.maps.get(top, {}).get(m.group(1)) if m else None
        table = tables[top]
        if row is None or row >= len(table.forms):
            return table
        return table.forms[row]
    if path.startswith("optimization.execution_accelerators"):
        return tables["accelerator"]
    if path in _CONTAINERS:
        return tables[_CONTAINERS[path]]
    for prefix, table_path in TABLE_PATHS.items():
        if path == table_path:
            return tables[prefix]
        m = re.match(rf"^{re.escape(table_path)}\[(\d+)\]\.?(.*)$", path)
        if m is None:
            continue
        rows = placed.rows.get(prefix, [])
        index = int(m.group(1))
        table = tables[prefix]
        if index >= len(rows) or rows[index] >= len(table.forms):
            return table
        form = table.forms[rows[index]]
        rest = _names(m.group(2))
        mapping = _ROW_FIELD.get(prefix, {})
        while rest and rest not in mapping:
            rest = rest.rsplit(".", 1)[0] if "." in rest else ""
        name = mapping.get(rest)
        return form[name] if name else form
    probe = _names(path)
    while probe:
        if probe in FIELD_PATHS:
            return main[FIELD_PATHS[probe]]
        probe = probe.rsplit(".", 1)[0] if "." in probe else ""
    return None
