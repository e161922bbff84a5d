"""Applying what changed in the config sections beyond the basics (sequence batching,
ensembles, warmup, rate limiting, optimization, policies, model_metrics, string maps): the
counterpart of ``form_apply`` for those sections.

Same contract as ``form_apply``: a copy of the base config gets exactly the fields Django
reports as changed; tables are matched by position (row i edits element i); child tables
(``section_children``) rebuild only the parents whose rows changed. Nothing here touches a
field the form does not show.

A model has one scheduler (dynamic batching, sequence batching or an ensemble): setting
one field of another scheduler would silently drop the file's own (a protobuf oneof), so
that is refused with a message on the field instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from .rows import (
    apply_key_value_rows,
    apply_rows,
    changed,
    deleted,
    formset_changed,
    row_values,
)
from .section_children import CHILD_TABLES, apply_children
from .sections import (
    SEQ_COMMON,
    SEQ_DIRECT,
    SEQ_FIELDS,
    SEQ_OLDEST,
    TABLES,
    Control,
    accelerators,
    enum_number,
    table_initial,
)

Accelerator = pb.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator


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
        ctrl.data_type = enum_number(pb.DataType, data.get("data_type") or "")
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
        st.data_type = enum_number(pb.DataType, data.get("data_type") or "")
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
        opt.priority = enum_number(
            pb.ModelOptimizationPolicy.ModelPriority, data.get("opt_priority")
        )
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
    existing = accelerators(config)
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


def _apply_string_map(
    target: Any, formset: djforms.BaseFormSet, initial: list[dict[str, Any]]
) -> tuple[dict[str, int], bool]:
    """map<string, string> rows (cc_model_filenames, metric_tags): as the parameters table."""

    def read(form: djforms.Form, i: int, names: list[str]) -> tuple[str, str]:
        values = row_values(form, initial[i] if i < len(initial) else {})
        return values.get("key") or "", values.get("value") or ""

    def put(key: str, value: str) -> None:
        target[key] = value

    origins = [origin["key"] for origin in initial]
    return apply_key_value_rows(target, formset, origins, read, put, "a row needs a key")


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
        placed, child_ok = apply_children(
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
