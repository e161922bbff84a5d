"""Parse config.pbtxt text into a ``ModelConfig`` and map field paths to line:col.

``parse_config`` never raises: every failure (syntax, unknown field or enum value,
bad encoding, absurd size or nesting) becomes an error ``Finding`` with a position.
Python's protobuf has no ``ParseInfoTree``, so positions come from ``FieldLocator``,
a small scanner that walks the (already valid) text alongside the message descriptor.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2

from .findings import ERROR, Finding
from .suggest import suggest

if TYPE_CHECKING:
    from .templates import TemplateInfo

ModelConfig = model_config_pb2.ModelConfig

# Real configs are a few KB; above this we refuse rather than tie up a worker.
MAX_CONFIG_BYTES = 1024 * 1024
# Deeper than any real config; protects the recursive parser (and us) from stack abuse.
MAX_NESTING = 64
# Real configs hold tens of messages (a large ensemble a few hundred). Each costs the two
# parses (protobuf's and the field locator's) about 0.1 ms, and the form a row: a 1 MB
# file of 20,000 parameters took seconds per check, for anyone who may read the editor.
MAX_MESSAGES = 5000
# The same for values: a dims list of 300,000 ones took 4 s. A real config has a few
# thousand tokens at most.
MAX_TOKENS = 50_000

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:\d|\.\d)[\w.+-]*)
  | (?P<ident>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)
  | (?P<punct>[{}\[\]<>:;,/-])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int  # 1-based
    col: int  # 1-based


def tokenize(text: str) -> list[Token]:
    """Split text-format source into tokens, dropping whitespace and comments."""
    tokens: list[Token] = []
    line, line_start = 1, 0
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup or "other"
        start = m.start()
        if kind not in ("ws", "comment"):
            tokens.append(Token(kind, m.group(), line, start - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + m.group().rfind("\n") + 1
    return tokens


@dataclass
class FieldLocator:
    """Field path -> (line, col) of where the field (or list element) appears."""

    positions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: str) -> tuple[int | None, int | None]:
        """Position of ``path`` or, failing that, of its nearest written ancestor."""
        probe = path
        while probe:
            if probe in self.positions:
                return self.positions[probe]
            probe = _parent_path(probe)
        return None, None

    def has(self, path: str) -> bool:
        """True when ``path`` was written explicitly in the text."""
        return path in self.positions

    @classmethod
    def scan(cls, text: str, descriptor: Descriptor | None = None) -> FieldLocator:
        """Build a locator for syntactically valid text; tolerant of surprises."""
        locator = cls()
        walker = _Walker(tokenize(text), locator.positions)
        # On truncated text the walk stops early; positions recorded so far are still right.
        with contextlib.suppress(IndexError, RecursionError):
            walker.message_body(descriptor or ModelConfig.DESCRIPTOR, "", closing=None)
        return locator


def _parent_path(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rfind("[")]
    dot = path.rfind(".")
    return path[:dot] if dot > 0 else ""


class TokenCursor:
    """A position in a token list (the walks over config text share it)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok


class _Walker(TokenCursor):
    """Recursive-descent walk over tokens, recording each field's position."""

    def __init__(self, tokens: list[Token], positions: dict[str, tuple[int, int]]) -> None:
        super().__init__(tokens)
        self.positions = positions

    def record(self, path: str, tok: Token) -> None:
        self.positions.setdefault(path, (tok.line, tok.col))

    def message_body(
        self, desc: Descriptor | None, prefix: str, closing: str | None
    ) -> dict[str, str]:
        """Walk fields until ``closing``; returns scalar values of this level (for map keys)."""
        counters: dict[str, int] = {}
        scalars: dict[str, str] = {}
        while True:
            tok = self.peek()
            if tok is None or (closing is not None and tok.text == closing):
                if tok is not None:
                    self.take()
                return scalars
            name_tok = self.take()
            if name_tok.text == "[":  # extension / Any type URL: skip to "]"
                while self.take().text != "]":
                    pass
                name = "?"
            else:
                name = name_tok.text
            fd = desc.fields_by_name.get(name) if desc is not None else None
            repeated = fd is not None and fd.label == FieldDescriptor.LABEL_REPEATED
            sub_desc = fd.message_type if fd is not None else None
            base = f"{prefix}{name}"
            self.record(base, name_tok)
            if self.peek() is not None and self.peek().text == ":":  # type: ignore[union-attr]
                self.take()
            nxt = self.peek()
            if nxt is not None and nxt.text == "[":
                self.take()
                while True:
                    nxt = self.peek()
                    if nxt is None or nxt.text == "]":
                        self.take()
                        break
                    if nxt.text == ",":
                        self.take()
                        continue
                    self.element(base, repeated, sub_desc, counters, scalars, name)
            else:
                self.element(base, repeated, sub_desc, counters, scalars, name)
            nxt = self.peek()
            if nxt is not None and nxt.text in (";", ","):
                self.take()

    def element(
        self,
        base: str,
        repeated: bool,
        sub_desc: Descriptor | None,
        counters: dict[str, int],
        scalars: dict[str, str],
        name: str,
    ) -> None:
        start = self.peek()
        if start is None:
            return
        if repeated:
            index = counters.get(name, 0)
            counters[name] = index + 1
            path = f"{base}[{index}]"
        else:
            path = base
        self.record(path, start)
        if start.text in ("{", "<"):
            self.take()
            inner = self.message_body(sub_desc, path + ".", "}" if start.text == "{" else ">")
            if sub_desc is not None and sub_desc.GetOptions().map_entry and "key" in inner:
                self.record(f'{base}["{inner["key"]}"]', start)
        else:
            scalars[name] = self.scalar()

    def scalar(self) -> str:
        tok = self.take()
        text = tok.text
        if text in ("-", "+"):
            text += self.take().text
        elif tok.kind == "string":
            parts = [text[1:-1]]
            while (nxt := self.peek()) is not None and nxt.kind == "string":
                parts.append(self.take().text[1:-1])
            text = "".join(parts)
        return text


