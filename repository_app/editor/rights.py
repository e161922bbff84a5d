"""Who may change a model's config: the editor's save, its API and a version policy."""

from __future__ import annotations

from django.http import HttpRequest

from registry import server_access
from registry.servers import Server
from team.roles import who_can

from ..control import CONTROL_PERMISSION

CANNOT_EDIT = f"your role cannot change model configs ({who_can(CONTROL_PERMISSION)})"


def edit_refusal(request: HttpRequest, server: Server, action: str = "save") -> str:
    """Empty when the user may do ``action``; else why not. A save writes the repository, so
    it needs the permission on every server that shares it; a try loads on this one only."""
    check = server_access.refusal if action == "try" else server_access.repository_refusal
    return check(request.user, CONTROL_PERMISSION, server, CANNOT_EDIT)
