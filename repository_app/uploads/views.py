"""Upload pages and version actions: thin views over staging, deleting and version_policy
(the bytes themselves go through the API endpoints in api.py, chunk by chunk, from
static/js/upload.js)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from registry import server_access
from registry.server_context import server_of
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError

from .. import repository
from ..control import CONTROL_PERMISSION
from ..editor.rights import edit_refusal
from ..editor.saving import CodeChangeRefused, InvalidConfig, SaveConflict, SaveError
from . import deleting, names, staging
from .staging import UploadError
from .version_policy import set_version_policy

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def binary_size(count: int) -> str:
    """64 GiB, 4 MiB, 1.5 KiB: the binary units the upload rows (upload.js) use too
    (Django's filesizeformat divides by 1024 but writes "GB")."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    number = f"{value:.1f}".removesuffix(".0") if unit else str(count)
    return f"{number} {_UNITS[unit]}"


def _limits() -> dict[str, str]:
    return {
        "max_file": binary_size(settings.UPLOAD_MAX_FILE_BYTES),
        "max_total": binary_size(settings.UPLOAD_MAX_TOTAL_BYTES),
        "chunk": binary_size(settings.UPLOAD_CHUNK_BYTES),
    }


@login_required
@require_GET
def new_model(request: HttpRequest) -> HttpResponse:
    server = server_of(request)
    return render(
        request,
        "repository/upload.html",
        {
            "new_model": True,
            "backends": names.BACKEND_CHOICES,
            "limits": _limits(),
            **_may_upload(request, server),
            # After publishing, the page offers a trial load to those who may load.
            "can_load": request.user.has_perm(CONTROL_PERMISSION, server),
        },
    )


def _may_upload(request: HttpRequest, server: Server) -> dict[str, object]:
    """Whether the page offers uploads (the steps are checked again: staging)."""
    refused = server_access.repository_refusal(
        request.user,
        staging.UPLOAD_PERMISSION,
        server,
        "your role cannot upload models (Operators and Admins can)",
    )
    return {
        "can_upload": not refused,
        "cannot_upload": refused,
        "can_upload_code": not server_access.repository_refusal(
            request.user, staging.CODE_PERMISSION, server, "code"
        ),
    }


def _model_or_404(server: Server, name: str) -> repository.ModelFolder:
    """The model's folder on the server's repository; 404 with why when there is none."""
    try:
        return repository.get_model(server.repository, name)
    except repository.RepositoryError as exc:
        raise Http404(str(exc)) from exc


@login_required
@require_GET
def new_version(request: HttpRequest, name: str) -> HttpResponse:
    server = server_of(request)
    folder = _model_or_404(server, name)
    backend_error = ""
    files = None
    try:
        files = staging.model_backend(server, name)
    except UploadError as exc:
        backend_error = exc.message
    return render(
        request,
        "repository/upload.html",
        {
            "new_model": False,
            "name": name,
            "folder": folder,
            "files": files,
            "backend_error": backend_error,
            "next_version": max(folder.versions, default=0) + 1,
            "limits": _limits(),
            **_may_upload(request, server),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def delete_version(request: HttpRequest, name: str, version: str) -> HttpResponse:
    """GET: the confirmation page; POST (confirmed): delete, optionally unloading first."""
    try:
        names.check_model_name(name)
        number = names.parse_version(version)
    except names.InvalidName as exc:
        raise Http404(str(exc)) from exc
    server = server_of(request)
    if request.method == "POST":
        try:
            deleted = deleting.delete_version(
                server, name, number, request.user, unload=request.POST.get("unload") == "1"
            )
        except UploadError as exc:
            messages.error(request, exc.message)
            if exc.status in (403, 404):
                return redirect(reverse("model_detail", args=[name]))
            return redirect(reverse("version_delete", args=[name, number]))
        messages.info(request, deleted.message)
        return redirect(reverse("model_detail", args=[name]))
    folder = _model_or_404(server, name)
    if number not in folder.versions:
        raise Http404(f"model '{name}' has no version {number}")
    version_folder = next(v for v in repository.version_folders(folder) if v.number == number)
    try:
        states = get_client(server).model_states(name)
        triton_error = ""
    except TritonError as exc:
        states, triton_error = [], exc.message
    loaded = any(s.state == "READY" and s.version == str(number) for s in states)
    return render(
        request,
        "repository/upload_delete_version.html",
        {
            "name": name,
            "version": version_folder,
            "loaded": loaded,
            "states": states,
            "triton_error": triton_error,
            "can_delete": request.user.has_perm(deleting.DELETE_PERMISSION, server),
        },
    )


@login_required
@require_POST
def version_policy(request: HttpRequest, name: str) -> HttpResponse:
    server = server_of(request)
    if refused := edit_refusal(request, server):
        messages.error(request, refused)
        return redirect(reverse("model_detail", args=[name]))
    try:
        set_version_policy(
            server,
            name,
            request.POST.get("policy", ""),
            user=request.user,
            num_versions=request.POST.get("num_versions"),
            versions=request.POST.get("versions"),
        )
        messages.info(request, "Version policy saved to config.pbtxt (reload the model to apply)")
    except UploadError as exc:
        messages.error(request, exc.message)
    except repository.RepositoryError as exc:
        raise Http404(str(exc)) from exc
    except SaveConflict:
        messages.error(request, "config.pbtxt changed meanwhile: try again")
    except InvalidConfig as exc:
        messages.error(request, f"not saved: {exc.findings[0].message}")
    except CodeChangeRefused as exc:
        messages.error(request, exc.message)
    except SaveError as exc:
        messages.error(request, exc.message)
    return redirect(reverse("model_detail", args=[name]) + "#versions-card")


@login_required
@require_http_methods(["GET", "POST"])
def delete_model(request: HttpRequest, name: str) -> HttpResponse:
    """GET: the confirmation listing every file that goes; POST (confirmed): delete, after
    unloading when asked to. Admins only (team.delete_versions)."""
    server = server_of(request)
    if request.method == "POST":
        try:
            deleted = deleting.delete_model(
                server, name, request.user, unload=request.POST.get("unload") == "1"
            )
        except UploadError as exc:
            messages.error(request, exc.message)
            if exc.status == 404:
                return redirect("model_list")
            return redirect(reverse("model_delete", args=[name]))
        messages.info(request, deleted.message)
        return redirect("model_list")
    try:
        files, total = deleting.model_contents(server, name)
    except UploadError as exc:
        raise Http404(exc.message) from exc
    try:
        states, triton_error = get_client(server).model_states(name), ""
    except TritonError as exc:
        states, triton_error = [], exc.message
    return render(
        request,
        "repository/model_delete.html",
        {
            "name": name,
            "files": files,
            "total": total,
            "loaded": any(s.state == "READY" for s in states),
            "triton_error": triton_error,
            "can_delete": request.user.has_perm(deleting.DELETE_PERMISSION, server),
        },
    )
