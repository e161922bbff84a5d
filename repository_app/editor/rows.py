"""Reading the editor's table rows: which were deleted, changed or added (shared by
form_building, form_apply, section_apply and section_children)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms as djforms


def deleted(form: djforms.Form) -> bool:
    return bool(getattr(form, "cleaned_data", {}).get("DELETE")) or (
        form.is_bound and form.fields.get("DELETE") is not None and raw_bool(form, "DELETE")
    )


def raw_bool(form: djforms.Form, name: str) -> bool:
    value = form.data.get(form.add_prefix(name))
    return value not in (None, "", "false", "False", "0", "off")


def changed(form: djforms.Form) -> list[str]:
    """Changed fields that could be read (a format error keeps the old value)."""
    return [n for n in form.changed_data if n != "DELETE" and n not in form.errors]


def formset_changed(formset: djforms.BaseFormSet) -> bool:
    for form in formset.forms:
        if deleted(form) and form.initial:
            return True
        if not deleted(form) and form.has_changed():
            return True
    return False


def apply_rows(
    container: Any, formset: djforms.BaseFormSet, apply_row: Callable[[Any, Any, list[str]], None]
) -> list[int]:
    """Row i edits element i of a repeated message field (``apply_row(element, form,
    changed)`` with the fields that changed); rows after the elements add, ticked "delete"
    boxes remove; a new element gets every field of its row (a preset such as a step's
    model_version -1 included). Returns the row map: element k of the result came from row
    result[k]."""
    existing = len(container)
    gone: list[int] = []
    kept: list[int] = []
    added: list[int] = []
    for i, form in enumerate(formset.forms):
        if i < existing:
            if deleted(form):
                gone.append(i)
                continue
            kept.append(i)
            names = changed(form)
            if names:
                apply_row(container[i], form, names)
        elif form.has_changed() and not deleted(form):
            readable = [n for n in form.fields if n != "DELETE" and n not in form.errors]
            apply_row(container.add(), form, readable)
            added.append(i)
    for i in reversed(gone):
        del container[i]
    return kept + added


def apply_key_value_rows(
    target: Any,
    formset: djforms.BaseFormSet,
    origins: list[str],
    read: Callable[[djforms.Form, int, list[str]], tuple[str, str]],
    put: Callable[[str, str], None],
    missing_key: str,
) -> tuple[dict[str, int], bool]:
    """A string-keyed map edited as rows (the parameters, cc_model_filenames, metric_tags):
    row i shows key ``origins[i]``, later rows add. ``read(form, i, changed)`` gives a row's
    key and value, ``put(key, value)`` writes one into ``target``; a ticked "delete" box or a
    renamed key removes the old key. Returns each key's row and whether every row had a key
    (``missing_key`` is the error of one without)."""
    rows: dict[str, int] = {}
    ok = True
    removals: list[str] = []
    updates: list[tuple[str, str, int]] = []
    for i, form in enumerate(formset.forms):
        origin = origins[i] if i < len(origins) else None
        if deleted(form):
            if origin is not None:
                removals.append(origin)
            continue
        if origin is None and not form.has_changed():
            continue
        names = changed(form)
        key, value = read(form, i, names)
        if not key:
            form.add_error("key", missing_key)
            ok = False
            continue
        if origin is not None and not names:
            rows[key] = i
            continue
        if origin is not None and "key" in names:
            removals.append(origin)
        updates.append((key, value, i))
    for key in removals:
        if key in target:
            del target[key]
    for key, value, i in updates:
        put(key, value)
        rows[key] = i
    return rows, ok


def row_values(form: djforms.Form, initial: dict[str, Any]) -> dict[str, Any]:
    """A row's values: what was posted where it could be read, ``initial`` elsewhere (an
    unchanged field reads back as its initial value, so a row nobody touched gives back
    exactly what it showed)."""
    values: dict[str, Any] = {}
    cleaned = getattr(form, "cleaned_data", {})
    for name in form.fields:
        if name == "DELETE":
            continue
        if name in form.errors or name not in cleaned:
            values[name] = initial.get(name, form.get_initial_for_field(form.fields[name], name))
        else:
            values[name] = cleaned[name]
    return values
