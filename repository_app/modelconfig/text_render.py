"""New config.pbtxt text in the file's own style.

What ``text_edit`` inserts must look like what is around it: the file's indentation unit,
newline, bracket spacing and list style (``dims: [ 16 ]`` or ``dims: 16 dims: 32``) are read
from the text (``style_of``), and ``Renderer`` writes scalars, messages and whole fields that
way, on one line when they fit in ``INLINE_WIDTH`` columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import message_factory, text_encoding, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from .text_tree import MESSAGE, REPEATED, Body, is_map, walk

# A new block is written on one line when it fits in this many columns (as Triton's docs do
# for small blocks such as instance_group [ { count: 1 kind: KIND_CPU } ]).
INLINE_WIDTH = 80


@dataclass
class Style:
    unit: str = "  "  # one level of indentation
    newline: str = "\n"
    pad: bool = True  # "[ 16 ]" rather than "[16]"
    scalar_lists: bool = True  # "dims: [ 16, 32 ]" rather than "dims: 16 dims: 32"
    message_lists: bool = True  # "input [ { ... } ]" rather than "input { ... }"
    colon: dict[str, bool] = field(default_factory=dict)  # "value: {" per field name


def style_of(text: str, tree: Body) -> Style:
    style = Style(newline="\r\n" if "\r\n" in text else "\n")
    widths = sorted(
        {len(line) - len(line.lstrip(" ")) for line in text.splitlines() if line.strip()} - {0}
    )
    if any(line.startswith("\t") for line in text.splitlines()):
        style.unit = "\t"
    elif widths:
        style.unit = " " * widths[0]
    votes = {"pad": 0, "scalar": 0, "message": 0}
    for entry in walk(tree):
        fd = entry.fd
        if fd.label == REPEATED and not is_map(fd):
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


def present(msg: Message, fd: FieldDescriptor) -> bool:
    if fd.label == REPEATED:
        return len(getattr(msg, fd.name)) > 0
    if fd.type == MESSAGE or fd.has_presence:
        return msg.HasField(fd.name)
    return bool(getattr(msg, fd.name) != fd.default_value)


def message_class(desc: Descriptor) -> Any:
    return message_factory.GetMessageClass(desc)


class Renderer:
    def __init__(self, style: Style) -> None:
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
            holder = message_class(fd.containing_type)()
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
        fields = [fd for fd in msg.DESCRIPTOR.fields if present(msg, fd)]
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
        if not is_map(fd):
            return list(values)
        return [map_entry(fd, key, values[key]) for key in sorted(values)]

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
        if not self.style.message_lists and not is_map(fd):
            return joiner.join(
                f"{name} {self.message(v, indent, len(name) + 1, one_line)}" for v in values
            )
        flat = f"{name} " + self.bracket([self.message(v, "", one_line=True) for v in values])
        if one_line or len(indent) + len(flat) <= INLINE_WIDTH:
            return flat
        inner = indent + self.style.unit
        lines = ("," + nl).join(inner + self.message(v, inner) for v in values)
        return f"{name} [{nl}{lines}{nl}{indent}]"


def map_entry(fd: FieldDescriptor, key: Any, value: Any) -> Message:
    entry = message_class(fd.message_type)()
    entry.key = key
    if fd.message_type.fields_by_name["value"].type == MESSAGE:
        entry.value.CopyFrom(value)
    else:
        entry.value = value
    return entry
