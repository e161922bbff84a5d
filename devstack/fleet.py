"""`make run TRITONS=N`: the default Triton and N - 1 more local tritonservers, `local-2` ...
`local-N`, to try the fleet (the Fleet page, rollouts, a sweep per server) on one machine.

Each serves its own copy of examples/model_repository, VAR_DIR/tritons/<name> (made once and
kept across runs, edits included), and is a registered server (a TritonServer row, label
``env=demo``), added or changed through ``server_admin`` as `manage.py servers add|change`
does it: the same checks (its repository must lie in MODEL_REPOSITORY_ROOTS), the admin's
permission, an audit row per change. A restart keeps the ports a server was registered with
while they are free, so its row stays as it is; otherwise the row's addresses follow the new
ports. A server of one of these names on another repository is not make run's: make run
stops rather than change it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from triton_api.address import split_host_port

from . import services as svc

ENV = "DEMO_TRITONS"  # what `make run TRITONS=N` sets (the Makefile passes it on)
MAX_TRITONS = 8  # each is a tritonserver with the demo models: memory, not ports, is the limit
FOLDER = "tritons"  # under VAR_DIR
LABELS = {"env": "demo"}
LOOPBACK = "127.0.0.1"


def count_from(text: str | None) -> int:
    """How many local Tritons, the default one included (1 when not given)."""
    if text is None or not text.strip():
        return 1
    try:
        count = int(text.strip())
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_TRITONS:
        raise ValueError(
            f"TRITONS must be a whole number from 1 to {MAX_TRITONS} (local Tritons, the "
            f"default one included), got {text!r}"
        )
    return count


def names(count: int) -> list[str]:
    return [f"local-{n}" for n in range(2, count + 1)]


@dataclass(frozen=True)
class LocalTriton:
    name: str
    repository: Path
    ports: svc.TritonPorts
    log: Path
    seeded: bool = False  # its repository was copied just now

    def addresses(self) -> dict[str, str]:
        """Its addresses as the registry stores them."""
        return {
            "grpc_url": f"{LOOPBACK}:{self.ports.grpc}",
            "http_url": f"{LOOPBACK}:{self.ports.http}",
            "metrics_url": f"http://{LOOPBACK}:{self.ports.metrics}/metrics",
        }


def prepare(count: int, var_dir: Path, source: Path) -> list[LocalTriton]:
    """local-2 ... local-`count`: each one's repository (copied from ``source`` when
    missing), ports and log. ServiceError, before anything starts, when a repository would
    lie outside MODEL_REPOSITORY_ROOTS or a server of that name is not make run's."""
    from registry.models import TritonServer
    from registry.server_rules import outside_roots, repository_roots

    planned: list[LocalTriton] = []
    for name in names(count):
        repository = var_dir / FOLDER / name
        if outside_roots(repository):
            roots = ", ".join(str(root) for root in repository_roots())
            raise svc.ServiceError(
                f"TRITONS: the copies of the demo repository go under {var_dir / FOLDER}, "
                f"which MODEL_REPOSITORY_ROOTS ({roots}) does not allow: add "
                f"{var_dir / FOLDER} to MODEL_REPOSITORY_ROOTS (in .env, so every process "
                "reads it)"
            )
        row = TritonServer.objects.filter(name=name).first()
        if row is not None and not _same_folder(row.repository, repository):
            raise svc.ServiceError(
                f"TRITONS: a server named {name} is registered with the repository "
                f"{row.repository}, not make run's {repository}; remove it "
                f"(`manage.py servers remove {name}`) or ask for fewer TRITONS"
            )
        avoid = _registered_ports(besides=name) | {
            p for t in planned for p in (t.ports.http, t.ports.grpc, t.ports.metrics)
        }
        ports = _ports_of(row, avoid) or _fresh_ports(avoid)
        seeded = seed(repository, source)
        log = var_dir / "log" / f"tritonserver-{name}.log"
        planned.append(LocalTriton(name, repository, ports, log, seeded))
    return planned


