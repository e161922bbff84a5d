"""Apply the difference between two configs to the original config.pbtxt text, in place.

``edit_in_place(text, new)`` returns ``text`` changed exactly where ``parse(text)`` and
``new`` differ, and nowhere else (configs live in git and are reviewed line by line):

- a changed scalar: its value's span is replaced (``max_batch_size: 8`` -> ``: 4``); a
  number, bool or enum set back to its default keeps its line with the default value
  written out, a string emptied loses its line;
- a removed field (or list element): its lines go, with its trailing comment and the comment
  lines directly above it (no blank line between) unless those open the file (the file's
  header comment stays); inside a line only the field's own span goes;
- a new field or block: inserted beside its siblings, after the nearest field that precedes
  it in Triton's declaration order (``default_model_filename`` after ``instance_group``,
  ``version_policy`` after ``backend``), in the file's indentation, list style
  (``dims: [ 16 ]`` or ``dims: 16 dims: 32``, ``input [ {...} ]`` or ``input {...}``) and
  bracket spacing; a new list element copies its neighbour's separator and layout;
- list elements are matched like lines in a diff (difflib), so deleting the first input
  removes that input's line instead of rewriting every input after it;
- everything else (comments, blank lines, odd spacing, field order) stays byte for byte.

The result is parsed back and must equal ``new``; otherwise, or when the text is not one this
module can edit (it does not parse, a map key written twice, extension syntax), it raises
``CannotEditInPlace`` with the reason. It never falls back to re-serialising: the caller
says so and asks (the editor offers "rewrite the whole file"), or refuses.

This module decides which fields and list elements change and what text each change
takes; ``text_tree`` reads the written text into spans, ``text_render`` writes new text
in the file's style and ``text_spans`` edits the text by offsets, line by line.
"""

from __future__ import annotations

import difflib
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from .parsing import ModelConfig, parse_config
from .text_render import Renderer, Style, map_entry, message_class, present, style_of
from .text_spans import SpanEdits
from .text_tree import MESSAGE, REPEATED, Body, CannotEditInPlace, Entry, TreeBuilder, Value, is_map

__all__ = ["CannotEditInPlace", "edit_in_place"]

_STRINGS = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


# --- computing the edits ----------------------------------------------------------------------


def _key(fd: FieldDescriptor, value: Any) -> Any:
    """Something hashable that is equal exactly when two list elements are."""
    if fd.type == MESSAGE:
        return value.SerializeToString(deterministic=True)
    return value


