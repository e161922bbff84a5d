"""ModelConfig <-> the editor's forms.

A form save changes only what the user changed: ``apply_forms`` copies the base config
(the parsed file the form was rendered from) and applies exactly the fields Django reports
in ``changed_data``; ``read_form`` then writes that difference into the base *text* in place
(``modelconfig.text_edit``), so comments, layout and untouched lines stay byte for byte.
This module covers the model, inputs and outputs, dynamic batching, instance groups, the
version policy and parameters; ``sections`` the rest (sequence batching, ensembles, warmup,
rate limiting, optimization, policies, model_metrics, string maps). What no form shows (an
input's allow_ragged_batch, batch_input, model_operations, ... listed by ``coverage``) is
never touched. Table rows are matched by position: row i edits the i-th input (output,
instance group, parameter in key order); extra rows add, ticked "delete" boxes remove. A
field with a format error ("abc" in dims) keeps its old value for validation, so the rest
of the config is still checked.

``place_findings`` maps validator field paths (``input[1].dims``,
``dynamic_batching.preferred_batch_size[0]``) onto the bound field that shows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from django import forms as djforms
from django.core.exceptions import NON_FIELD_ERRORS
from tritonclient.grpc import model_config_pb2 as pb

from ..modelconfig import Finding, ServerFacts, parse_config, to_text, validate_config
from ..modelconfig.findings import sort_findings
from ..modelconfig.text_edit import CannotEditInPlace, edit_in_place
from ..uploads.generate import without_filled_guidance
from . import sections
from .forms import (
    ConfigForm,
    InputFormSet,
    InstanceGroupFormSet,
    OutputFormSet,
    ParameterFormSet,
    pair_value,
    split_pair,
)
from .rows import changed as _changed
from .rows import deleted as _deleted
from .rows import formset_changed as _formset_changed

ModelConfig: TypeAlias = pb.ModelConfig

QUEUE_POLICY_FIELDS = (
    "timeout_action",
    "default_timeout_microseconds",
    "allow_timeout_override",
    "max_queue_size",
)
BATCHING_FIELDS = (
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "preserve_ordering",
    "priority_levels",
    "default_priority_level",
)
VERSION_FIELDS = ("version_policy", "latest_num_versions", "specific_versions")


@dataclass
class EditorForms:
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


def _optional_int(value: int) -> int | None:
    return value or None


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


def initial_data(config: ModelConfig, folder_name: str) -> dict[str, Any]:
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
        "max_queue_delay_microseconds": _optional_int(db.max_queue_delay_microseconds),
        "preserve_ordering": db.preserve_ordering,
        "priority_levels": _optional_int(db.priority_levels),
        "default_priority_level": _optional_int(db.default_priority_level),
        "timeout_action": pb.ModelQueuePolicy.TimeoutAction.Name(qp.timeout_action)
        if has_qp
        else "",
        "default_timeout_microseconds": _optional_int(qp.default_timeout_microseconds),
        "allow_timeout_override": qp.allow_timeout_override,
        "max_queue_size": _optional_int(qp.max_queue_size),
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
                "count": _optional_int(g.count),
                "kind": pb.ModelInstanceGroup.Kind.Name(g.kind),
                "gpus": list(g.gpus),
                "rate_limiter_priority": _optional_int(g.rate_limiter.priority),
            }
            for g in config.instance_group
        ],
        "parameters": [
            {"key": key, "value": config.parameters[key].string_value}
            for key in sorted(config.parameters)
        ],
    }


def build_forms(
    config: ModelConfig, folder_name: str, data: Mapping[str, Any] | None = None
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


@dataclass
class Applied:
    """The config after the form's changes, and where each table row landed."""

    config: ModelConfig
    # rows[prefix][i] = the form row that produced element i of the new config's list.
    rows: dict[str, list[int]] = field(default_factory=dict)
    parameter_rows: dict[str, int] = field(default_factory=dict)
    ok: bool = True
    sections: sections.SectionRows | None = None


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


def _apply_main(config: ModelConfig, form: ConfigForm) -> bool:
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


def _apply_parameters(config: ModelConfig, formset: djforms.BaseFormSet) -> tuple[dict, bool]:
    keys = sorted(config.parameters)
    rows: dict[str, int] = {}
    ok = True
    removals: list[str] = []
    updates: list[tuple[str, str, int]] = []
    for i, form in enumerate(formset.forms):
        old_key = keys[i] if i < len(keys) else None
        if _deleted(form):
            if old_key is not None:
                removals.append(old_key)
            continue
        if old_key is None and not form.has_changed():
            continue
        changed = _changed(form)
        new_key = form.cleaned_data.get("key") or ""
        if not new_key:
            form.add_error("key", "a parameter needs a key")
            ok = False
            continue
        if old_key is not None and not changed:
            rows[old_key] = i
            continue
        if old_key is not None and "key" in changed:
            removals.append(old_key)
        value = form.cleaned_data.get("value") or ""
        if old_key is not None and "value" not in changed:
            value = config.parameters[old_key].string_value
        updates.append((new_key, value, i))
    for key in removals:
        if key in config.parameters:
            del config.parameters[key]
    for key, value, i in updates:
        config.parameters[key].string_value = value
        rows[key] = i
    return rows, ok


