"""The API's JSON parser: bad JSON is a 400 naming the problem, never a 500.

DRF's own parser lets two kinds of document through to the views: deeply nested arrays
(100k levels raise RecursionError inside json, or later in any code that walks the
document) and strings with lone surrogates such as "\\ud800", which JSON allows but
UTF-8 cannot encode (a config text with one raised UnicodeEncodeError when saved).
This parser refuses both, with the path of the offending value.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 64


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_document(document: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise ParseError for nesting deeper than ``max_depth`` or a lone surrogate; walks
    with an explicit stack (no recursion)."""
    stack: list[tuple[Any, str, int]] = [(document, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > max_depth:
            raise ParseError(f"JSON nested deeper than {max_depth} levels at {path or 'the top'}")
        if isinstance(value, str):
            if _has_surrogate(value):
                raise ParseError(
                    f"{path or 'the document'}: the text holds a lone UTF-16 surrogate "
                    "(such as \\ud800), which is not a character; remove it"
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if _has_surrogate(key):
                    raise ParseError(
                        "a key holds a lone UTF-16 surrogate, which is not a character"
                    )
                stack.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))


class SafeJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"JSON parse error: the body is not {encoding} (byte {exc.start})"
            ) from None
        try:
            document = json.loads(text)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        check_document(document)
        return document
