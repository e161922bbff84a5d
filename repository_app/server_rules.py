"""What a Triton server the dashboard manages may look like: the one set of checks.

Every way a server enters (the model's ``clean``; the Servers pages, ``manage.py servers``
and the API through ``server_admin``) goes through ``check``; each refusal names its field.
The addresses follow the rule of TRITON_URL / TRITON_HTTP_URL
(``dashboard.env.parse_hostport``), and one address is one server; the name is what URLs,
Redis keys and Channels group names carry, so it is kept to a small safe set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dashboard.env import parse_hostport

DEFAULT = "default"
NAME_RULE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
LABEL_RULE = re.compile(r"[A-Za-z0-9_.-]{1,63}")
MAX_LABELS = 32
# Triton reads the key of --grpc-restricted-protocol=<protocols>:<key>=<value> from the gRPC
# metadata "triton-grpc-protocol-<key>"; gRPC metadata keys are lower case.
HEADER_RULE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
MAX_API_KEY = 256
MAX_ADDRESS = 255  # the columns' lengths (models.TritonServer)
MAX_PATH = 1024
_PRINTABLE = re.compile(r"[\x21-\x7e]*")  # what a gRPC metadata value may hold, no spaces


class InvalidServer(ValueError):
    """Refused; ``errors`` maps each field at fault to why (messages fit to show)."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {message}" for field, message in errors.items()))


def check_name(value: object) -> str:
    if not isinstance(value, str) or not NAME_RULE.fullmatch(value):
        raise ValueError(
            "a server name is 1 to 40 lower-case letters, digits and '-', starting with a "
            f"letter or digit, got {_shown(value)}"
        )
    if value == DEFAULT:
        raise ValueError(
            "'default' is reserved for the server the TRITON_* environment variables define"
        )
    return value


