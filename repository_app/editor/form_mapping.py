"""The editor's form round: a posted form read against its base text, and what the page
shows of it (findings on the fields that show them, format errors, field labels).

A form save changes only what the user changed: ``read_form`` builds the forms on the base
config (``form_building``), applies exactly the changed fields to a copy of it
(``form_apply``, ``section_apply``), validates the result and writes that difference into
the base *text* in place (``modelconfig.text_edit``), so comments, layout and untouched
lines stay byte for byte.

``place_findings`` maps validator field paths (``input[1].dims``,
``dynamic_batching.preferred_batch_size[0]``) onto the bound field that shows them (the
other sections' paths: ``section_findings``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from django.core.exceptions import NON_FIELD_ERRORS
from tritonclient.grpc import model_config_pb2 as pb

from ..modelconfig import Finding, ServerFacts, parse_config, to_text, validate_config
from ..modelconfig.findings import sort_findings
from ..modelconfig.text_edit import CannotEditInPlace, edit_in_place
from ..uploads.generate import without_filled_guidance
from . import section_findings, sections
from .form_apply import QUEUE_POLICY_FIELDS, Applied, apply_forms
from .form_building import EditorForms, build_forms

ModelConfig: TypeAlias = pb.ModelConfig

BATCHING_FIELDS = (
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "preserve_ordering",
    "priority_levels",
    "default_priority_level",
)


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
            target = section_findings.place(
                finding.field, editor.config, editor.tables, applied.sections
            )
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
    section_rows = section_findings.unchanged_rows(config)
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
