"""The names a model folder may have: one rule, used wherever a model name enters.

Triton only asks that a model be a folder directly under the repository. That is not
enough: the Python backend starts its stub through ``bash -c`` with the model's path
unquoted, so a folder named ``inj$(...)`` runs a shell command on the Triton host when it
loads, and ``x"><img ...>`` can never load at all. So the dashboard accepts model names
only from a safe set: ASCII letters, digits, ``_``, ``.`` and ``-``, starting with a
letter, digit or ``_``, at most MAX_MODEL_NAME characters. Folders already on disk with
other names are listed with the reason (``unsafe_name_reason``) and never loaded, edited,
uploaded to or benchmarked from the dashboard: rename them on disk.
"""

from __future__ import annotations

import re

MAX_MODEL_NAME = 128
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RepositoryError(Exception):
    """A bad model name or a missing folder, with a message fit for a user."""


class InvalidName(ValueError):
    """A name that may not land on disk; the message says why and what to do."""


class InvalidModelName(RepositoryError, InvalidName):
    """A model name outside the safe set (caught as either parent)."""


def unsafe_name_reason(name: object) -> str:
    """Why ``name`` is not a model name the dashboard works with; "" when it is one."""
    if not isinstance(name, str):
        return f"a model name is text, got {type(name).__name__}"
    if not name:
        return "the model name is empty"
    if "\x00" in name:
        return "it contains a NUL byte"
    if _CONTROL.search(name):
        return "it contains control characters"
    if name in (".", ".."):
        return f"it may not be {name!r}"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if name != name.strip():
        return "it starts or ends with white space"
    if name.startswith("."):
        return "it starts with '.': Triton would not see it"
    if len(name) > MAX_MODEL_NAME:
        return f"it is longer than {MAX_MODEL_NAME} characters"
    if not _SAFE.fullmatch(name):
        bad = sorted({c for c in name if not re.fullmatch(r"[A-Za-z0-9_.-]", c)})
        if bad:
            shown = " ".join(repr(c) for c in bad[:8])
            return (
                f"it contains {shown}: model names may hold only ASCII letters, digits, "
                "'_', '.' and '-' (the Python backend passes the path to a shell)"
            )
        return "it must start with a letter, a digit or '_'"
    return ""


def is_safe_model_name(name: object) -> bool:
    return not unsafe_name_reason(name)


def unsafe_name_message(name: object) -> str:
    return f"invalid model name {name!r}: {unsafe_name_reason(name)}"


def check_model_name(name: object) -> str:
    """The name, or InvalidModelName saying why it is refused."""
    if unsafe_name_reason(name):
        raise InvalidModelName(unsafe_name_message(name))
    assert isinstance(name, str)
    return name
