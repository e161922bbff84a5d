"""Applying a form save to the config: the model, inputs and outputs, dynamic batching,
instance groups, the version policy and parameters (the other sections: ``section_apply``).

A form save changes only what the user changed: ``apply_forms`` copies the base config (the
parsed file the form was rendered from) and applies exactly the fields Django reports in
``changed_data``. What no form shows (an input's allow_ragged_batch, batch_input,
model_operations, ... listed by ``coverage``) is never touched. Table rows are matched by
position: row i edits the i-th input (output, instance group, parameter in key order); extra
rows add, ticked "delete" boxes remove. A field with a format error ("abc" in dims) keeps
its old value, so the rest of the config can still be validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from .form_building import EditorForms
from .forms import ConfigForm, split_pair
from .rows import apply_key_value_rows
from .rows import changed as _changed
from .rows import deleted as _deleted
from .section_apply import SectionRows, apply_sections

QUEUE_POLICY_FIELDS = (
    "timeout_action",
    "default_timeout_microseconds",
    "allow_timeout_override",
    "max_queue_size",
)
VERSION_FIELDS = ("version_policy", "latest_num_versions", "specific_versions")


@dataclass
class Applied:
    """The config after the form's changes, and where each table row landed."""

    config: pb.ModelConfig
    # rows[prefix][i] = the form row that produced element i of the new config's list.
    rows: dict[str, list[int]] = field(default_factory=dict)
    parameter_rows: dict[str, int] = field(default_factory=dict)
    ok: bool = True
    sections: SectionRows | None = None


def _set_tensor_field(tensor: Any, name: str, value: Any) -> None:
    if name == "name":
        tensor.name = value or ""
    elif name == "data_type":
        tensor.data_type = pb.DataType.Value(value) if value else pb.TYPE_INVALID
    elif name == "dims":
        del tensor.dims[:]
        tensor.dims.extend(value or [])
    elif name == "reshape":
        if value is None:
            tensor.ClearField("reshape")
        else:
            tensor.reshape.SetInParent()
            del tensor.reshape.shape[:]
            tensor.reshape.shape.extend(value)
    elif name == "format":
        tensor.format = pb.ModelInput.Format.Value(value) if value else 0
    elif name == "optional":
        tensor.optional = bool(value)


def _set_group_field(group: pb.ModelInstanceGroup, name: str, value: Any) -> None:
    if name == "count":
        group.count = value or 0
    elif name == "kind":
        group.kind = pb.ModelInstanceGroup.Kind.Value(value) if value else 0
    elif name == "gpus":
        del group.gpus[:]
        group.gpus.extend(value or [])
    elif name == "rate_limiter_priority":
        group.rate_limiter.priority = value or 0
        if not value and not group.rate_limiter.resources:
            group.ClearField("rate_limiter")


def _apply_list(
    container: Any,
    formset: djforms.BaseFormSet,
    setter: Any,
) -> list[int]:
    """Edit, append and delete repeated-message elements; returns the row map."""
    existing = len(container)
    deleted: list[int] = []
    kept: list[int] = []
    added: list[int] = []
    for i, form in enumerate(formset.forms):
        if i < existing:
            if _deleted(form):
                deleted.append(i)
                continue
            kept.append(i)
            for name in _changed(form):
                setter(container[i], name, form.cleaned_data.get(name))
        elif form.has_changed() and not _deleted(form):
            element = container.add()
            for name in _changed(form):
                setter(element, name, form.cleaned_data.get(name))
            added.append(i)
    for i in reversed(deleted):
        del container[i]
    return kept + added


