"""Deleting a version or a whole model from a server's repository: renamed out of it at
once under the per-model lock (Triton never sees half a model), then removed. Refused while
a server of the repository is loading or unloading the model, or has it loaded, unless that
server is this one and the user asked to unload it first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry import server_access, servers
from registry.servers import Server
from registry.triton_clients import get_client
from team.roles import who_can
from triton_api.client import TritonError

from .. import control
from ..disk import fsync_dir, model_lock
from . import names, staging
from .sharing import announce, check_not_busy, sharing_states
from .staging import UploadError

DELETE_PERMISSION = "team.delete_versions"


@dataclass
class Deleted:
    model: str
    version: int
    message: str
    unloaded: bool = False


def delete_version(
    server: Server, model: str, version: object, user: Any, *, unload: bool = False
) -> Deleted:
    """Remove ``model/version`` from the server's repository: renamed out of it at once,
    then removed.

    Refused while a server of the repository has that version loaded, unless ``unload``
    and that server is this one: then the model is unloaded first (Triton unloads whole
    models) and stays unloaded.
    """
    from team import audit

    where = {"model_name": model, "server": server.name}
    refused = server_access.repository_refusal(
        user, DELETE_PERMISSION, server,
        f"your role cannot delete versions ({who_can(DELETE_PERMISSION)})",
    )  # fmt: skip
    if refused:
        audit.record(user, "version.delete", **where, target=f"version {version}",
                     outcome="denied", detail=refused)  # fmt: skip
        raise UploadError(refused, 403)
    try:
        names.check_model_name(model)
        number = names.parse_version(version)
    except names.InvalidName as exc:
        raise UploadError(str(exc)) from exc
    try:
        target = staging.existing_folder(server, model) / str(number)
        with model_lock(server.repository, model):
            if not target.is_dir():
                raise UploadError(f"model '{model}' has no version {number}", 404)
            check_not_busy(server, model, "nothing was deleted")
            loaded_on = [
                name
                for name, states in sharing_states(server, model).items()
                if any(s.state == "READY" and s.version == str(number) for s in states)
            ]
            unloaded, trash = _unload_and_move_away(
                server,
                model,
                target,
                loaded_on,
                unload,
                f"version {number} of '{model}'",
                user.get_username(),
            )
    except UploadError as exc:
        audit.record(user, "version.delete", **where, target=f"version {version}",
                     outcome="failed", detail=exc.message)  # fmt: skip
        raise
    shutil.rmtree(trash, ignore_errors=True)
    message = f"version {number} of {model} deleted"
    if unloaded:
        message += f"; {model} was unloaded and stays unloaded until you load it again"
    audit.record(user, "version.delete", **where, target=f"version {number}",
                 outcome="ok", detail=message)  # fmt: skip
    announce(server, model)
    return Deleted(model, number, message, unloaded)


def _unload_and_move_away(
    server: Server,
    model: str,
    target: Path,
    loaded_on: list[str],
    unload: bool,
    what: str,
    username: str,
) -> tuple[bool, Path]:
    """Under the model lock: refuse a ``target`` that a server of the repository has
    loaded, unless it is this server and ``unload`` (then unload the model, as Triton
    unloads whole models), and rename it out of the repository at once; returns (unloaded,
    where it went) for the caller to remove."""
    others = [name for name in loaded_on if name != server.name]
    if others:
        shown = ", ".join(f"'{name}'" for name in others)
        raise UploadError(
            f"{what} is loaded on the server {shown}, which shares this repository: unload "
            "it there first",
            409,
            loaded=True,
        )
    unloaded = False
    if loaded_on:
        if not unload:
            raise UploadError(
                f'{what} is loaded in Triton: unload it first, or choose "unload and delete"',
                409,
                loaded=True,
            )
        try:
            # The model's claim, as every load and unload holds it (control.claimed).
            with control.claimed(server, model, "unload", username):
                get_client(server).unload(model)
        except control.ActionRefused as exc:
            raise UploadError(
                f"unloading '{model}' refused: {exc}; nothing was deleted", 409, retry=True
            ) from exc
        except TritonError as exc:
            raise UploadError(f"unloading '{model}' failed: {exc.message}", 409) from exc
        unloaded = True
    trash = staging.staging_root(server) / f".trash-{secrets.token_hex(8)}"
    os.rename(target, trash)
    with contextlib.suppress(OSError):
        fsync_dir(target.parent)
    return unloaded, trash


def model_contents(server: Server, model: str) -> tuple[list[str], int]:
    """(relative paths of every file in the model folder, their total bytes), for the
    confirmation that lists what a delete removes."""
    folder = staging.existing_folder(server, model)
    files, total = [], 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            files.append(str(path.relative_to(folder)))
            with contextlib.suppress(OSError):
                total += path.lstat().st_size
    return files, total


def delete_model(server: Server, model: str, user: Any, *, unload: bool = False) -> Deleted:
    """Remove the whole model folder from the server's repository: renamed out of it at once
    (Triton never sees half a model), then removed. Refused while a server of the
    repository has it loaded, unless it is this one and ``unload``."""
    from team import audit

    from ..models import ModelIntent

    where = {"model_name": model, "server": server.name}
    refused = server_access.repository_refusal(
        user,
        DELETE_PERMISSION,
        server,
        f"your role cannot delete models ({who_can(DELETE_PERMISSION)})",
    )
    if refused:
        audit.record(user, "model.delete", **where, outcome="denied", detail=refused)
        raise UploadError(refused, 403)
    sharing = [s.name for s in servers.sharing(server)]
    try:
        with model_lock(server.repository, model):
            folder = staging.existing_folder(server, model)
            files, total = model_contents(server, model)
            check_not_busy(server, model, "nothing was deleted")
            loaded_on = [
                name
                for name, states in sharing_states(server, model).items()
                if any(s.state == "READY" for s in states)
            ]
            unloaded, trash = _unload_and_move_away(
                server, model, folder, loaded_on, unload, f"'{model}'", user.get_username()
            )
    except UploadError as exc:
        audit.record(user, "model.delete", **where, outcome="failed", detail=exc.message)
        raise
    shutil.rmtree(trash, ignore_errors=True)
    # No server of the repository can load it again: none should offer to.
    ModelIntent.objects.filter(server__in=sharing, name=model).delete()
    message = f"model {model} deleted: {len(files)} files, {total} bytes"
    if unloaded:
        message += "; it was unloaded from Triton first"
    audit.record(user, "model.delete", **where, outcome="ok",
                 detail=message + " (" + ", ".join(files[:50]) + (" …" if len(files) > 50 else "") + ")")  # fmt: skip
    announce(server, model)
    return Deleted(model, 0, message, unloaded)