@dataclass
class ParseResult:
    """A parsed config (None when the text is unusable), its findings and positions.

    ``template`` is set by ``templates.parse_for_validation`` when the text holds
    ``${name}`` placeholders (then ``config`` was parsed with stand-ins for them).
    """

    config: model_config_pb2.ModelConfig | None
    findings: list[Finding]
    locator: FieldLocator
    text: str = ""
    template: TemplateInfo | None = None

    @property
    def ok(self) -> bool:
        return self.config is not None


def decode_config_bytes(data: bytes) -> tuple[str, list[Finding]]:
    """Decode UTF-8 (with or without BOM); report the first bad byte's position."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        finding = Finding(
            ERROR,
            "parse.encoding",
            f"config.pbtxt is not valid UTF-8 (byte 0x{data[exc.start]:02x}): "
            "save the file as UTF-8 text",
            line=line,
            col=col,
        )
        return data.decode("utf-8", errors="replace"), [finding]


def parse_config(source: str | bytes) -> ParseResult:
    """Parse config.pbtxt text (str or bytes) into a ModelConfig. Never raises."""
    findings: list[Finding] = []
    if isinstance(source, bytes):
        if len(source) > MAX_CONFIG_BYTES:
            return ParseResult(None, [_too_large(len(source))], FieldLocator())
        text, findings = decode_config_bytes(source)
    else:
        text = source
        if len(text) > MAX_CONFIG_BYTES:
            return ParseResult(None, [_too_large(len(text))], FieldLocator(), text)
    if "\x00" in text:
        line, col = _position_of(text, text.index("\x00"))
        findings.append(
            Finding(
                ERROR,
                "parse.binary",
                "config.pbtxt contains NUL bytes, so it is binary, not protobuf text: "
                "upload the text config.pbtxt, not a model or serialized file",
                line=line,
                col=col,
            )
        )
        return ParseResult(None, findings, FieldLocator(), text)
    nesting = _nesting_error(text)
    if nesting is not None:
        return ParseResult(None, [*findings, nesting], FieldLocator(), text)

    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        findings.append(_syntax_finding(exc, text))
        return ParseResult(None, findings, FieldLocator(), text)
    except RecursionError:
        findings.append(
            Finding(ERROR, "parse.too-deep", "config nests too deeply to parse: flatten it")
        )
        return ParseResult(None, findings, FieldLocator(), text)
    except Exception as exc:  # protobuf may raise ValueError/TypeError/... on odd input
        findings.append(
            Finding(
                ERROR,
                "parse.syntax",
                f"config.pbtxt could not be parsed ({type(exc).__name__}: {exc}): "
                "fix the protobuf text format",
            )
        )
        return ParseResult(None, findings, FieldLocator(), text)
    return ParseResult(config, findings, FieldLocator.scan(text), text)


def to_text(config: model_config_pb2.ModelConfig) -> str:
    """Serialize to canonical protobuf text (what ``parse_config`` reads back)."""
    return str(text_format.MessageToString(config))


def _too_large(size: int) -> Finding:
    return Finding(
        ERROR,
        "parse.too-large",
        f"config.pbtxt is {size / 1_048_576:.1f} MiB, over the {MAX_CONFIG_BYTES // 1_048_576} MiB "
        "limit; model configs are a few KB: remove embedded data (use files next to the model)",
        line=1,
        col=1,
    )


def _position_of(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


def _nesting_error(text: str) -> Finding | None:
    """Reject absurd brace nesting, or absurdly many messages or values, before the parsers
    see it (one regex pass, only for a text that could hold too many)."""
    if text.count("{") + text.count("<") <= MAX_NESTING and len(text) <= MAX_TOKENS:
        return None
    depth = messages = tokens = 0
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        tokens += 1
        if kind == "punct" and m.group() in "{}<>":
            opening = m.group() in "{<"
            depth += 1 if opening else -1
            messages += opening
        if depth > MAX_NESTING:
            return _limit_finding(
                text, m.start(), "parse.too-deep",
                f"messages nest more than {MAX_NESTING} levels deep here: a real model "
                "config nests a few levels; check for unbalanced or repeated '{'",
            )  # fmt: skip
        if messages > MAX_MESSAGES or tokens > MAX_TOKENS:
            what = f"{MAX_MESSAGES:,} messages" if messages > MAX_MESSAGES else (
                f"{MAX_TOKENS:,} values and symbols"
            )  # fmt: skip
            return _limit_finding(
                text, m.start(), "parse.too-many",
                f"config.pbtxt holds more than {what} (the limit is reached here): real "
                "model configs hold a few hundred; keep bulk data (thousands of parameters, "
                "long lists) in files next to the model",
            )  # fmt: skip
    return None


def _limit_finding(text: str, index: int, rule: str, message: str) -> Finding:
    line, col = _position_of(text, index)
    return Finding(ERROR, rule, message, line=line, col=col)


_UNKNOWN_FIELD_RE = re.compile(r'Message type "([\w.]+)" has no field named "([^"]*)"')
_UNKNOWN_ENUM_RE = re.compile(r'Enum type "([\w.]+)" has no value named (\S+?)\.?$')
_ONEOF_RE = re.compile(
    r'Field "(\w+)" is specified along with field "(\w+)", another member of oneof'
)


def _syntax_finding(exc: text_format.ParseError, text: str) -> Finding:
    line = exc.GetLine()
    col = exc.GetColumn()
    raw = str(exc)
    # ParseError text is "L:C : 'source line': reason" - keep only the reason.
    reason = re.sub(r"^\d+:\d+ : ", "", raw)
    reason = re.sub(r"^'.*?': (?=[A-Z])", "", reason, count=1)
    token = _token_at(text, line, col)
    for pattern, rule, message in (
        (_UNKNOWN_FIELD_RE, "parse.unknown-field", _unknown_field_message),
        (_UNKNOWN_ENUM_RE, "parse.unknown-enum", _unknown_enum_message),
    ):
        if m := pattern.search(raw):
            return Finding(ERROR, rule, message(m.group(1), m.group(2)), line=line, col=col)
    if m := _ONEOF_RE.search(raw):
        return Finding(
            ERROR,
            "scheduling.conflict",
            f"'{m.group(1)}' and '{m.group(2)}' are both set, but a model has exactly one "
            "scheduler (dynamic_batching, sequence_batching or ensemble_scheduling): keep one",
            field=m.group(1),
            line=line,
            col=col,
        )
    near = f" near '{token}'" if token else ""
    return Finding(
        ERROR,
        "parse.syntax",
        f"syntax error{near}: {reason.rstrip('.')}: fix the protobuf text format "
        "(fields are 'name: value' or 'name { ... }', lists are '[a, b]')",
        line=line,
        col=col,
    )


def _token_at(text: str, line: int | None, col: int | None) -> str:
    if not line or not col:
        return ""
    lines = text.split("\n")
    if line > len(lines):
        return ""
    m = _TOKEN_RE.match(lines[line - 1], col - 1)
    if m is None or m.lastgroup in ("ws", "comment"):
        return ""
    return m.group()[:40]


def _message_descriptor(full_name: str) -> Descriptor | None:
    short = full_name.split(".")[-1]
    pool_desc = ModelConfig.DESCRIPTOR.file.message_types_by_name.get(short)
    if pool_desc is not None:
        return pool_desc
    try:
        return ModelConfig.DESCRIPTOR.file.pool.FindMessageTypeByName(full_name)
    except KeyError:
        return None


def _unknown_field_message(type_name: str, name: str) -> str:
    desc = _message_descriptor(type_name)
    known = [f.name for f in desc.fields] if desc is not None else []
    close = suggest(name, known)
    hint = f"did you mean '{close}'?" if close else "remove it or check the spelling"
    short = type_name.split(".")[-1]
    return f"unknown field '{name}' in {short}: {hint}"


def _unknown_enum_message(type_name: str, value: str) -> str:
    try:
        enum = ModelConfig.DESCRIPTOR.file.pool.FindEnumTypeByName(type_name)
        allowed = [v.name for v in enum.values]
    except KeyError:
        allowed = []
    close = suggest(value, allowed)
    hint = f"did you mean {close}?" if close else "use one of " + ", ".join(allowed)
    return f"unknown value {value} for {type_name.split('.')[-1]}: {hint}"
