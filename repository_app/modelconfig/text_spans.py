"""Edits of the config.pbtxt text by character offsets, aware of lines and comments.

The field-level editor (``text_edit``) decides what changes; this base class knows where a
line starts and ends, which comment lines belong to a field, how to remove a span without
leaving an empty line or doubled spaces, and applies the collected edits in one pass.
"""

from __future__ import annotations

from .text_tree import CannotEditInPlace


class SpanEdits:
    """Collects (start, end, replacement) edits on ``text``; ``result`` applies them."""

    def __init__(self, text: str) -> None:
        self.text = text
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
