"""config.pbtxt as written: a tree of character spans, one per field and value.

``text_edit`` changes the text exactly where two configs differ, so it needs to know where
each field, value, bracket and separator sits in the original text; protobuf's own parser
keeps none of that. ``TreeBuilder`` reads ``parsing.tokenize``'s tokens into that tree, and
refuses (``CannotEditInPlace``) text it could not edit safely.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from .parsing import tokenize

REPEATED = FieldDescriptor.LABEL_REPEATED
MESSAGE = FieldDescriptor.TYPE_MESSAGE


class CannotEditInPlace(Exception):
    """The change cannot be applied to the text in place; ``reason`` says why, in words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"config.pbtxt cannot be edited in place: {reason}")


@dataclass(eq=False)
class Value:
    """One written value: a scalar's tokens, or a message from its "{" to its "}"."""

    start: int
    end: int
    body: Body | None = None
    comma: int | None = None  # offset of the "," after it inside [ ... ]


@dataclass(eq=False)
class Entry:
    """One occurrence of a field: ``name: value``, ``name { ... }`` or ``name: [ ... ]``."""

    fd: FieldDescriptor
    start: int  # the name's offset
    end: int  # after the value, or after "]"
    sep_end: int  # after a trailing ";" or ","
    colon: bool
    values: list[Value]
    open_bracket: int | None = None
    close_bracket: int | None = None

    @property
    def listed(self) -> bool:
        return self.open_bracket is not None


@dataclass(eq=False)
class Body:
    desc: Descriptor
    open: int | None  # offset of "{" or "<"; None at the file's top level
    close: int | None
    entries: list[Entry] = field(default_factory=list)


class TreeBuilder:
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

    def body(self, desc: Descriptor, open_at: int | None, closing: str | None) -> Body:
        body = Body(desc, open_at, None)
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
            entry = Entry(fd, start, start, start, False, [])
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

    def value(self, fd: FieldDescriptor) -> Value:
        kind, text, start = self.take()
        if fd.type == MESSAGE:
            if text not in ("{", "<"):
                raise CannotEditInPlace(f"'{fd.name}' is not written as a block")
            inner = self.body(fd.message_type, start, "}" if text == "{" else ">")
            assert inner.close is not None
            return Value(start, inner.close + 1, inner)
        end = start + len(text)
        if text in ("-", "+"):
            _, number, at = self.take()
            end = at + len(number)
        elif kind == "string":
            while (nxt := self.peek()) is not None and nxt[0] == "string":
                self.take()
                end = nxt[2] + len(nxt[1])
        return Value(start, end)


def walk(body: Body) -> Iterable[Entry]:
    for entry in body.entries:
        yield entry
        for value in entry.values:
            if value.body is not None:
                yield from walk(value.body)


def is_map(fd: FieldDescriptor) -> bool:
    return fd.type == MESSAGE and fd.message_type.GetOptions().map_entry
