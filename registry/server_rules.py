"""What a Triton server the dashboard manages may look like: the one set of checks.

Every way a server enters (the model's ``clean``; the Servers pages, ``manage.py servers``
and the API through ``server_admin``) goes through ``check``; each refusal names its field.
The addresses follow the rule of TRITON_URL / TRITON_HTTP_URL
(``common.env.parse_hostport``), and one address is one server, under whatever name: host
names are resolved (``same_address``), so ``localhost:8001`` is ``127.0.0.1:8001``. A
taken address names its server only to a caller who may see it. The name is what URLs,
Redis keys and Channels group names carry, so it is kept to a small safe set. A model
repository lies in MODEL_REPOSITORY_ROOTS (``outside_roots``), which ``repository`` checks
again whenever it reads one.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from common.env import parse_hostport
from common.server_names import DEFAULT, LABEL_RULE, NAME_RULE
from triton_api.address import split_host_port

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


@dataclass(frozen=True)
class Refusal:
    """A field's value its form already refused (the Servers form's labels box): ``check``
    reports ``message`` on that field with every other refusal, so they come at once."""

    message: str


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
    """The gRPC address as stored for uniqueness (the column's unique key): case and
    surrounding space ignored. ``same_address`` also equates names of one host."""
    return parse_hostport(value.strip()).lower()


# --- one address under several names ---------------------------------------------------------

# Every look-up of one check together: a dead resolver slows a form by this much, no more.
RESOLVE_TIMEOUT_S = 1.0
# Triton listens on 0.0.0.0 by default, so every loopback address reaches it: one key.
LOOPBACK = "loopback"
# getaddrinfo has no timeout of its own: it runs here, and a late answer is not waited for.
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="server-address")


def _ip_key(text: str) -> str | None:
    """An IP address as compared (IPv4-mapped IPv6 as IPv4, any loopback or unspecified
    address as LOOPBACK); None for a host name."""
    try:
        ip = ipaddress.ip_address(text.partition("%")[0])  # a link-local scope aside
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return LOOPBACK if ip.is_loopback or ip.is_unspecified else ip.compressed


def _lookup(host: str) -> frozenset[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, ValueError):  # not resolvable: compared by its text
        return frozenset()
    return frozenset(key for info in infos if (key := _ip_key(str(info[4][0]))) is not None)


def resolve_hosts(hosts: Iterable[str]) -> dict[str, frozenset[str]]:
    """Each host's addresses, IPv4 and IPv6 (IP literals as themselves, ``localhost`` as
    loopback), looked up in parallel; a host that does not resolve, or not within
    RESOLVE_TIMEOUT_S for all together, has none."""
    found: dict[str, frozenset[str]] = {}
    asked = {}
    for host in set(hosts):
        literal = _ip_key(host)
        if literal is not None:
            found[host] = frozenset({literal})
        elif host == "localhost" or host.endswith(".localhost"):  # RFC 6761
            found[host] = frozenset({LOOPBACK})
        else:
            asked[host] = _resolver.submit(_lookup, host)
    done, _ = wait(asked.values(), timeout=RESOLVE_TIMEOUT_S)
    for host, future in asked.items():
        found[host] = future.result() if future in done else frozenset()
    return found


def _address_keys(key: str, resolved: Mapping[str, frozenset[str]]) -> set[str]:
    host, port = split_host_port(key)
    return {key, *(f"{ip} port {port}" for ip in resolved.get(host, ()))}


def same_address(a: str, b: str, resolved: Mapping[str, frozenset[str]] | None = None) -> bool:
    """Whether two host:port addresses reach one server: the same text (case aside), or one
    port on hosts that share an IP address (a name that does not resolve compares by its
    text). ``resolved``: hosts already looked up (``resolve_hosts``)."""
    a, b = grpc_key(a), grpc_key(b)
    if a == b:
        return True
    if split_host_port(a)[1] != split_host_port(b)[1]:
        return False
    if resolved is None:
        resolved = resolve_hosts([split_host_port(a)[0], split_host_port(b)[0]])
    return bool(_address_keys(a, resolved) & _address_keys(b, resolved))


def taken_by(address: str, registered: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """(name, address) of the first of ``registered`` that is ``address``'s server (as
    ``same_address`` says); None when none is. Host names are looked up once, and only
    those on the same port."""
    key = grpc_key(address)
    same_port = []
    for name, other in registered:
        try:
            other_key = grpc_key(other)
        except ValueError:  # a row saved around the checks (the shell): not this address
            continue
        if other_key == key:
            return name, other
        if split_host_port(other_key)[1] == split_host_port(key)[1]:
            same_port.append((name, other, other_key))
    if not same_port:
        return None
    resolved = resolve_hosts(
        [split_host_port(key)[0], *(split_host_port(k)[0] for _, _, k in same_port)]
    )
    for name, other, other_key in same_port:
        if same_address(key, other_key, resolved):
            return name, other
    return None


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


def repository_roots() -> list[Path]:
    """The folders a server's model repository must lie in: MODEL_REPOSITORY_ROOTS, or,
    when it is empty, MODEL_REPOSITORY's parent folder (read now: tests set it)."""
    from django.conf import settings

    configured = getattr(settings, "MODEL_REPOSITORY_ROOTS", None) or []
    return [Path(root) for root in configured] or [Path(settings.MODEL_REPOSITORY).parent]