def seed(repository: Path, source: Path) -> bool:
    """Copy ``source`` to ``repository`` unless it exists (kept across runs); whether it
    copied. Laid out aside and renamed: an interrupted copy is not taken for a repository."""
    if repository.exists():
        return False
    repository.parent.mkdir(parents=True, exist_ok=True)
    staging = repository.with_name(f".{repository.name}.copying")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    staging.rename(repository)
    return True


def register(user: Any, triton: LocalTriton) -> str:
    """Add ``triton`` to the registry as `manage.py servers add` does, or bring its row's
    addresses up to date as `servers change` does (labels and the rest are left as an admin
    may have changed them). A line for make run's output; ServiceError naming the refusal."""
    from fleet import server_admin
    from fleet.server_admin import NotAllowed, Refused
    from registry.models import TritonServer
    from registry.server_rules import InvalidServer, labels_text
    from registry.servers import UnknownServer

    try:
        if not TritonServer.objects.filter(name=triton.name).exists():
            server_admin.create(
                user,
                {
                    "name": triton.name,
                    **triton.addresses(),
                    "repository": str(triton.repository),
                    "labels": dict(LABELS),
                },
            )
            return f"registered as the server {triton.name} ({labels_text(LABELS)})"
        _, changed = server_admin.update(user, triton.name, triton.addresses())
    except InvalidServer as exc:
        refused = "; ".join(f"{field}: {message}" for field, message in exc.errors.items())
        raise svc.ServiceError(f"the server {triton.name} was not registered: {refused}") from None
    except (NotAllowed, Refused, UnknownServer) as exc:
        raise svc.ServiceError(
            f"the server {triton.name} was not registered: {exc.message}"
        ) from None
    if changed:
        return f"the server {triton.name}'s {', '.join(changed)} changed to the new ports"
    return f"the server {triton.name} is registered already"


def leftovers(count: int, var_dir: Path) -> list[str]:
    """Servers an earlier `make run TRITONS=M` (M > count) registered and this run does not
    start: they are shown down until removed."""
    from registry.models import TritonServer

    folder = var_dir / FOLDER
    return [
        name
        for name, repository in TritonServer.objects.filter(name__startswith="local-")
        .order_by("name")
        .values_list("name", "repository")
        if name not in names(count) and _same_folder(repository, folder / name)
    ]


def _same_folder(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _port(address: str) -> int | None:
    """The port of host:port or of a URL; None when there is none."""
    try:
        return urlsplit(address).port if "://" in address else split_host_port(address)[1]
    except ValueError:
        return None


def _registered_ports(*, besides: str) -> set[int]:
    """Every port a registered server (``default`` too) names, but ``besides``'s: a new
    port must not be a down server's address, which the registry would refuse."""
    from django.conf import settings

    from registry.models import TritonServer

    addresses = [settings.TRITON_URL, settings.TRITON_HTTP_URL, settings.TRITON_METRICS_URL]
    for row in TritonServer.objects.exclude(name=besides).values_list(
        "grpc_url", "http_url", "metrics_url"
    ):
        addresses += list(row)
    return {port for a in addresses if (port := _port(str(a))) is not None}


def _ports_of(row: Any, avoid: set[int]) -> svc.TritonPorts | None:
    """The ports ``row`` is registered with, when they are on this host and free now."""
    if row is None:
        return None
    ports = [_port(row.http_url), _port(row.grpc_url), _port(row.metrics_url)]
    if any(p is None or p in avoid for p in ports):
        return None
    if any(split_host_port(a)[0] != LOOPBACK for a in (row.http_url, row.grpc_url)):
        return None
    if len(set(ports)) != 3 or any(svc.port_is_open(LOOPBACK, p) for p in ports if p):
        return None
    http, grpc, metrics = (int(p) for p in ports if p is not None)
    return svc.TritonPorts(http=http, grpc=grpc, metrics=metrics)


def _fresh_ports(avoid: set[int]) -> svc.TritonPorts:
    picked: list[int] = []
    while len(picked) < 3:
        port = svc.free_port()
        if port not in avoid and port not in picked:
            picked.append(port)
    return svc.TritonPorts(http=picked[0], grpc=picked[1], metrics=picked[2])