class _Editor(SpanEdits):
    """The field-level changes: which fields and list elements differ, and what text each
    change takes (the offsets and lines are ``SpanEdits``')."""

    def __init__(self, text: str, style: Style) -> None:
        super().__init__(text)
        self.style = style
        self.render = Renderer(style)

    # --- messages ----------------------------------------------------------------------

    def message(self, body: Body, old: Message, new: Message) -> None:
        removed: list[Entry] = []
        added: list[FieldDescriptor] = []
        for fd in body.desc.fields:
            entries = [e for e in body.entries if e.fd is fd]
            if fd.label == REPEATED:
                if is_map(fd):
                    self.map_field(fd, entries, new, removed, added)
                else:
                    self.repeated(fd, entries, old, new, removed, added)
                continue
            was, now = present(old, fd), present(new, fd)
            if len(entries) > 1:
                raise CannotEditInPlace(f"'{fd.name}' is written more than once")
            if fd.type == MESSAGE:
                if not now:
                    removed.extend(entries)
                elif not entries:
                    added.append(fd)
                elif getattr(old, fd.name) != getattr(new, fd.name):
                    inner = entries[0].values[0].body
                    assert inner is not None
                    self.message(inner, getattr(old, fd.name), getattr(new, fd.name))
                continue
            before, after = getattr(old, fd.name), getattr(new, fd.name)
            if before == after and was == now:
                continue
            if not entries:
                if now:
                    added.append(fd)
            elif not now and (fd.has_presence or fd.type in _STRINGS):
                # An emptied string loses its line; a number, bool or enum set back to its
                # default keeps it, with the default written out (max_batch_size: 0).
                removed.extend(entries)
            else:
                value = entries[0].values[0]
                self.edit(value.start, value.end, self.render.literal(fd, after))
        self.body_changes(body, removed, added, new)

    def body_changes(
        self, body: Body, removed: list[Entry], added: list[FieldDescriptor], new: Message
    ) -> None:
        gone = {id(e) for e in removed}
        kept = [e for e in body.entries if id(e) not in gone]
        if added and not kept and body.entries:
            # Everything here is replaced (e.g. version_policy latest -> all): one edit.
            first, last = body.entries[0], body.entries[-1]
            indent = self.indent_of(first.start)
            multi = "\n" in self.text[first.start : last.sep_end]
            joiner = self.style.newline + indent if multi else " "
            texts = [self.render.field(fd, new, indent) for fd in added]
            self.edit(first.start, last.sep_end, joiner.join(texts))
            return
        run: list[Entry] = []
        for entry in [*body.entries, None]:
            if entry is not None and id(entry) in gone:
                run.append(entry)
                continue
            if run:
                self.remove_span(run[0].start, run[-1].sep_end)
                run = []
        if not added:
            return
        if not kept:
            self.into_empty_body(body, self.makers(added, new))
            return
        # Beside its siblings: after the last written field that comes before it in
        # Triton's declaration order (so version_policy goes after name and backend,
        # default_model_filename after instance_group, gpus at the end of "{ count kind }");
        # before everything when nothing comes before it.
        after: dict[int, list[FieldDescriptor]] = {}
        before: dict[int, list[FieldDescriptor]] = {}
        for fd in added:
            preceding = [e for e in kept if e.fd.index < fd.index]
            if preceding:
                after.setdefault(id(max(preceding, key=lambda e: e.start)), []).append(fd)
            else:
                before.setdefault(id(kept[0]), []).append(fd)
        for entry in kept:
            if id(entry) in after:
                self.insert_after(entry, self.makers(after[id(entry)], new))
            if id(entry) in before:
                self.insert_before(entry.start, self.makers(before[id(entry)], new))

    def makers(self, fds: list[FieldDescriptor], new: Message) -> list[Any]:
        """Renderers of new fields, called with the indentation they will have."""
        return [lambda ind, fd=fd: self.render.field(fd, new, ind) for fd in fds]

    def insert_after(self, entry: Entry, makers: list[Any]) -> None:
        """New entries after ``entry``: below its line when it ends one, else on its line."""
        pos = entry.sep_end
        indent = self.indent_of(entry.start)
        if self.ends_line(pos):
            where = self.eol(pos)
            nl = self.style.newline
            self.edit(where, where, "".join(nl + indent + make(indent) for make in makers))
        else:
            self.edit(pos, pos, "".join(" " + make(indent) for make in makers))

    def insert_before(self, pos: int, makers: list[Any]) -> None:
        indent = self.indent_of(pos)
        if self.starts_line(pos):
            where = self.attached_comments(self.line_start(pos))
            nl = self.style.newline
            self.edit(where, where, "".join(indent + make(indent) + nl for make in makers))
        else:
            self.edit(pos, pos, "".join(make(indent) + " " for make in makers))

    def into_empty_body(self, body: Body, makers: list[Any]) -> None:
        nl = self.style.newline
        if body.open is None:  # a file with no fields at all (only comments)
            at = len(self.text)
            lead = "" if self.text == "" or self.text.endswith("\n") else nl
            self.edit(at, at, lead + "".join(make("") + nl for make in makers))
            return
        assert body.close is not None
        indent = self.indent_of(body.open)
        if "\n" in self.text[body.open + 1 : body.close]:
            inner = indent + self.style.unit
            where = self.eol(body.open)  # after a comment on the "{" line
            self.edit(where, where, "".join(nl + inner + make(inner) for make in makers))
        else:
            texts = " ".join(make(indent) for make in makers)
            self.edit(body.open + 1, body.close, f" {texts} ")

    # --- repeated fields ---------------------------------------------------------------

    def repeated(
        self,
        fd: FieldDescriptor,
        entries: list[Entry],
        old: Message,
        new: Message,
        removed: list[Entry],
        added: list[FieldDescriptor],
    ) -> None:
        before, after = list(getattr(old, fd.name)), list(getattr(new, fd.name))
        if before == after:
            return
        elements = [(entry, value) for entry in entries for value in entry.values]
        if len(elements) != len(before):
            raise CannotEditInPlace(f"'{fd.name}' is not written as its elements")
        if not elements:
            self.first_elements(fd, entries, after, added)
            return
        # Matched like lines in a diff: a deleted first input is one removal, not a rewrite
        # of every input after it. Changed elements of a "replace" block are edited in place.
        matcher = difflib.SequenceMatcher(
            None, [_key(fd, v) for v in before], [_key(fd, v) for v in after], autojunk=False
        )
        drop: set[int] = set()
        inserts: dict[int, list[Any]] = {}
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
            for k in range(paired):
                self.element_changed(fd, elements[i1 + k][1], before[i1 + k], after[j1 + k])
            drop.update(range(i1 + paired, i2))
            if j1 + paired < j2:
                # After the element before them (-1: before the first), which is kept.
                inserts.setdefault(i1 + paired - 1, []).extend(after[j1 + paired : j2])
        self.list_changes(fd, entries, elements, drop, inserts, removed)

    def first_elements(
        self,
        fd: FieldDescriptor,
        entries: list[Entry],
        values: list[Any],
        added: list[FieldDescriptor],
    ) -> None:
        """Elements for a field written with none (absent, or an empty "[ ]")."""
        empty = next((e for e in entries if e.listed), None)
        if empty is None:
            added.append(fd)
            return
        assert empty.open_bracket is not None and empty.close_bracket is not None
        items = [self.render.element(fd, v, "", True) for v in values]
        self.edit(empty.open_bracket, empty.close_bracket + 1, self.render.bracket(items))

    def element_changed(self, fd: FieldDescriptor, value: Value, old: Any, new: Any) -> None:
        if fd.type == MESSAGE:
            assert value.body is not None
            self.message(value.body, old, new)
        else:
            self.edit(value.start, value.end, self.render.literal(fd, new))

    def map_field(
        self,
        fd: FieldDescriptor,
        entries: list[Entry],
        new: Message,
        removed: list[Entry],
        added: list[FieldDescriptor],
    ) -> None:
        """Map fields (parameters) are matched by key. A key that is gone and a new key are
        paired in order, so a renamed parameter is one edited line; other new keys go after
        the last written one, in key order."""
        wanted = getattr(new, fd.name)
        elements = [(entry, value) for entry in entries for value in entry.values]
        written: list[Message] = []
        for _entry, value in elements:
            element = message_class(fd.message_type)()
            text_format.Parse(self.text[value.start + 1 : value.end - 1], element)
            if any(w.key == element.key for w in written):
                raise CannotEditInPlace(f"{fd.name} key {element.key!r} is written twice")
            written.append(element)
        keys = {w.key for w in written}
        extra = [map_entry(fd, key, wanted[key]) for key in sorted(wanted) if key not in keys]
        drop: set[int] = set()
        for i, element in enumerate(written):
            target = (
                map_entry(fd, element.key, wanted[element.key])
                if element.key in wanted
                else (extra.pop(0) if extra else None)
            )
            if target is None:
                drop.add(i)
            elif target != element:
                body = elements[i][1].body
                assert body is not None
                self.message(body, element, target)
        if not elements:
            if extra:
                self.first_elements(fd, entries, extra, added)
            return
        inserts = {max(i for i in range(len(elements)) if i not in drop): extra} if extra else {}
        self.list_changes(fd, entries, elements, drop, inserts, removed)

    def list_changes(
        self,
        fd: FieldDescriptor,
        entries: list[Entry],
        elements: list[tuple[Entry, Value]],
        drop: set[int],
        inserts: dict[int, list[Any]],
        removed: list[Entry],
    ) -> None:
        """Remove the dropped elements and insert new ones after their (kept) anchors."""
        index = {id(value): i for i, (_, value) in enumerate(elements)}
        for entry in entries:
            positions = [index[id(v)] for v in entry.values]
            dropped = [p in drop for p in positions]
            if entry.values and all(dropped):
                removed.append(entry)  # the whole "name: [ ... ]" or "name { ... }" goes
                continue
            if not entry.listed:
                continue
            k = 0
            while k < len(dropped):
                if not dropped[k]:
                    k += 1
                    continue
                j = k
                while j + 1 < len(dropped) and dropped[j + 1]:
                    j += 1
                self.remove_elements(entry, k, j)
                k = j + 1
        for anchor, new_values in sorted(inserts.items()):
            if anchor == -1:
                entry, value = elements[0]
                self.insert_elements(entry, fd, new_values, value, after=False)
            else:
                entry, value = elements[anchor]
                self.insert_elements(entry, fd, new_values, value, after=True)

    def remove_elements(self, entry: Entry, first: int, last: int) -> None:
        values = entry.values
        a, b = values[first], values[last]
        b_end = b.comma + 1 if b.comma is not None else b.end
        tail = last == len(values) - 1
        if self.starts_line(a.start) and self.ends_line(b_end):
            self.remove_span(a.start, b_end)
            comma = values[first - 1].comma if first > 0 else None
            if tail and comma is not None:
                self.edit(comma, comma + 1, "")  # "[ a, b ]" may not end in a comma
        elif not tail:
            self.edit(a.start, values[last + 1].start, "")
        else:
            self.edit(values[first - 1].end, b_end, "")

    def separator(self, entry: Entry) -> str:
        values = entry.values
        if len(values) >= 2:
            between = self.text[values[0].end : values[1].start]
            if "#" not in between and "," in between:
                return between
        assert entry.open_bracket is not None and entry.close_bracket is not None
        if "\n" in self.text[entry.open_bracket : entry.close_bracket]:
            return "," + self.style.newline + self.indent_of(values[0].start)
        return ", "

    def insert_elements(
        self, entry: Entry, fd: FieldDescriptor, new_values: list[Any], at: Value, after: bool
    ) -> None:
        """New elements after (or before) the element ``at``, laid out like it."""
        one_line = "\n" not in self.text[at.start : at.end]
        indent = self.indent_of(at.start)
        nl = self.style.newline
        # Fields in the order the neighbour writes them ("{ count: 1 kind: KIND_CPU }").
        order = [e.fd.name for e in at.body.entries] if at.body is not None else None
        if not entry.listed:  # repeated style: "dims: 16 dims: 32", "input { } input { }"
            colon = ": " if fd.type != MESSAGE or entry.colon else " "
            makers = [
                lambda ind, v=v: fd.name + colon + self.render.element(fd, v, ind, one_line, order)
                for v in new_values
            ]
            if after:
                self.insert_after(entry, makers)
            else:
                self.insert_before(entry.start, makers)
            return
        items = [self.render.element(fd, v, indent, one_line, order) for v in new_values]
        sep = self.separator(entry)
        own_lines = "\n" in sep and self.starts_line(at.start)
        position = next(i for i, v in enumerate(entry.values) if v is at)
        if after:
            end = at.comma + 1 if at.comma is not None else at.end
            last = position == len(entry.values) - 1
            if own_lines and self.ends_line(end):
                # One element per line: below this one's line (its trailing comment stays).
                if last:
                    self.edit(at.end, at.end, ",")
                tails = [","] * (len(items) - 1) + ["" if last else ","]
                where = self.eol(end)
                lines = [nl + indent + i + t for i, t in zip(items, tails, strict=True)]
                self.edit(where, where, "".join(lines))
            elif last:
                self.edit(at.end, at.end, "".join(sep + item for item in items))
            else:
                nxt = entry.values[position + 1].start
                self.edit(nxt, nxt, "".join(item + sep for item in items))
        elif own_lines:
            where = self.attached_comments(self.line_start(at.start))
            self.edit(where, where, "".join(indent + item + "," + nl for item in items))
        else:
            self.edit(at.start, at.start, "".join(item + sep for item in items))


def edit_in_place(text: str, new: ModelConfig) -> str:
    """``text`` with the fields that differ from ``new`` changed in place (see the module
    docstring); raises CannotEditInPlace when that is not possible."""
    parsed = parse_config(text)
    if parsed.config is None:
        first = parsed.findings[0].message if parsed.findings else "it does not parse"
        raise CannotEditInPlace(f"the file does not parse ({first})")
    old = parsed.config
    if old == new:
        return text
    tree = TreeBuilder(text).body(ModelConfig.DESCRIPTOR, None, None)
    editor = _Editor(text, style_of(text, tree))
    editor.message(tree, old, new)
    result = editor.result()
    check = parse_config(result)
    if check.config is None or check.config != new:
        raise CannotEditInPlace(
            "the edited text would not read back as the new config (a construct this editor "
            "does not handle)"
        )
    return result
