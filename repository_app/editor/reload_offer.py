"""After a config save on a repository that several servers share: "reload where it is
loaded". Never automatic: the save's result lists the servers of that repository where the
model is READY now, and offers one rollout that reloads it on them (hand-picked, so it acts
on exactly the servers listed); the others are listed with why they are not offered.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from registry import servers
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError

from ..control import CONTROL_PERMISSION, NOT_PERMITTED


@dataclass
class ReloadOffer:
    model: str
    repository: str  # the repository's path, as the saving server sees it
    loaded: list[str] = field(default_factory=list)  # READY now: offered
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (server, why not offered)

    def as_json(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "servers": list(self.loaded),
            "not_offered": [{"server": s, "why": why} for s, why in self.skipped],
            # The body of POST /api/v1/rollouts/ that reloads it where it is loaded.
            "rollout": {
                "action": "reload",
                "model": self.model,
                "servers": list(self.loaded),
                "note": "config_saved",
            }
            if self.loaded
            else None,
        }


def _ready(server: Server, name: str) -> tuple[bool, str]:
    try:
        states = get_client(server).model_states(name)
    except TritonError as exc:
        return False, exc.message
    if any(s.state == "READY" for s in states):
        return True, ""
    return False, "not loaded there"


def reload_offer(
    server: Server, name: str, user: Any, *, done: tuple[str, ...] = ()
) -> ReloadOffer | None:
    """The offer after ``name``'s config was saved through ``server``; None when no other
    server shares its repository. ``done``: servers the save itself reloaded."""
    sharing = servers.sharing(server)
    if len(sharing) < 2:
        return None
    offer = ReloadOffer(name, str(server.repository))
    asked = [s for s in sharing if s.name not in done]
    # Every server at once: one that does not answer costs its timeout, not the sum.
    with ThreadPoolExecutor(max_workers=min(8, len(asked) or 1)) as pool:
        answers = dict(
            zip([s.name for s in asked], pool.map(lambda s: _ready(s, name), asked), strict=True)
        )
    for target in sharing:
        if target.name in done:
            offer.skipped.append((target.name, "reloaded by this save"))
            continue
        ready, why = answers[target.name]
        if not ready:
            offer.skipped.append((target.name, why))
        elif not user.has_perm(CONTROL_PERMISSION, target):
            offer.skipped.append((target.name, NOT_PERMITTED.format(server=target.name)))
        else:
            offer.loaded.append(target.name)
    return offer
