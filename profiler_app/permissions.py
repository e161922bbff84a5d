"""Who may act on a sweep or a config search: one rule for the pages and the API.

Starting a sweep (or re-running one, which makes a new sweep owned by the re-runner)
needs the `run_sweeps` permission (Operators and Admins) on the sweep's Triton server (a
role narrowed there to Viewer cannot). Cancelling or resuming an existing one changes
someone else's work, so it is left to the user who started it and to Admins
(`team.manage_users`); a sweep started from the command line without a user has no owner,
so only Admins may. A search is judged by its carrier sweep. A sweep on a server hidden
from the user (narrowed to none) does not exist for them (`visible_or_404`).
"""

from __future__ import annotations

from typing import Any

from django.http import Http404

from registry import server_access
from registry.servers import Server
from team import audit

from .models import Sweep

RUN_PERMISSION = "profiler_app.run_sweeps"
ADMIN_PERMISSION = "team.manage_users"
CANNOT_RUN = "your role cannot run or cancel sweeps"


def can_run(user: Any, server: Server) -> bool:
    return bool(user.has_perm(RUN_PERMISSION, server))


def sweep_server(sweep: Sweep) -> Server:
    """The server the sweep ran on (a bare entry of its name when it was removed since)."""
    return server_access.server_named(sweep.server)


def run_refusal(user: Any, server: Server, message: str = CANNOT_RUN) -> str:
    """Empty when `user` may run sweeps on `server`; else why not (the narrowing, if any)."""
    return server_access.refusal(user, RUN_PERMISSION, server, message)


def visible_or_404(user: Any, sweep: Sweep, noun: str = "sweep") -> Sweep:
    """`sweep`, unless its server is hidden from `user`: then a 404 as for no such sweep."""
    if not server_access.visible(user, sweep_server(sweep)):
        raise Http404(f"no such {noun}")
    return sweep


def hidden_servers(user: Any) -> set[str]:
    """The server names whose sweeps and searches lists leave out for `user`."""
    return server_access.hidden_names(user)


def can_manage_sweep(user: Any, sweep: Sweep) -> bool:
    """May `user` cancel or resume `sweep` (a search's carrier included)?"""
    if not can_run(user, sweep_server(sweep)):
        return False
    if user.has_perm(ADMIN_PERMISSION):
        return True
    return sweep.created_by_id is not None and sweep.created_by_id == user.pk


def owner_note(sweep: Sweep, noun: str = "sweep") -> str:
    """Who may cancel or resume it, in one sentence: shown by the buttons, and the
    message of a refusal."""
    owner = sweep.created_by.get_username() if sweep.created_by_id else ""
    if not owner:
        return (
            "Started without a user (from the command line): only an Admin can cancel or "
            f"resume this {noun}."
        )
    # Not "only alice or an admin": the owner's name may itself read like a role ("admin").
    return (
        f"Started by {owner}: only the user who started it, or an Admin, can cancel or "
        f"resume this {noun}."
    )


def management_refusal(
    user: Any, job: Sweep, action: str, *, target: str, noun: str = "sweep"
) -> str:
    """'' when `user` may cancel or resume `job`; else why not, with the refusal audited
    (the pages and the API ask this one question)."""
    if can_manage_sweep(user, job):
        return ""
    message = run_refusal(user, sweep_server(job), f"your role cannot cancel or resume {noun}s")
    return deny(
        user,
        action,
        model=job.model,
        server=job.server,
        target=target,
        message=message or owner_note(job, noun),
    )


def deny(user: Any, action: str, *, model: str, server: str = "", target: str, message: str) -> str:
    """Audit a refused action (outcome "denied"); returns the message for the 403."""
    audit.record(
        user,
        action,
        model_name=model,
        server=server,
        target=target,
        outcome="denied",
        detail=message,
    )
    return message
