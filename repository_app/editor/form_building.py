"""The editor's forms for a config: their initial values (what the file says), the forms
built from them (bound to posted data or not) and what a browser posts for them unchanged.

The model, inputs and outputs, dynamic batching, instance groups, the version policy and
parameters are here; ``sections`` gives the other sections' initial values and tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms as djforms
from tritonclient.grpc import model_config_pb2 as pb

from . import sections
from .forms import (
    ConfigForm,
    InputFormSet,
    InstanceGroupFormSet,
    OutputFormSet,
    ParameterFormSet,
    pair_value,
)
from .rows import formset_changed as _formset_changed
from .sections import none_if_zero


@dataclass
class EditorForms:
    """The main form and the tables of one config."""

    config: ConfigForm
    inputs: djforms.BaseFormSet
    outputs: djforms.BaseFormSet
    instance_groups: djforms.BaseFormSet
    parameters: djforms.BaseFormSet
    # The other sections' tables by prefix (sections.TABLES).
    tables: dict[str, djforms.BaseFormSet] = field(default_factory=dict)

    @property
    def formsets(self) -> dict[str, djforms.BaseFormSet]:
        return {
            "input": self.inputs,
            "output": self.outputs,
            "instance_group": self.instance_groups,
            "parameters": self.parameters,
            **self.tables,
        }

    def is_valid(self) -> bool:
        results = [self.config.is_valid()] + [fs.is_valid() for fs in self.formsets.values()]
        return all(results)

    def has_changed(self) -> bool:
        if [name for name in self.config.changed_data if name != "rewrite"]:
            return True
        return any(_formset_changed(fs) for fs in self.formsets.values())


def _tensor_initial(tensor: Any, is_input: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": tensor.name,
        "data_type": pb.DataType.Name(tensor.data_type) if tensor.data_type else "",
        "dims": list(tensor.dims),
        "reshape": list(tensor.reshape.shape) if tensor.HasField("reshape") else None,
    }
    if is_input:
        row["format"] = pb.ModelInput.Format.Name(tensor.format)
        row["optional"] = tensor.optional
    return row


def initial_data(config: pb.ModelConfig, folder_name: str) -> dict[str, Any]:
    """The forms' initial values for ``config`` (what the file says)."""
    db = config.dynamic_batching
    qp = db.default_queue_policy
    has_qp = db.HasField("default_queue_policy")
    vp = config.version_policy
    which = vp.WhichOneof("policy_choice") if config.HasField("version_policy") else None
    main = {
        "name": config.name or folder_name,
        "platform_backend": pair_value(config.platform, config.backend),
        "default_model_filename": config.default_model_filename,
        "max_batch_size": config.max_batch_size,
        "dynamic_batching": config.HasField("dynamic_batching"),
        "preferred_batch_size": list(db.preferred_batch_size),
        "max_queue_delay_microseconds": none_if_zero(db.max_queue_delay_microseconds),
        "preserve_ordering": db.preserve_ordering,
        "priority_levels": none_if_zero(db.priority_levels),
        "default_priority_level": none_if_zero(db.default_priority_level),
        "timeout_action": pb.ModelQueuePolicy.TimeoutAction.Name(qp.timeout_action)
        if has_qp
        else "",
        "default_timeout_microseconds": none_if_zero(qp.default_timeout_microseconds),
        "allow_timeout_override": qp.allow_timeout_override,
        "max_queue_size": none_if_zero(qp.max_queue_size),
        "version_policy": which or "",
        "latest_num_versions": vp.latest.num_versions if which == "latest" else None,
        "specific_versions": list(vp.specific.versions) if which == "specific" else [],
        "rewrite": False,
        **sections.main_initial(config),
    }
    return {
        "config": main,
        "input": [_tensor_initial(t, True) for t in config.input],
        "output": [_tensor_initial(t, False) for t in config.output],
        "instance_group": [
            {
                "count": none_if_zero(g.count),
                "kind": pb.ModelInstanceGroup.Kind.Name(g.kind),
                "gpus": list(g.gpus),
                "rate_limiter_priority": none_if_zero(g.rate_limiter.priority),
            }
            for g in config.instance_group
        ],
        "parameters": [
            {"key": key, "value": config.parameters[key].string_value}
            for key in sorted(config.parameters)
        ],
    }


def build_forms(
    config: pb.ModelConfig, folder_name: str, data: Mapping[str, Any] | None = None
) -> EditorForms:
    """Forms with ``config`` as initial values; bound to ``data`` when given."""
    initial = initial_data(config, folder_name)
    current_pair = initial["config"]["platform_backend"]
    main = ConfigForm(data, initial=initial["config"], current_pair=current_pair, prefix="cfg")
    main.fields["name"].initial = initial["config"]["name"]
    return EditorForms(
        main,
        InputFormSet(data, initial=initial["input"], prefix="input"),
        OutputFormSet(data, initial=initial["output"], prefix="output"),
        InstanceGroupFormSet(data, initial=initial["instance_group"], prefix="instance_group"),
        ParameterFormSet(data, initial=initial["parameters"], prefix="parameters"),
        sections.build_tables(config, data),
    )


def post_data(editor: EditorForms) -> dict[str, Any]:
    """What a browser posts for these unbound forms unchanged (the tests start from it)."""
    data: dict[str, Any] = {}

    def add_form(form: djforms.Form) -> None:
        for bound in form:
            if bound.field.disabled:
                continue
            value = bound.field.prepare_value(bound.value())
            if isinstance(bound.field, djforms.BooleanField):
                if value:
                    data[bound.html_name] = "on"
                continue
            data[bound.html_name] = "" if value is None else str(value)

    add_form(editor.config)
    for formset in editor.formsets.values():
        for bound in formset.management_form:
            data[bound.html_name] = str(bound.value())
        for form in formset.forms:
            add_form(form)
    return data
