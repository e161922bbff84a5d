"""config.pbtxt templates: ``${name}`` placeholders that a script fills before Triton sees them.

TensorRT-LLM, sherpa and wenet ship config.pbtxt files full of placeholders
(``max_batch_size: ${triton_max_batch_size}``, ``string_value: "${engine_dir}"``) that
``fill_template.py`` replaces (Python's ``string.Template``). Such a file is not protobuf
text, so the parser alone would stop at the first one. Here each placeholder is named with
its line:col, then the rest is checked with a stand-in of the field's type in place of each
placeholder (padded to the same width, so positions after it stay right); findings about a
field that holds a placeholder are dropped, since they would only judge the stand-in.

Public: ``template_placeholders(text)``, ``is_template(text)``, ``fill_template(text, values)``
and ``parse_for_validation(source)`` (``parse_config`` plus the above; the result's
``template`` says whether the file is a template and lists its placeholders).
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from .findings import ERROR, Finding
from .parsing import (
    MAX_CONFIG_BYTES,
    FieldLocator,
    ModelConfig,
    ParseResult,
    Token,
    TokenCursor,
    decode_config_bytes,
    parse_config,
    tokenize,
)

PLACEHOLDER_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Comments are skipped (fill_template.py fills them too, but Triton never reads them);
# placeholders inside strings are reported but need no stand-in.
_SCAN_RE = re.compile(
    r"""(?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<placeholder>\$\{[A-Za-z_][A-Za-z0-9_]*\})""",
    re.VERBOSE,
)
_BIG_BATCH = "65536"  # max_batch_size stand-in: above any literal preferred size or step


@dataclass(frozen=True)
class Placeholder:
    """One ``${name}`` in the text: where it is and whether it sits inside a string."""

    name: str
    line: int
    col: int
    start: int  # offset in the text
    end: int
    in_string: bool


@dataclass
class TemplateInfo:
    """What makes a config a template; ``templated_paths`` are the fields holding one."""

    placeholders: list[Placeholder]
    templated_paths: set[str] = field(default_factory=set)

    @property
    def names(self) -> list[str]:
        """Each placeholder name once, in order of first appearance (for a fill form)."""
        return list(dict.fromkeys(p.name for p in self.placeholders))


def template_placeholders(text: str) -> list[Placeholder]:
    """Every ``${name}`` outside comments, in text order."""
    if "${" not in text:
        return []
    found: list[Placeholder] = []
    for m in _SCAN_RE.finditer(text):
        kind = m.lastgroup
        if kind == "comment":
            continue
        spans = (
            [(p.start(), p.end(), p.group(1)) for p in PLACEHOLDER_RE.finditer(m.group())]
            if kind == "string"
            else [(0, m.end() - m.start(), m.group()[2:-1])]
        )
        for start, end, name in spans:
            offset = m.start() + start
            line = text.count("\n", 0, offset) + 1
            col = offset - (text.rfind("\n", 0, offset) + 1) + 1
            found.append(Placeholder(name, line, col, offset, m.start() + end, kind == "string"))
    return found


def is_template(text: str) -> bool:
    """True when the text holds at least one ``${name}`` placeholder outside comments."""
    return bool(template_placeholders(text))


def fill_template(text: str, values: Mapping[str, object]) -> str:
    """Replace ``${name}`` for every name in ``values`` (as fill_template.py does, comments
    included); other placeholders and every other byte stay as they are."""

    def substitute(m: re.Match[str]) -> str:
        name = m.group(1)
        return str(values[name]) if name in values else m.group()

    return PLACEHOLDER_RE.sub(substitute, text)


def placeholder_finding(p: Placeholder, path: str = "") -> Finding:
    where = " (inside a string, so Triton would load the text as it is)" if p.in_string else ""
    return Finding(
        ERROR,
        "template.placeholder",
        f"template placeholder ${{{p.name}}}: fill it, e.g. with fill_template.py{where}",
        path,
        p.line,
        p.col,
    )


def parse_for_validation(source: str | bytes) -> ParseResult:
    """``parse_config``, but a template is parsed with stand-ins and its placeholders named."""
    if isinstance(source, bytes):
        if len(source) > MAX_CONFIG_BYTES or b"${" not in source:
            return parse_config(source)
        text, encoding_findings = decode_config_bytes(source)
    else:
        if len(source) > MAX_CONFIG_BYTES or "${" not in source:
            return parse_config(source)
        text, encoding_findings = source, []
    placeholders = template_placeholders(text)
    if not placeholders:
        return parse_config(source)
    bare = {(p.line, p.col): p for p in placeholders if not p.in_string}
    stand_ins = _stand_ins(text, bare)
    pieces, last = [], 0
    for p in placeholders:
        if p.in_string:
            continue
        pieces.append(text[last : p.start])
        pieces.append(stand_ins.get((p.line, p.col), " ").ljust(p.end - p.start))
        last = p.end
    pieces.append(text[last:])
    filled = "".join(pieces)
    parsed = parse_config(filled)
    info = TemplateInfo(placeholders)
    findings = list(encoding_findings)
    index = _PathIndex(parsed.locator)
    for p in placeholders:
        path = index.path_at(p) if parsed.config is not None else ""
        if path:
            info.templated_paths.add(path)
        findings.append(placeholder_finding(p, path))
    return ParseResult(
        parsed.config, findings + parsed.findings, parsed.locator, text, template=info
    )


def drop_templated(findings: list[Finding], parsed: ParseResult) -> list[Finding]:
    """Drop findings about a field that holds a placeholder (they judge a stand-in)."""
    info = parsed.template
    if info is None or not info.templated_paths:
        return findings
    paths = info.templated_paths

    def about_stand_in(f: Finding) -> bool:
        if f.rule == "template.placeholder" or not f.field:
            return False
        # The field itself, something inside it, or a list whose element is a placeholder
        # (dims: [ -1, ${vocab_size} ] judged as a whole).
        return any(
            f.field == t or f.field.startswith((t + ".", t + "[")) or t.startswith(f.field + "[")
            for t in paths
        )

    return [f for f in findings if not about_stand_in(f)]


class _PathIndex:
    """Field paths by position, to find the innermost one written at or before a point."""

    def __init__(self, locator: FieldLocator) -> None:
        deepest: dict[tuple[int, int], str] = {}
        for path, at in locator.positions.items():
            if len(path) > len(deepest.get(at, "")):
                deepest[at] = path
        self.keys = sorted(deepest)
        self.paths = [deepest[k] for k in self.keys]

    def path_at(self, p: Placeholder) -> str:
        index = bisect.bisect_right(self.keys, (p.line, p.col)) - 1
        return self.paths[index] if index >= 0 else ""


def _stand_ins(text: str, bare: dict[tuple[int, int], Placeholder]) -> dict[tuple[int, int], str]:
    """A value of the right type for each placeholder outside strings (by position)."""
    marked, last = [], 0
    for (_line, _col), p in sorted(bare.items(), key=lambda kv: kv[1].start):
        marked.append(text[last : p.start])
        marked.append("Z" * (p.end - p.start))  # an identifier token at the same place
        last = p.end
    marked.append(text[last:])
    walker = _TypeWalker(tokenize("".join(marked)), set(bare))
    with contextlib.suppress(IndexError, RecursionError):
        walker.body(ModelConfig.DESCRIPTOR, None)
    return walker.values


class _TypeWalker(TokenCursor):
    """Walk the tokens alongside the descriptor; note which field each marker stands for."""

    def __init__(self, tokens: list[Token], markers: set[tuple[int, int]]) -> None:
        super().__init__(tokens)
        self.markers = markers
        self.values: dict[tuple[int, int], str] = {}

    def is_marker(self, tok: Token) -> bool:
        return (tok.line, tok.col) in self.markers

    def body(self, desc: Descriptor | None, closing: str | None) -> None:
        while (tok := self.peek()) is not None:
            if closing is not None and tok.text == closing:
                self.take()
                return
            name_tok = self.take()
            if self.is_marker(name_tok):
                self.values[(name_tok.line, name_tok.col)] = ""  # a whole field: blank it
                continue
            fd: FieldDescriptor | None = None
            if name_tok.text == "[":
                while self.take().text != "]":
                    pass
            elif desc is not None:
                fd = desc.fields_by_name.get(name_tok.text)
            nxt = self.peek()
            if nxt is not None and nxt.text == ":":
                self.take()
                nxt = self.peek()
            if nxt is None:
                return
            if nxt.text == "[":
                self.take()
                while (item := self.peek()) is not None and item.text != "]":
                    if item.text == ",":
                        self.take()
                        continue
                    self.value(fd)
                if item is not None:
                    self.take()
            else:
                self.value(fd)
            nxt = self.peek()
            if nxt is not None and nxt.text in (";", ","):
                self.take()

    def value(self, fd: FieldDescriptor | None) -> None:
        tok = self.take()
        if tok.text in ("{", "<"):
            sub = fd.message_type if fd is not None else None
            self.body(sub, "}" if tok.text == "{" else ">")
        elif self.is_marker(tok):
            self.values[(tok.line, tok.col)] = _stand_in(fd)
        elif tok.text in ("-", "+"):
            self.take()
        elif tok.kind == "string":
            while (nxt := self.peek()) is not None and nxt.kind == "string":
                self.take()


def _stand_in(fd: FieldDescriptor | None) -> str:
    if fd is None:
        return "1"
    if fd.name == "max_batch_size":
        return _BIG_BATCH
    cpp = fd.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return "false"
    if cpp in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        return "1.0"
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        return '"_"'
    if cpp == FieldDescriptor.CPPTYPE_MESSAGE:
        return "{ }"
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        enum = fd.enum_type
        if enum.name == "DataType":
            return "TYPE_FP32"
        return enum.values[0].name
    return "1"