def check_hostport(value: object) -> str:
    """host:port (an http:// prefix is dropped, as for TRITON_URL)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("give host:port, e.g. triton-a:8001")
    value = value.strip()
    if any(c.isspace() for c in value):
        raise ValueError(f"must be host:port without spaces, got {_shown(value)}")
    if len(value) > MAX_ADDRESS:
        raise ValueError(f"must be at most {MAX_ADDRESS} characters")
    return parse_hostport(value)


def grpc_key(value: str) -> str:
    """The gRPC address as compared for uniqueness: case and surrounding space ignored
    (localhost and 127.0.0.1 are not equated)."""
    return parse_hostport(value.strip()).lower()


def check_metrics_url(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("give the metrics page's URL, e.g. http://triton-a:8002/metrics")
    value = value.strip()
    if len(value) > MAX_PATH:
        raise ValueError(f"must be at most {MAX_PATH} characters")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    if any(c.isspace() for c in value):
        raise ValueError(f"must be a URL without spaces, got {value!r}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"has a bad port: {value!r}") from None
    return value


def check_labels(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError('labels are a JSON object of names to values, e.g. {"gpu": "H200"}')
    if len(value) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels, got {len(value)}")
    labels: dict[str, str] = {}
    for key, item in value.items():
        for part, what in ((key, "name"), (item, "value")):
            if not isinstance(part, str) or not LABEL_RULE.fullmatch(part):
                raise ValueError(
                    f"label {what} {_shown(part)}: 1 to 63 ASCII letters, digits, '_', '.' and '-'"
                )
        labels[key] = item
    # Sorted by name: a label set has no order, and PostgreSQL's jsonb would impose its own.
    return dict(sorted(labels.items()))


def label_pair(text: object) -> tuple[str, str]:
    """One NAME=VALUE (``manage.py servers add --label``, the Servers form's labels, the
    fleet's ``?label=`` filter), checked like any label."""
    if not isinstance(text, str) or "=" not in text:
        raise ValueError(f"label {_shown(text)}: write NAME=VALUE, e.g. gpu=H200")
    name, _, value = text.strip().partition("=")
    ((name, value),) = check_labels({name.strip(): value.strip()}).items()
    return name, value


def labels_from_pairs(items: Iterable[object]) -> dict[str, str]:
    """NAME=VALUE items as labels; a name given twice with two values is refused."""
    labels: dict[str, str] = {}
    for item in items:
        name, value = label_pair(item)
        if labels.get(name, value) != value:
            raise ValueError(f"label {name!r} is given twice ({labels[name]!r} and {value!r})")
        labels[name] = value
    return check_labels(labels)


def labels_from_text(text: str) -> dict[str, str]:
    """The Servers form's labels box: NAME=VALUE items separated by commas, spaces or lines
    (a label holds none of them)."""
    return labels_from_pairs(item for item in re.split(r"[\s,]+", text) if item)


def labels_text(labels: Mapping[str, str]) -> str:
    """NAME=VALUE items by name, so a label set reads the same on every database."""
    return ", ".join(f"{name}={value}" for name, value in sorted(labels.items()))


def check_repository(value: object) -> Path:
    """An absolute path to an existing folder, as the dashboard host sees it."""
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise ValueError("give the model repository's absolute path on the dashboard host")
    text = str(value).strip()
    if len(text) > MAX_PATH:
        raise ValueError(f"must be at most {MAX_PATH} characters")
    if "\x00" in text:
        raise ValueError("the path contains a NUL byte")
    path = Path(text)
    if not path.is_absolute():
        raise ValueError(f"must be an absolute path, got {text!r}")
    if not path.is_dir():
        raise ValueError(f"{text} is not an existing folder on the dashboard host")
    return Path(os.path.normpath(path))


def check_api_key_header(value: object) -> str:
    if not isinstance(value, str) or not HEADER_RULE.fullmatch(value):
        raise ValueError(
            "the key's name (the KEY of Triton's --grpc-restricted-protocol=...:KEY=VALUE) is "
            f"1 to 64 lower-case letters, digits, '_', '.' and '-', got {_shown(value)}"
        )
    return value


def check_api_key(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_API_KEY or not _PRINTABLE.fullmatch(value):
        # Never echo the value: it is a secret.
        raise ValueError(
            f"the key is at most {MAX_API_KEY} printable ASCII characters without spaces"
        )
    return value


def check_require_local_worker(value: object) -> bool:
    """Whether the server's jobs must run on a worker consuming its own queue: a boolean
    (or the words a form or a command line sends)."""
    if isinstance(value, bool):
        return value
    if value is None or value == "":
        return False
    if isinstance(value, str) and value.strip().lower() in _WORDS:
        return _WORDS[value.strip().lower()]
    raise ValueError(f"give true or false, got {_shown(value)}")


_WORDS = {"true": True, "on": True, "yes": True, "1": True,
          "false": False, "off": False, "no": False, "0": False}  # fmt: skip


CHECKS = {
    "name": check_name,
    "grpc_url": check_hostport,
    "http_url": check_hostport,
    "metrics_url": check_metrics_url,
    "api_key": check_api_key,
    "api_key_header": check_api_key_header,
    "labels": check_labels,
    "repository": check_repository,
    "require_local_worker": check_require_local_worker,
}


def check(fields: Mapping[str, Any], *, exclude_pk: int | None = None) -> dict[str, Any]:
    """The fields, cleaned; InvalidServer naming every field at fault. The gRPC address
    must differ from every other server's, the environment's ``default`` included."""
    cleaned: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field, rule in CHECKS.items():
        if field not in fields:
            continue
        try:
            cleaned[field] = rule(fields[field])
        except ValueError as exc:
            errors[field] = str(exc)
    if "name" in cleaned and name_taken(cleaned["name"], exclude_pk=exclude_pk):
        errors["name"] = f"a server named '{cleaned['name']}' already exists"
    if "grpc_url" in cleaned:
        taken = grpc_taken_by(cleaned["grpc_url"], exclude_pk=exclude_pk)
        if taken:
            errors["grpc_url"] = (
                f"{cleaned['grpc_url']} is already the gRPC address of the server '{taken}'"
            )
    if "http_url" in cleaned:
        taken = http_taken_by(cleaned["http_url"], exclude_pk=exclude_pk)
        if taken:
            errors["http_url"] = (
                f"{cleaned['http_url']} is already the HTTP address of the server '{taken}'"
            )
    if errors:
        raise InvalidServer(errors)
    return cleaned


def grpc_taken_by(grpc_url: str, *, exclude_pk: int | None = None) -> str:
    """The name of the server that already has this gRPC address; "" when none."""
    from django.apps import apps
    from django.conf import settings

    key = grpc_key(grpc_url)
    if key == grpc_key(str(settings.TRITON_URL)):
        return DEFAULT
    # Through the app registry: models.TritonServer.clean calls this module.
    rows = apps.get_model("repository_app", "TritonServer").objects.filter(grpc_key=key)
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    return str(rows.values_list("name", flat=True).first() or "")


def name_taken(name: str, *, exclude_pk: int | None = None) -> bool:
    from django.apps import apps

    rows = apps.get_model("repository_app", "TritonServer").objects.filter(name=name)
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    return bool(rows.exists())


def http_taken_by(http_url: str, *, exclude_pk: int | None = None) -> str:
    """The name of the server that already has this HTTP address (compared as gRPC
    addresses are); "" when none. One port is one server: two rows on it are one server
    registered twice."""
    from django.apps import apps
    from django.conf import settings

    key = grpc_key(http_url)
    if key == grpc_key(str(settings.TRITON_HTTP_URL)):
        return DEFAULT
    rows = apps.get_model("repository_app", "TritonServer").objects.all()
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    for name, url in rows.values_list("name", "http_url"):
        try:
            if grpc_key(url) == key:
                return str(name)
        except ValueError:  # a row saved around the checks (the shell): not this address
            continue
    return ""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