def apply_forms(base: ModelConfig, editor: EditorForms) -> Applied:
    """A copy of ``base`` with the bound, valid forms' changes applied (and only those)."""
    config = ModelConfig()
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
    section_rows, sections_ok = sections.apply_sections(
        config, editor.config, editor.tables, rows, base
    )
    rows.update(section_rows.rows)
    return Applied(config, rows, parameter_rows, ok and params_ok and sections_ok, section_rows)


# --- findings onto fields ------------------------------------------------------------------

_PATH_RE = re.compile(r'^(?P<top>\w+)(?:\[(?P<index>\d+|"[^"]*")\])?(?:\.(?P<rest>.*))?$')
_MAIN_FIELDS = {
    "name": "name",
    "platform": "platform_backend",
    "backend": "platform_backend",
    "default_model_filename": "default_model_filename",
    "max_batch_size": "max_batch_size",
}
_ROW_FIELDS = {
    "name",
    "data_type",
    "dims",
    "reshape",
    "format",
    "optional",
    "count",
    "kind",
    "gpus",
}


def _first_segment(rest: str | None) -> str:
    if not rest:
        return ""
    return re.split(r"[.\[]", rest, maxsplit=1)[0]


def _attach(bound: Any, finding: Finding) -> None:
    existing = getattr(bound, "findings", None)
    if existing is None:
        existing = []
        bound.findings = existing
    existing.append(finding)


def _main_field_for(top: str, rest: str | None) -> str | None:
    if top in _MAIN_FIELDS and not rest:
        return _MAIN_FIELDS[top]
    if top == "dynamic_batching":
        segment = _first_segment(rest)
        if segment in BATCHING_FIELDS:
            return segment
        if segment == "default_queue_policy":
            sub = _first_segment(rest.split(".", 1)[1] if rest and "." in rest else "")
            return sub if sub in QUEUE_POLICY_FIELDS else "timeout_action"
        return "dynamic_batching"
    if top == "version_policy":
        segment = _first_segment(rest)
        return {"latest": "latest_num_versions", "specific": "specific_versions"}.get(
            segment, "version_policy"
        )
    return None


def place_findings(
    editor: EditorForms, applied: Applied, findings: Iterable[Finding]
) -> list[Finding]:
    """Attach findings to bound fields (``field.findings``) or rows (``form.row_findings``);
    returns those that have no place in the form (shown in a list above it)."""
    unplaced: list[Finding] = []
    for finding in findings:
        if applied.sections is not None and finding.field:
            target = sections.place(finding.field, editor.config, editor.tables, applied.sections)
            if target is not None:
                _attach(target, finding)
                continue
        m = _PATH_RE.match(finding.field or "")
        if m is None:
            unplaced.append(finding)
            continue
        top, index, rest = m.group("top"), m.group("index"), m.group("rest")
        main_field = _main_field_for(top, rest) if index is None else None
        if main_field is not None:
            _attach(editor.config[main_field], finding)
            continue
        formset = editor.formsets.get(top)
        if formset is None:
            unplaced.append(finding)
            continue
        row: int | None = None
        if top == "parameters" and index is not None and index.startswith('"'):
            row = applied.parameter_rows.get(index.strip('"'))
        elif index is not None and index.isascii() and index.isdigit():
            mapping = applied.rows.get(top, [])
            position = int(index)
            row = mapping[position] if position < len(mapping) else None
        if row is None or row >= len(formset.forms):
            _attach(formset, finding)
            continue
        form = formset.forms[row]
        segment = _first_segment(rest)
        if segment in _ROW_FIELDS and segment in form.fields:
            _attach(form[segment], finding)
        else:
            _attach(form, finding)
    return unplaced


def place_on_unbound(editor: EditorForms, text: str, findings: Iterable[Finding]) -> list[Finding]:
    """``place_findings`` for forms showing ``text`` unchanged (row i is element i)."""
    config = parse_config(text).config or ModelConfig()
    rows = {
        "input": list(range(len(config.input))),
        "output": list(range(len(config.output))),
        "instance_group": list(range(len(config.instance_group))),
    }
    params = {key: i for i, key in enumerate(sorted(config.parameters))}
    section_rows = sections.unchanged_rows(config)
    rows.update(section_rows.rows)
    return place_findings(editor, Applied(config, rows, params, sections=section_rows), findings)


# --- the whole form round: base text + posted data -> candidate ---------------------------


def has_comments(text: str) -> bool:
    """True when the text has a '#' comment outside string literals."""
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote or ch == "\n":
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return True
    return False


@dataclass
class FormRound:
    """The outcome of reading a posted form against its base text."""

    editor: EditorForms
    base_text: str
    config: ModelConfig | None = None  # the candidate; None when the forms are invalid
    text: str = ""  # what a save would write
    findings: list[Finding] = field(default_factory=list)
    unplaced: list[Finding] = field(default_factory=list)
    changed: bool = False
    # Why the change cannot be written into the base text in place ("" when it can); then
    # ``text`` is the whole file rewritten, which a save may only write when the user ticks
    # "rewrite".
    rewrite_reason: str = ""
    applied: Applied | None = None

    @property
    def ok(self) -> bool:
        """Forms valid and applicable (validator errors are judged separately)."""
        return self.config is not None

    @property
    def comments_dropped(self) -> bool:
        """True when writing ``text`` would lose comments of the base text."""
        return bool(self.rewrite_reason) and has_comments(self.base_text)


