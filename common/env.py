"""Read settings from the environment and fail with one clear line.

Every variable is listed in `.env.example`. A wrong value stops the process with
"Configuration error: NAME ..." on stderr instead of a traceback (healthchecks'
`envbool`/`envint` spirit, with django-environ parsing URLs).
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn

import environ

from triton_api.address import split_host_port

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def config_error(name: str, problem: str) -> NoReturn:
    sys.stderr.write(f"Configuration error: {name} {problem}\n")
    raise SystemExit(2)


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    config_error(name, f"must be true or false, got {raw!r}")


def env_number(name: str, default: float, *, minimum: float = 0) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        config_error(name, f"must be a number, got {raw!r}")
    if value < minimum:
        config_error(name, f"must be at least {minimum}, got {raw!r}")
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = env_number(name, default, minimum=minimum)
    if value != int(value):
        config_error(name, f"must be a whole number, got {os.environ[name]!r}")
    return int(value)


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_database(name: str, default: str) -> dict[str, Any]:
    raw = env_str(name, default)
    try:
        with warnings.catch_warnings():
            # It warns (and returns no engine) for unknown schemes; we say it ourselves.
            warnings.simplefilter("ignore")
            config = environ.Env.db_url_config(raw)
    except Exception as exc:  # django-environ raises several types for bad URLs
        config_error(name, f"is not a database URL ({exc}); use sqlite:///PATH or postgres://...")
    if not config.get("ENGINE") or not config.get("NAME"):
        config_error(
            name, f"is not a usable database URL: {raw!r}; use sqlite:///PATH or postgres://..."
        )
    return config


def env_url(name: str, default: str, schemes: tuple[str, ...]) -> str:
    raw = env_str(name, default)
    if not raw.startswith(tuple(f"{s}://" for s in schemes)):
        config_error(
            name, f"must start with {' or '.join(s + '://' for s in schemes)}, got {raw!r}"
        )
    return raw


HOST_RULE = re.compile(
    r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def parse_hostport(raw: str) -> str:
    """A Triton address: host:port, with an optional http:// prefix (dropped); ValueError
    when it is not one. The one rule for TRITON_URL / TRITON_HTTP_URL and for the servers
    the dashboard manages (registry.server_rules)."""
    scheme, found, rest = raw.partition("://")
    if found and scheme.lower() not in ("http", "https"):
        raise ValueError(f"must be host:port, got {raw!r}")
    value = (rest if found else raw).rstrip("/")
    try:
        host, _ = split_host_port(value)
    except ValueError:
        raise ValueError(f"must be host:port, got {raw!r}") from None
    # A host name, IPv4 or [IPv6] address only: gRPC would also take 'unix:/path' and
    # other resolvers' targets, which a server's address must never name.
    if not HOST_RULE.fullmatch(f"[{host}]" if value.startswith("[") else host):
        raise ValueError(f"must be host:port, got {raw!r}")
    return value


def env_hostport(name: str, default: str) -> str:
    raw = env_str(name, default)
    try:
        return parse_hostport(raw)
    except ValueError as exc:
        config_error(name, str(exc))


def env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).expanduser().resolve() if raw else default
