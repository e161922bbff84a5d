"""Findings of the validator onto the config sections' fields and rows: where the form
shows a field path such as ``sequence_batching.control_input[0].control[0].kind`` or
``model_warmup[1].inputs["INPUT0"].dims``, given where each table row landed
(``section_apply.SectionRows``; ``unchanged_rows`` for forms showing a config unchanged).
"""

from __future__ import annotations

import re
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from .section_apply import SectionRows
from .section_children import CHILD_TABLES, child_identity
from .sections import FIELD_PATHS, TABLE_PATHS, accelerators, table_initial


def unchanged_rows(config: pb.ModelConfig) -> SectionRows:
    """Row maps for forms showing ``config`` unchanged (row i is element i)."""
    initial = table_initial(config)
    rows = {
        "control_input": list(range(len(config.sequence_batching.control_input))),
        "seq_state": list(range(len(config.sequence_batching.state))),
        "step": list(range(len(config.ensemble_scheduling.step))),
        "model_warmup": list(range(len(config.model_warmup))),
        "graph_spec": list(range(len(config.optimization.cuda.graph_spec))),
        "accelerator": list(range(len(accelerators(config)))),
        "metric_control": list(range(len(config.model_metrics.metric_control))),
    }
    children: dict[str, dict[tuple[int, Any], int]] = {}
    for prefix in CHILD_TABLES:
        counters: dict[int, int] = {}
        children[prefix] = {
            (row["parent"], child_identity(prefix, row["parent"], row, counters)): j
            for j, row in enumerate(initial[prefix])
        }
    maps = {
        prefix: {row["key"]: i for i, row in enumerate(initial[prefix])}
        for prefix in ("cc_model_filenames", "metric_tags")
    }
    return SectionRows(rows, children, maps)


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
