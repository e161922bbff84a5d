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
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import message_factory, text_encoding, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from .parsing import ModelConfig, parse_config, tokenize

REPEATED = FieldDescriptor.LABEL_REPEATED
MESSAGE = FieldDescriptor.TYPE_MESSAGE
_STRINGS = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)
# A new block is written on one line when it fits in this many columns (as Triton's docs do
# for small blocks such as instance_group [ { count: 1 kind: KIND_CPU } ]).
INLINE_WIDTH = 80


class CannotEditInPlace(Exception):
    """The change cannot be applied to the text in place; ``reason`` says why, in words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"config.pbtxt cannot be edited in place: {reason}")


# --- the written text as a tree of spans ----------------------------------------------------


@dataclass(eq=False)
class _Value:
    """One written value: a scalar's tokens, or a message from its "{" to its "}"."""

    start: int
    end: int
    body: _Body | None = None
    comma: int | None = None  # offset of the "," after it inside [ ... ]


@dataclass(eq=False)
class _Entry:
    """One occurrence of a field: ``name: value``, ``name { ... }`` or ``name: [ ... ]``."""

    fd: FieldDescriptor
    start: int  # the name's offset
    end: int  # after the value, or after "]"
    sep_end: int  # after a trailing ";" or ","
    colon: bool
    values: list[_Value]
    open_bracket: int | None = None
    close_bracket: int | None = None

    @property
    def listed(self) -> bool:
        return self.open_bracket is not None


@dataclass(eq=False)
class _Body:
    desc: Descriptor
    open: int | None  # offset of "{" or "<"; None at the file's top level
    close: int | None
    entries: list[_Entry] = field(default_factory=list)


class _TreeBuilder:
    """Recursive descent over parsing.tokenize's tokens, keeping character offsets."""

    def __init__(self, text: str) -> None:
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        self.tokens = [(t.kind, t.text, starts[t.line - 1] + t.col - 1) for t in tokenize(text)]
        self.pos = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        if self.pos >= len(self.tokens):
            raise CannotEditInPlace("the text ends in the middle of a field")
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def body(self, desc: Descriptor, open_at: int | None, closing: str | None) -> _Body:
        body = _Body(desc, open_at, None)
        while True:
            tok = self.peek()
            if tok is None:
                if closing is not None:
                    raise CannotEditInPlace("a block is not closed")
                return body
            if closing is not None and tok[1] == closing:
                self.take()
                body.close = tok[2]
                return body
            kind, name, start = self.take()
            fd = desc.fields_by_name.get(name) if kind == "ident" else None
            if fd is None:
                raise CannotEditInPlace(
                    f"'{name}' in {desc.name} is not a field this editor knows "
                    "(extension or group syntax)"
                )
            entry = _Entry(fd, start, start, start, False, [])
            if (nxt := self.peek()) is not None and nxt[1] == ":":
                self.take()
                entry.colon = True
            nxt = self.peek()
            if nxt is not None and nxt[1] == "[":
                self.take()
                entry.open_bracket = nxt[2]
                while True:
                    kind, text, at = self.peek() or ("", "", 0)
                    if text == "]":
                        self.take()
                        entry.close_bracket = at
                        entry.end = at + 1
                        break
                    if text == ",":
                        self.take()
                        if entry.values:
                            entry.values[-1].comma = at
                        continue
                    entry.values.append(self.value(fd))
            else:
                entry.values.append(self.value(fd))
                entry.end = entry.values[-1].end
            entry.sep_end = entry.end
            if (nxt := self.peek()) is not None and nxt[1] in (";", ","):
                self.take()
                entry.sep_end = nxt[2] + 1
            body.entries.append(entry)

    def value(self, fd: FieldDescriptor) -> _Value:
        kind, text, start = self.take()
        if fd.type == MESSAGE:
            if text not in ("{", "<"):
                raise CannotEditInPlace(f"'{fd.name}' is not written as a block")
            inner = self.body(fd.message_type, start, "}" if text == "{" else ">")
            assert inner.close is not None
            return _Value(start, inner.close + 1, inner)
        end = start + len(text)
        if text in ("-", "+"):
            _, number, at = self.take()
            end = at + len(number)
        elif kind == "string":
            while (nxt := self.peek()) is not None and nxt[0] == "string":
                self.take()
                end = nxt[2] + len(nxt[1])
        return _Value(start, end)


# --- the file's own style ---------------------------------------------------------------------


