"""The tables whose rows belong to rows of another table (rate-limiter resources of an
instance group, the inputs of a warmup sample, an ensemble step's tensor maps, the
parameters of an execution accelerator): how a form save applies them.

Only the parents whose child rows changed are rebuilt, from rows that show every field of
the child, so an untouched child reads back equal and ``text_edit.edit_in_place`` leaves
its line alone.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from .rows import changed, deleted, row_values
from .sections import accelerators, enum_number


# A child table: its parents in the new config, how to empty a parent and add a row to it.
@dataclass(frozen=True)
class ChildSpec:
    prefix: str
    parents: Callable[[pb.ModelConfig], list[Any]]
    clear: Callable[[Any], None]
    # (parent element, the row's values) -> the child's identity (key or position); raises
    # RowRefused with the row's error
    add: Callable[[Any, dict[str, Any]], Any]


class RowRefused(Exception):
    """A child row that cannot be applied; its message goes onto the row."""


def _map_key(values: dict[str, Any], entries: Container[str], unnamed: str, twice: str) -> str:
    """The key of a row of a map-valued child table: refused when it is empty (``unnamed``)
    or already in ``entries`` (``twice``, a template naming it ``{key}``)."""
    key = values.get("key") or ""
    if not key:
        raise RowRefused(unnamed)
    if key in entries:
        raise RowRefused(twice.format(key=key))
    return key


def _add_step_map(step: Any, values: dict[str, Any]) -> Any:
    field = step.input_map if values.get("direction") != "output" else step.output_map
    which = "input_map" if field is step.input_map else "output_map"
    key = _map_key(
        values, field, "name the step model's tensor", f"'{{key}}' is in this step's {which} twice"
    )
    field[key] = values.get("value") or ""
    return (which, key)


def _add_warmup_input(w: Any, values: dict[str, Any]) -> Any:
    key = _map_key(
        values, w.inputs, "name the input", "input '{key}' is in this warmup sample twice"
    )
    entry = w.inputs[key]
    entry.data_type = enum_number(pb.DataType, values.get("data_type") or "")
    entry.dims.extend(values.get("dims") or [])
    data = values.get("data") or ""
    if data == "zero_data":
        entry.zero_data = True
    elif data == "random_data":
        entry.random_data = True
    elif data == "input_data_file":
        entry.input_data_file = values.get("input_data_file") or ""
    return key


def _add_resource(group: Any, values: dict[str, Any]) -> Any:
    resource = group.rate_limiter.resources.add()
    resource.name = values.get("name") or ""
    setattr(resource, "global", bool(values.get("global_")))
    resource.count = values.get("count") or 0
    return len(group.rate_limiter.resources) - 1


def _clear_resources(group: Any) -> None:
    if group.HasField("rate_limiter"):
        del group.rate_limiter.resources[:]


def _add_accelerator_param(accelerator: Any, values: dict[str, Any]) -> Any:
    key = _map_key(
        values,
        accelerator.parameters,
        "a parameter needs a key",
        "parameter '{key}' is given twice for this accelerator",
    )
    accelerator.parameters[key] = values.get("value") or ""
    return key


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
        lambda c: [a for _, a in accelerators(c)],
        lambda a: a.ClearField("parameters"),
        _add_accelerator_param,
    ),
}


def apply_children(
    spec: ChildSpec,
    config: pb.ModelConfig,
    formset: djforms.BaseFormSet,
    initial: list[dict[str, Any]],
    parent_of_row: dict[int, int] | None,
) -> tuple[dict[tuple[int, Any], int], bool]:
    """Rebuild the parents whose child rows changed (see the module docstring); returns
    {(parent element, key or position): row} and whether every row could be applied."""
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
        try:
            ident = spec.add(parents[parent], values)
        except RowRefused as exc:
            form = formset.forms[j]
            form.add_error("key" if "key" in form.fields else None, str(exc))
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
        if parent not in affected:
            placed[(parent, child_identity(spec.prefix, parent, values, counters))] = j
    return placed, ok


def child_identity(
    prefix: str, parent: int, values: Mapping[str, Any], counters: dict[int, int]
) -> Any:
    """How a validator path names the entry of a child row its parent holds unchanged: its
    position among the parent's rate-limiter resources (``counters`` counts them per
    parent), (map, key) for a step's tensor map, else its key."""
    if prefix == "rl_resource":
        position = counters.get(parent, 0)
        counters[parent] = position + 1
        return position
    if prefix == "step_map":
        which = "output_map" if values.get("direction") == "output" else "input_map"
        return (which, values.get("key"))
    return values.get("key")