def _real(path: str | os.PathLike[str]) -> Path:
    # realpath: every link and ".." resolved, so neither leads out of a root unseen.
    return Path(os.path.realpath(path))


def _within(path: Path, *, resolve: bool = True) -> bool:
    """Whether ``path`` (resolved, or as written) is MODEL_REPOSITORY, a root or under one."""
    from django.conf import settings

    roots = repository_roots()
    allowed = [_real(root) for root in roots] + ([] if resolve else roots)
    home = _real(settings.MODEL_REPOSITORY)
    path = _real(path) if resolve else Path(os.path.normpath(path))
    return path == home or any(path == root or root in path.parents for root in allowed)


def outside_roots(path: str | os.PathLike[str]) -> bool:
    """Whether ``path``, every link and ".." resolved, is neither MODEL_REPOSITORY (the
    environment's own) nor one of ``repository_roots`` or a folder under one: no model
    repository the dashboard lists, reads or writes."""
    try:
        return not _within(Path(path))
    except (OSError, ValueError):  # a NUL byte, a path the system cannot resolve
        return True


def check_repository(value: object) -> Path:
    """An absolute path to an existing folder, as the dashboard host sees it, inside
    MODEL_REPOSITORY_ROOTS (``outside_roots``: links and ".." resolved)."""
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
    # Before the existence check: whether a folder exists outside the roots is not told.
    if outside_roots(path):
        roots = ", ".join(str(root) for root in repository_roots())
        how = "leads out of them through a symbolic link"
        raise ValueError(
            "the model repository must be MODEL_REPOSITORY or a folder in "
            f"MODEL_REPOSITORY_ROOTS ({roots}); {text} "
            + (how if _within(path, resolve=False) else "is outside them")
        )
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


# A taken address whose server the caller may not see: its name is not told.
ADDRESS_TAKEN = "this address is already registered"
ADDRESS_FIELDS = {"grpc_url": ("gRPC", "TRITON_URL"), "http_url": ("HTTP", "TRITON_HTTP_URL")}


def check(
    fields: Mapping[str, Any],
    *,
    exclude_pk: int | None = None,
    may_see: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """The fields, cleaned; InvalidServer naming every field at fault. The gRPC and the
    HTTP address must each differ from every other server's, the environment's ``default``
    included, under any name of the host (``taken_by``). ``may_see(name)``: whether the
    caller may see that server, so a refusal may name it (None: every server may be named,
    as for the shell)."""
    cleaned: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field, rule in CHECKS.items():
        if field not in fields:
            continue
        if isinstance(fields[field], Refusal):
            errors[field] = fields[field].message
            continue
        try:
            cleaned[field] = rule(fields[field])
        except ValueError as exc:
            errors[field] = str(exc)
    if "name" in cleaned and name_taken(cleaned["name"], exclude_pk=exclude_pk):
        errors["name"] = f"a server named '{cleaned['name']}' already exists"
    for field, (kind, _) in ADDRESS_FIELDS.items():
        if field not in cleaned:
            continue
        taken = address_taken_by(field, cleaned[field], exclude_pk=exclude_pk)
        if taken is None:
            continue
        name, theirs = taken
        if may_see is not None and not may_see(name):
            errors[field] = ADDRESS_TAKEN
            continue
        alias = (
            f" (as {theirs}, the same host)" if grpc_key(theirs) != grpc_key(cleaned[field]) else ""
        )
        errors[field] = (
            f"{cleaned[field]} is already the {kind} address of the server '{name}'{alias}"
        )
    if errors:
        raise InvalidServer(errors)
    return cleaned


def address_taken_by(
    field: str, address: str, *, exclude_pk: int | None = None
) -> tuple[str, str] | None:
    """(name, its address) of the server whose ``field`` (grpc_url or http_url) is already
    ``address``, ``default`` (the TRITON_* settings) first; None when none is. One port is
    one server: two rows on it are one server registered twice."""
    from django.apps import apps
    from django.conf import settings

    registered = [(DEFAULT, str(getattr(settings, ADDRESS_FIELDS[field][1])))]
    # Through the app registry: models.TritonServer.clean calls this module.
    rows = apps.get_model("registry", "TritonServer").objects.order_by("name")
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    registered += [(str(n), str(a)) for n, a in rows.values_list("name", field)]
    return taken_by(address, registered)


def name_taken(name: str, *, exclude_pk: int | None = None) -> bool:
    from django.apps import apps

    rows = apps.get_model("registry", "TritonServer").objects.filter(name=name)
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    return bool(rows.exists())


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