def unparsable_base(base_text: str) -> list[Finding]:
    """Findings when the base text cannot be shown as a form (None when it can)."""
    parsed = parse_config(base_text)
    return [] if parsed.config is not None else parsed.findings


def read_form(
    name: str, base_text: str, data: Mapping[str, Any], server: ServerFacts | None = None
) -> FormRound:
    """Bind the posted form to its base config, apply the changes and validate the result.

    Findings come back even when some field has a format error (that field keeps its old
    value for validation); ``config`` and ``text`` only when every field could be read.
    ``server``: the attached Triton's facts (its version and GPUs), the ones a save is
    validated with (``saving.editor_findings``), so the live check says what the save will."""
    parsed = parse_config(base_text)
    base = parsed.config if parsed.config is not None else ModelConfig()
    editor = build_forms(base, name, data)
    result = FormRound(editor, base_text)
    if parsed.config is None:
        return result
    valid = editor.is_valid()
    applied = apply_forms(base, editor)
    result.applied = applied
    result.findings = sort_findings(
        validate_config(applied.config, folder_name=name, server=server)
    )
    result.unplaced = place_findings(editor, applied, result.findings)
    if not valid or not applied.ok:
        return result
    result.config = applied.config
    result.changed = editor.has_changed() and applied.config != base
    result.text = base_text
    if result.changed:
        try:
            # A new model's skeleton asks for fields in comments: once filled, they go.
            text = edit_in_place(base_text, applied.config)
            result.text = without_filled_guidance(text, applied.config)
        except CannotEditInPlace as exc:
            result.rewrite_reason = exc.reason
            result.text = to_text(applied.config)
    return result


def field_errors(editor: EditorForms) -> dict[str, list[str]]:
    """Format errors by the html name of their field ("input-0-dims"); a form's non-field
    errors under its prefix ("input-0"), a formset's under its prefix ("input")."""
    errors: dict[str, list[str]] = {}
    forms_ = [editor.config] + [f for fs in editor.formsets.values() for f in fs.forms]
    for form in forms_:
        for name, messages in form.errors.items():
            key = form.add_prefix(name) if name != NON_FIELD_ERRORS else form.prefix
            errors.setdefault(key or "", []).extend(str(m) for m in messages)
    for prefix, formset in editor.formsets.items():
        if formset.is_bound and formset.non_form_errors():
            errors.setdefault(prefix, []).extend(str(m) for m in formset.non_form_errors())
    return errors


def field_label(key: str) -> str:
    """A form field's html name as the config path it edits: "cfg-max_batch_size" ->
    "max_batch_size", "input-0-dims" -> "input[0].dims" (static/js/editor_form.js too)."""
    m = re.match(r"^(?:cfg-)?(?P<name>[a-z_]+)(?:-(?P<row>\d+))?(?:-(?P<field>\w+))?$", key)
    if m is None:
        return key
    label = m.group("name")
    if key.startswith("cfg-") and label in sections.MAIN_LABELS:
        return sections.MAIN_LABELS[label]
    label = sections.TABLE_PATHS.get(label, label)
    if m.group("row") is not None:
        label += f"[{m.group('row')}]"
    if m.group("field"):
        label += f".{m.group('field')}"
    return label


def field_labels(editor: EditorForms) -> dict[str, str]:
    """``field_label`` of every key ``field_errors`` returns (the live check sends them)."""
    return {key: field_label(key) for key in field_errors(editor)}


def finding_targets(editor: EditorForms, findings: Iterable[Finding]) -> list[str]:
    """For each finding (after ``place_findings``), where the form shows it: a field's html
    name ("cfg-max_batch_size", "input-0-dims"), "row:<form prefix>", "table:<formset
    prefix>", or "" (only in the summary)."""
    where: dict[int, str] = {}

    def mark(items: Any, target: str) -> None:
        for finding in getattr(items, "findings", None) or []:
            where.setdefault(id(finding), target)

    for bound in editor.config:
        mark(bound, bound.html_name)
    for prefix, formset in editor.formsets.items():
        mark(formset, f"table:{prefix}")
        for form in formset.forms:
            mark(form, f"row:{form.prefix}")
            for bound in form:
                mark(bound, bound.html_name)
    return [where.get(id(f), "") for f in findings]


def forms_for_text(name: str, text: str) -> tuple[EditorForms | None, list[Finding]]:
    """Unbound forms showing ``text`` (None and the parse findings when it does not parse)."""
    parsed = parse_config(text)
    if parsed.config is None:
        return None, parsed.findings
    return build_forms(parsed.config, name), []


def post_data(editor: EditorForms) -> dict[str, Any]:
    """What a browser posts for these unbound forms unchanged (tests and API use it)."""
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
