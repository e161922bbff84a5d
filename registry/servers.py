"""The Triton servers the dashboard manages: the registry every page, job and poller asks.

``default`` is the server the TRITON_* settings (and MODEL_REPOSITORY) define: built from
settings at call time, never stored, not editable; a dashboard without TritonServer rows
has it alone, exactly as before servers became a parameter. Every other server is a
``TritonServer`` row (its checks: ``server_rules``). A ``Server`` is a frozen snapshot of
one, with its own client (``client()``); its API key never leaves it (not in ``repr``,
not in ``as_json``).

A model repository may be shared by several servers (a shared volume or NFS):
``repository_key`` names it ("" for MODEL_REPOSITORY, else its resolved path), and config
history, the per-model lock and the staging folder are keyed by it, so every server on
that repository sees the same history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from common.json_rows import JSONRows, decode
from common.request_memo import recall, remember, remembered
from jobs import queues
from jobs.queues import Route

from .server_rules import DEFAULT, NAME_RULE

if TYPE_CHECKING:
    from triton_api.client import TritonClient

    from .models import TritonServer

ALL_MEMO = "servers.all"  # the registry's list, as a request remembers it

__all__ = ["DEFAULT", "Server", "UnknownServer", "all", "default", "get", "repository_key"]


class UnknownServer(LookupError):
    """No server by that name; ``message`` is fit to show a user."""

    def __init__(self, name: object) -> None:
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "…"
        self.name = name
        self.message = f"no Triton server named {shown}"
        super().__init__(self.message)


@dataclass(frozen=True)
class Server:
    name: str
    grpc_url: str
    http_url: str
    metrics_url: str
    repository: Path
    api_key: str = field(default="", repr=False)
    api_key_header: str = "dashboard-key"
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    # Its jobs run only on a worker consuming its own queue (jobs.queues).
    require_local_worker: bool = False
    # True for `default`: defined by the TRITON_* environment variables, not editable here.
    from_env: bool = False

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT

    def client(self) -> TritonClient:
        from .triton_clients import get_client

        return get_client(self)

    def as_json(self) -> dict[str, Any]:
        """What pages and the API may show: never the API key, only whether there is one."""
        return {
            "name": self.name,
            "grpc_url": self.grpc_url,
            "http_url": self.http_url,
            "metrics_url": self.metrics_url,
            "repository": str(self.repository),
            "labels": dict(self.labels),
            "api_key_set": bool(self.api_key),
            "require_local_worker": self.require_local_worker,
            "from_env": self.from_env,
        }

    @classmethod
    def from_row(cls, row: TritonServer) -> Server:
        return cls(
            name=row.name,
            grpc_url=row.grpc_url,
            http_url=row.http_url,
            metrics_url=row.metrics_url,
            repository=Path(row.repository),
            api_key=row.api_key,
            api_key_header=row.api_key_header,
            labels=dict(sorted((row.labels or {}).items())),
            require_local_worker=bool(row.require_local_worker),
        )


def default() -> Server:
    """The server of the TRITON_* settings, read now (tests change settings)."""
    return Server(
        name=DEFAULT,
        grpc_url=str(settings.TRITON_URL),
        http_url=str(settings.TRITON_HTTP_URL),
        metrics_url=str(settings.TRITON_METRICS_URL),
        repository=Path(settings.MODEL_REPOSITORY),
        api_key=str(settings.TRITON_API_KEY),
        api_key_header=str(settings.TRITON_API_KEY_HEADER),
        require_local_worker=bool(getattr(settings, "TRITON_REQUIRE_LOCAL_WORKER", False)),
        from_env=True,
    )


def get(name: object) -> Server:
    """The server called ``name``; UnknownServer when there is none."""
    if name == DEFAULT:
        return default()
    if not isinstance(name, str) or not NAME_RULE.fullmatch(name):
        raise UnknownServer(name)
    from .models import TritonServer

    listed = recall(ALL_MEMO)  # a step that read the whole registry already
    if listed is not None:
        for server in listed:
            if server.name == name:
                return server  # type: ignore[no-any-return]
        raise UnknownServer(name)
    row = TritonServer.objects.filter(name=name).first()
    if row is None:
        raise UnknownServer(name)
    return Server.from_row(row)


def job_route(name: str) -> Route:
    """Where a job on the server ``name`` goes now (`jobs.queues.queue_for`). A server
    removed since the job was queued sends it to the default queue: any worker fails it
    ("removed since it was queued")."""
    try:
        return queues.queue_for(get(name))
    except UnknownServer as exc:
        fallback = queues.default_queue()
        return Route(name, fallback, f"{exc.message}: sent to {fallback} to be failed")


def labels_of(name: str) -> dict[str, str]:
    """The labels of the server called ``name`` ({} for one that is not registered)."""
    try:
        return dict(get(name).labels)
    except UnknownServer:
        return {}


def all() -> list[Server]:  # noqa: A001 - servers.all(), as the registry reads
    """Every server: ``default`` first, then the stored ones by name."""
    from .models import TritonServer

    def read() -> list[Server]:
        return [default(), *(Server.from_row(r) for r in TritonServer.objects.order_by("name"))]

    return list(remembered(ALL_MEMO, read))


def all_column() -> JSONRows:
    """The whole registry as a column of another query's row (``common.json_rows``): a
    chunk reads it with its upload; ``remember_all`` then answers ``all`` and ``get``."""
    from .models import TritonServer

    fields = [f.attname for f in TritonServer._meta.concrete_fields]
    return JSONRows(TritonServer.objects.order_by(), fields)


def remember_all(text: str) -> None:
    """Remember the registry that ``all_column`` read, for the current memo."""
    from .models import TritonServer

    rows = sorted(decode(TritonServer, text), key=lambda row: row.name)
    remember(ALL_MEMO, [default(), *(Server.from_row(row) for row in rows)])


def names() -> list[str]:
    from .models import TritonServer

    return [DEFAULT, *TritonServer.objects.order_by("name").values_list("name", flat=True)]


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: compare as written
        return path


def repository_key(server: Server) -> str:
    """Which repository ``server`` serves from, as config history is keyed: "" for
    MODEL_REPOSITORY (whichever server uses it), else the resolved path."""
    mine = _resolved(server.repository)
    if mine == _resolved(Path(settings.MODEL_REPOSITORY)):
        return ""
    return str(mine)


def sharing(server: Server) -> list[Server]:
    """The servers that serve from ``server``'s repository (itself included)."""
    key = repository_key(server)
    found = [s for s in all() if repository_key(s) == key]
    return found if any(s.name == server.name for s in found) else [server, *found]


def with_server(url: str, server: Server | str) -> str:
    """``url`` for ``server``: ``?server=NAME`` added unless it is the default server (whose
    URLs stay as they were before servers became a parameter)."""
    name = server if isinstance(server, str) else server.name
    if name == DEFAULT:
        return url
    path, _, fragment = url.partition("#")
    joined = f"{path}{'&' if '?' in path else '?'}server={name}"
    return f"{joined}#{fragment}" if fragment else joined