def _apply_main(config: pb.ModelConfig, form: ConfigForm) -> bool:
    changed = set(form.changed_data) - set(form.errors)
    data = form.cleaned_data
    ok = True
    if "platform_backend" in changed:
        config.platform, config.backend = split_pair(data["platform_backend"] or "|")
    if "default_model_filename" in changed:
        config.default_model_filename = data["default_model_filename"] or ""
    if "max_batch_size" in changed:
        config.max_batch_size = data["max_batch_size"] or 0

    enabled = bool(data.get("dynamic_batching"))
    if not enabled:
        if "dynamic_batching" in changed:
            config.ClearField("dynamic_batching")
    else:
        if not config.HasField("dynamic_batching"):
            other = next(
                (
                    name
                    for name in ("sequence_batching", "ensemble_scheduling")
                    if config.HasField(name)
                ),
                None,
            )
            if other is not None:
                form.add_error(
                    "dynamic_batching",
                    f"this model uses {other}; a model has exactly one scheduler, so dynamic "
                    f"batching cannot be added: remove {other} in text mode first",
                )
                ok = False
            else:
                config.dynamic_batching.SetInParent()
        if ok:
            db = config.dynamic_batching
            if "preferred_batch_size" in changed:
                del db.preferred_batch_size[:]
                db.preferred_batch_size.extend(data["preferred_batch_size"] or [])
            for name in (
                "max_queue_delay_microseconds",
                "priority_levels",
                "default_priority_level",
            ):
                if name in changed:
                    setattr(db, name, data[name] or 0)
            if "preserve_ordering" in changed:
                db.preserve_ordering = bool(data["preserve_ordering"])
            if changed & set(QUEUE_POLICY_FIELDS):
                qp = db.default_queue_policy
                qp.SetInParent()
                if "timeout_action" in changed:
                    action = data["timeout_action"]
                    qp.timeout_action = (
                        pb.ModelQueuePolicy.TimeoutAction.Value(action) if action else 0
                    )
                for name in ("default_timeout_microseconds", "max_queue_size"):
                    if name in changed:
                        setattr(qp, name, data[name] or 0)
                if "allow_timeout_override" in changed:
                    qp.allow_timeout_override = bool(data["allow_timeout_override"])

    if changed & set(VERSION_FIELDS):
        policy = data.get("version_policy") or ""
        config.ClearField("version_policy")
        if policy == "latest":
            config.version_policy.latest.num_versions = data.get("latest_num_versions") or 1
        elif policy == "all":
            config.version_policy.all.SetInParent()
        elif policy == "specific":
            config.version_policy.specific.versions.extend(data.get("specific_versions") or [])
    return ok


def _apply_parameters(config: pb.ModelConfig, formset: djforms.BaseFormSet) -> tuple[dict, bool]:
    keys = sorted(config.parameters)

    def read(form: djforms.Form, i: int, names: list[str]) -> tuple[str, str]:
        key = form.cleaned_data.get("key") or ""
        if i < len(keys) and "value" not in names:  # unchanged: the config's exact text
            return key, config.parameters[keys[i]].string_value
        return key, form.cleaned_data.get("value") or ""

    def put(key: str, value: str) -> None:
        config.parameters[key].string_value = value

    return apply_key_value_rows(
        config.parameters, formset, keys, read, put, "a parameter needs a key"
    )


def apply_forms(base: pb.ModelConfig, editor: EditorForms) -> Applied:
    """A copy of ``base`` with the bound, valid forms' changes applied (and only those)."""
    config = pb.ModelConfig()
    config.CopyFrom(base)
    ok = _apply_main(config, editor.config)
    rows = {
        "input": _apply_list(config.input, editor.inputs, _set_tensor_field),
        "output": _apply_list(config.output, editor.outputs, _set_tensor_field),
        "instance_group": _apply_list(
            config.instance_group, editor.instance_groups, _set_group_field
        ),
    }
    parameter_rows, params_ok = _apply_parameters(config, editor.parameters)
    section_rows, sections_ok = apply_sections(config, editor.config, editor.tables, rows, base)
    rows.update(section_rows.rows)
    return Applied(config, rows, parameter_rows, ok and params_ok and sections_ok, section_rows)