@dataclass
class _Style:
    unit: str = "  "  # one level of indentation
    newline: str = "\n"
    pad: bool = True  # "[ 16 ]" rather than "[16]"
    scalar_lists: bool = True  # "dims: [ 16, 32 ]" rather than "dims: 16 dims: 32"
    message_lists: bool = True  # "input [ { ... } ]" rather than "input { ... }"
    colon: dict[str, bool] = field(default_factory=dict)  # "value: {" per field name


def _walk(body: _Body) -> Iterable[_Entry]:
    for entry in body.entries:
        yield entry
        for value in entry.values:
            if value.body is not None:
                yield from _walk(value.body)


def _style_of(text: str, tree: _Body) -> _Style:
    style = _Style(newline="\r\n" if "\r\n" in text else "\n")
    widths = sorted(
        {len(line) - len(line.lstrip(" ")) for line in text.splitlines() if line.strip()} - {0}
    )
    if any(line.startswith("\t") for line in text.splitlines()):
        style.unit = "\t"
    elif widths:
        style.unit = " " * widths[0]
    votes = {"pad": 0, "scalar": 0, "message": 0}
    for entry in _walk(tree):
        fd = entry.fd
        if fd.label == REPEATED and not _is_map(fd):
            key = "message" if fd.type == MESSAGE else "scalar"
            votes[key] += 1 if entry.listed else -1
        if entry.listed and entry.values and entry.open_bracket is not None:
            votes["pad"] += 1 if text[entry.open_bracket + 1] in " \t\r\n" else -1
        if fd.type == MESSAGE and not entry.listed:
            style.colon.setdefault(fd.name, entry.colon)
    style.pad = votes["pad"] >= 0
    style.scalar_lists = votes["scalar"] >= 0
    style.message_lists = votes["message"] >= 0
    return style


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.type == MESSAGE and fd.message_type.GetOptions().map_entry


def _present(msg: Message, fd: FieldDescriptor) -> bool:
    if fd.label == REPEATED:
        return len(getattr(msg, fd.name)) > 0
    if fd.type == MESSAGE or fd.has_presence:
        return msg.HasField(fd.name)
    return bool(getattr(msg, fd.name) != fd.default_value)


# --- rendering new text in that style ---------------------------------------------------------


def _message_class(desc: Descriptor) -> Any:
    return message_factory.GetMessageClass(desc)


class _Renderer:
    def __init__(self, style: _Style) -> None:
        self.style = style

    def literal(self, fd: FieldDescriptor, value: Any) -> str:
        """A scalar as protobuf text (strings double-quoted and escaped, enums by name)."""
        if fd.type == FieldDescriptor.TYPE_ENUM:
            enum_value = fd.enum_type.values_by_number.get(value)
            return enum_value.name if enum_value is not None else str(value)
        if fd.type == FieldDescriptor.TYPE_BOOL:
            return "true" if value else "false"
        if fd.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            raw = value.encode("utf-8") if isinstance(value, str) else value
            return '"' + text_encoding.CEscape(raw, as_utf8=True) + '"'
        if fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            # protobuf's own shortest round-tripping float text.
            holder = _message_class(fd.containing_type)()
            if fd.label == REPEATED:
                getattr(holder, fd.name).append(value)
            else:
                setattr(holder, fd.name, value)
            line = text_format.MessageToString(holder, as_one_line=True)
            return line.split(":", 1)[1].strip() if ":" in line else "0"
        return str(value)

    def bracket(self, items: list[str]) -> str:
        if not items:
            return "[]"
        pad = " " if self.style.pad else ""
        return f"[{pad}{', '.join(items)}{pad}]"

    def message(
        self,
        msg: Message,
        indent: str,
        used: int = 0,
        one_line: bool = False,
        order: list[str] | None = None,
    ) -> str:
        """``{ ... }`` on one line when it fits (or ``one_line``), else one field per line;
        fields in ``order`` (a neighbour's) first, the others in declaration order."""
        fields = [fd for fd in msg.DESCRIPTOR.fields if _present(msg, fd)]
        if order:
            rank = {name: i for i, name in enumerate(order)}
            fields.sort(key=lambda fd: (rank.get(fd.name, len(rank)), fd.index))
        if not fields:
            return "{ }" if self.style.pad else "{}"
        inline = "{ " + " ".join(self.field(fd, msg, indent, one_line=True) for fd in fields)
        inline += " }"
        if one_line or len(indent) + used + len(inline) <= INLINE_WIDTH:
            return inline
        inner = indent + self.style.unit
        nl = self.style.newline
        lines = "".join(f"{nl}{inner}{self.field(fd, msg, inner)}" for fd in fields)
        return "{" + lines + nl + indent + "}"

    def element(
        self,
        fd: FieldDescriptor,
        value: Any,
        indent: str,
        one_line: bool,
        order: list[str] | None = None,
    ) -> str:
        """One list element: a scalar literal, or a message laid out like its neighbour."""
        if fd.type != MESSAGE:
            return self.literal(fd, value)
        return self.message(value, indent, one_line=one_line, order=order)

    def elements_of(self, fd: FieldDescriptor, msg: Message) -> list[Any]:
        values = getattr(msg, fd.name)
        if not _is_map(fd):
            return list(values)
        return [_map_entry(fd, key, values[key]) for key in sorted(values)]

    def field(self, fd: FieldDescriptor, msg: Message, indent: str, one_line: bool = False) -> str:
        """The whole field of ``msg`` as new text (its first line not indented)."""
        name, nl = fd.name, self.style.newline
        if fd.label != REPEATED:
            value = getattr(msg, fd.name)
            if fd.type != MESSAGE:
                return f"{name}: {self.literal(fd, value)}"
            colon = ":" if self.style.colon.get(name, False) else ""
            body = self.message(value, indent, len(name) + 2, one_line)
            return f"{name}{colon} {body}"
        values = self.elements_of(fd, msg)
        joiner = " " if one_line else nl + indent
        if fd.type != MESSAGE:
            items = [self.literal(fd, v) for v in values]
            if self.style.scalar_lists:
                return f"{name}: {self.bracket(items)}"
            return joiner.join(f"{name}: {item}" for item in items)
        if not self.style.message_lists and not _is_map(fd):
            return joiner.join(
                f"{name} {self.message(v, indent, len(name) + 1, one_line)}" for v in values
            )
        flat = f"{name} " + self.bracket([self.message(v, "", one_line=True) for v in values])
        if one_line or len(indent) + len(flat) <= INLINE_WIDTH:
            return flat
        inner = indent + self.style.unit
        lines = ("," + nl).join(inner + self.message(v, inner) for v in values)
        return f"{name} [{nl}{lines}{nl}{indent}]"


