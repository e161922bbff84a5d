"""A model as the servers sharing a repository see it, for publishing and deleting: a change
to a shared repository reaches every server that serves from it, so each is asked whether
the model is loading or unloading (busy) or has a version loaded, and each is told when the
model's versions change on disk.
"""

from __future__ import annotations

import contextlib
from typing import Any

from registry import servers
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError

from .staging import UploadError

BUSY_STATES = ("LOADING", "UNLOADING")


def _triton_states(server: Server, model: str) -> list[Any] | None:
    """The server's version states of the model, or None when it does not answer."""
    try:
        return get_client(server).model_states(model)
    except TritonError:
        return None


def sharing_states(server: Server, model: str) -> dict[str, list[Any]]:
    """The model's states on every server of ``server``'s repository that answers."""
    found = {}
    for other in servers.sharing(server):
        states = _triton_states(other, model)
        if states is not None:
            found[other.name] = states
    return found


def _on(name: str, server: Server) -> str:
    return "" if name == server.name else f" on the server '{name}'"


def check_not_busy(server: Server, model: str, outcome: str = "nothing was published") -> None:
    """Refused (409, to retry) while a server of the repository loads or unloads the model."""
    for name, states in sharing_states(server, model).items():
        busy = sorted({s.state for s in states if s.state in BUSY_STATES})
        if busy:
            raise UploadError(
                f"model '{model}' is {'/'.join(busy)} in Triton{_on(name, server)}: {outcome}; "
                "try again when it settled",
                409,
                retry=True,
            )


def announce(server: Server, model: str) -> None:
    """Every server on the repository has new versions of the model on disk."""
    from .. import events

    with contextlib.suppress(Exception):  # best effort: pages also reload
        for other in servers.sharing(server):
            events.publish(events.repository_group(other.name), "model.versions", {"model": model})
