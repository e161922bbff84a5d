"""The API's JSON parser: bad JSON is a 400 naming the problem, never a 500.

DRF's own parser lets two kinds of document through to the views: deeply nested arrays
(100k levels raise RecursionError inside json, or later in any code that walks the
document) and strings with lone surrogates such as "\\ud800", which JSON allows but
UTF-8 cannot encode (a config text with one raised UnicodeEncodeError when saved).
This parser refuses both, with the path of the offending value.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 64
# A document's size in values, counted on the raw text before json.loads builds anything:
# Python objects cost about 25 times their JSON, so a 10 MB body of 3.5 million `{}` grew
# the web process by 100 MB (kept) and six at once by 4.4 GB. Far above any real request
# (a perf_analyzer input-data document of 100,000 numbers is well within).
MAX_CONTAINERS = 100_000
MAX_VALUES = 1_000_000
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_DEEP = re.compile(r"[\[{](?:\s*[\[{]){" + str(MAX_DEPTH) + "}")  # MAX_DEPTH + 1 openers in a row
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_size(text: str) -> None:
    """ParseError when the JSON text holds more than MAX_CONTAINERS objects and arrays or
    MAX_VALUES values: counted with C-speed string operations on the text with its strings
    blanked, so the refusal costs a few passes over the body and nothing more."""
    bare = _STRINGS.sub('""', text)
    containers = bare.count("{") + bare.count("[")
    if containers > MAX_CONTAINERS and _DEEP.search(bare):
        # The usual deep document is said as such (a smaller one is refused with its path
        # once parsed: check_document).
        raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if containers > MAX_CONTAINERS:
        raise ParseError(
            f"JSON document too large: more than {MAX_CONTAINERS:,} objects and arrays"
        )
    if containers + bare.count(",") > MAX_VALUES:
        raise ParseError(f"JSON document too large: more than {MAX_VALUES:,} values")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_document(document: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise ParseError for nesting deeper than ``max_depth`` or a lone surrogate; walks
    with an explicit stack (no recursion). A value's path is spelled out only for the one
    refused: each stack entry holds its parent's entry and its key, not a string."""
    stack: list[tuple[Any, int, Any]] = [(document, 0, None)]
    while stack:
        entry = stack.pop()
        value, depth, _ = entry
        if depth > max_depth:
            raise ParseError(
                f"JSON nested deeper than {max_depth} levels at {_path(entry) or 'the top'}"
            )
        if isinstance(value, str):
            if _has_surrogate(value):
                raise ParseError(
                    f"{_path(entry) or 'the document'}: the text holds a lone UTF-16 "
                    "surrogate (such as \\ud800), which is not a character; remove it"
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if _has_surrogate(key):
                    raise ParseError(
                        "a key holds a lone UTF-16 surrogate, which is not a character"
                    )
                stack.append((item, depth + 1, (entry, key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, (entry, i)) for i, item in enumerate(value))


def _path(entry: tuple[Any, int, Any]) -> str:
    """The dotted path of a stack entry of check_document ("a.b[2]")."""
    parts: list[str] = []
    while entry[2] is not None:
        entry, key = entry[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


class SafeJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"JSON parse error: the body is not {encoding} (byte {exc.start})"
            ) from None
        check_size(text)
        try:
            document = json.loads(text)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        if _SURROGATE_ESCAPE.search(text) or max(text.count("["), text.count("{")) > MAX_DEPTH:
            check_document(document)  # only a document that may hold what it refuses
        return document