def _map_entry(fd: FieldDescriptor, key: Any, value: Any) -> Message:
    entry = _message_class(fd.message_type)()
    entry.key = key
    if fd.message_type.fields_by_name["value"].type == MESSAGE:
        entry.value.CopyFrom(value)
    else:
        entry.value = value
    return entry


# --- computing the edits ----------------------------------------------------------------------


def _key(fd: FieldDescriptor, value: Any) -> Any:
    """Something hashable that is equal exactly when two list elements are."""
    if fd.type == MESSAGE:
        return value.SerializeToString(deterministic=True)
    return value


class _Editor:
    def __init__(self, text: str, style: _Style) -> None:
        self.text = text
        self.style = style
        self.render = _Renderer(style)
        self.edits: list[tuple[int, int, str]] = []

    # --- positions in the text ---------------------------------------------------------

    def line_start(self, pos: int) -> int:
        return self.text.rfind("\n", 0, pos) + 1

    def eol(self, pos: int) -> int:
        """Where the line holding ``pos`` ends (before its "\\r\\n" or "\\n")."""
        at = self.text.find("\n", pos)
        if at == -1:
            return len(self.text)
        return at - 1 if at > 0 and self.text[at - 1] == "\r" else at

    def after_eol(self, pos: int) -> int:
        at = self.text.find("\n", pos)
        return len(self.text) if at == -1 else at + 1

    def starts_line(self, pos: int) -> bool:
        return self.text[self.line_start(pos) : pos].strip() == ""

    def ends_line(self, pos: int) -> bool:
        rest = self.text[pos : self.eol(pos)].strip()
        return rest == "" or rest.startswith("#")

    def indent_of(self, pos: int) -> str:
        start = self.line_start(pos)
        line = self.text[start:pos]
        return line[: len(line) - len(line.lstrip(" \t"))]

    def attached_comments(self, line_start: int) -> int:
        """Start of the comment lines directly above ``line_start`` that belong to what is
        there (no blank line between); a comment block that opens the file stays."""
        top = line_start
        while top > 0:
            above = self.line_start(top - 1)
            if not self.text[above : top - 1].strip().startswith("#"):
                break
            top = above
        if top == line_start or self.text[:top].strip() == "":
            return line_start
        return top

    def edit(self, start: int, end: int, replacement: str) -> None:
        self.edits.append((start, end, replacement))

    def remove_span(self, start: int, end: int) -> None:
        """Remove [start, end): whole lines when it fills them, else the span and one side
        of its surrounding spaces."""
        text = self.text
        if self.starts_line(start) and self.ends_line(end):
            begin = self.attached_comments(self.line_start(start))
            stop = self.after_eol(end)
            if stop == len(text) and not text.endswith("\n") and begin > 0:
                begin -= 1  # the last line: take the newline before it instead
                if text[begin - 1 : begin] == "\r":
                    begin -= 1
            self.edit(begin, stop, "")
            return
        after = end
        while after < len(text) and text[after] in " \t":
            after += 1
        if after < len(text) and text[after] not in "\r\n#}>]":
            self.edit(start, after, "")
            return
        before = start
        while before > self.line_start(start) and text[before - 1] in " \t":
            before -= 1
        self.edit(before, end, "")

    # --- messages ----------------------------------------------------------------------

    def message(self, body: _Body, old: Message, new: Message) -> None:
        removed: list[_Entry] = []
        added: list[FieldDescriptor] = []
        for fd in body.desc.fields:
            entries = [e for e in body.entries if e.fd is fd]
            if fd.label == REPEATED:
                if _is_map(fd):
                    self.map_field(fd, entries, new, removed, added)
                else:
                    self.repeated(fd, entries, old, new, removed, added)
                continue
            was, now = _present(old, fd), _present(new, fd)
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
        self, body: _Body, removed: list[_Entry], added: list[FieldDescriptor], new: Message
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
        run: list[_Entry] = []
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

    def insert_after(self, entry: _Entry, makers: list[Any]) -> None:
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

    def into_empty_body(self, body: _Body, makers: list[Any]) -> None:
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
        entries: list[_Entry],
        old: Message,
        new: Message,
        removed: list[_Entry],
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
        entries: list[_Entry],
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

    def element_changed(self, fd: FieldDescriptor, value: _Value, old: Any, new: Any) -> None:
        if fd.type == MESSAGE:
            assert value.body is not None
            self.message(value.body, old, new)
        else:
            self.edit(value.start, value.end, self.render.literal(fd, new))

    def map_field(
        self,
        fd: FieldDescriptor,
        entries: list[_Entry],
        new: Message,
        removed: list[_Entry],
        added: list[FieldDescriptor],
    ) -> None:
        """Map fields (parameters) are matched by key. A key that is gone and a new key are
        paired in order, so a renamed parameter is one edited line; other new keys go after
        the last written one, in key order."""
        wanted = getattr(new, fd.name)
        elements = [(entry, value) for entry in entries for value in entry.values]
        written: list[Message] = []
        for _entry, value in elements:
            element = _message_class(fd.message_type)()
            text_format.Parse(self.text[value.start + 1 : value.end - 1], element)
            if any(w.key == element.key for w in written):
                raise CannotEditInPlace(f"{fd.name} key {element.key!r} is written twice")
            written.append(element)
        keys = {w.key for w in written}
        extra = [_map_entry(fd, key, wanted[key]) for key in sorted(wanted) if key not in keys]
        drop: set[int] = set()
        for i, element in enumerate(written):
            target = (
                _map_entry(fd, element.key, wanted[element.key])
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
        entries: list[_Entry],
        elements: list[tuple[_Entry, _Value]],
        drop: set[int],
        inserts: dict[int, list[Any]],
        removed: list[_Entry],
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

    def remove_elements(self, entry: _Entry, first: int, last: int) -> None:
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

    def separator(self, entry: _Entry) -> str:
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
        self, entry: _Entry, fd: FieldDescriptor, new_values: list[Any], at: _Value, after: bool
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

    # --- the result --------------------------------------------------------------------

    def result(self) -> str:
        out: list[str] = []
        cursor = 0
        for start, end, replacement in sorted(self.edits, key=lambda e: (e[0], e[1])):
            if start < cursor:
                raise CannotEditInPlace("two changes overlap in the text")
            out.append(self.text[cursor:start])
            out.append(replacement)
            cursor = end
        out.append(self.text[cursor:])
        return "".join(out)


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
    tree = _TreeBuilder(text).body(ModelConfig.DESCRIPTOR, None, None)
    editor = _Editor(text, _style_of(text, tree))
    editor.message(tree, old, new)
    result = editor.result()
    check = parse_config(result)
    if check.config is None or check.config != new:
        raise CannotEditInPlace(
            "the edited text would not read back as the new config (a construct this editor "
            "does not handle)"
        )
    return result
