"""The config history pages: the revisions of a model's config.pbtxt, a diff of any two
(or of one against the file on disk), and restoring one. Pages only read: an edit made on
disk shows as "not in the history yet" until the workers or the next save record it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from registry.server_context import server_of
from registry.servers import Server

from ..models import ConfigRevision
from . import diffing, saving
from .rights import edit_refusal
from .views import current_or_404, refuse


@login_required
@require_GET
def config_history(request: HttpRequest, name: str) -> HttpResponse:
    server = server_of(request)
    current = current_or_404(name, server)
    revisions = saving.history(name, server)
    cannot_edit = edit_refusal(request, server)
    return render(
        request,
        "repository/config_history.html",
        {
            "name": name,
            "revisions": revisions,
            "current_sha": current.sha256,
            # The file on disk, when no revision holds it yet: shown, diffable, not recorded.
            "unrecorded": current
            if saving.unrecorded(current, revisions[0] if revisions else None)
            else None,
            "can_edit": not cannot_edit,
            "cannot_edit": cannot_edit,
        },
    )


DISK = "disk"  # ?a= / ?b= naming the file on disk now rather than a revision


def _side_or_404(
    name: str, server: Server, value: str | None, current: saving.CurrentConfig
) -> tuple[str, str, ConfigRevision | None]:
    """(text, label, revision) of one side of a diff: a revision's id, or ``disk``."""
    if value == DISK:
        return current.text, "the file on disk (not in the history yet)", None
    try:
        revision = saving.get_revision(name, int(value or ""), server)
    except (ValueError, ConfigRevision.DoesNotExist) as exc:
        raise Http404(f"no revision {value!r} of {name}") from exc
    return revision.text, f"revision #{revision.number}", revision


@login_required
@require_GET
def config_diff(request: HttpRequest, name: str) -> HttpResponse:
    """Side-by-side diff of ?a= (left) and ?b= (right), each a revision's id or ``disk``;
    b defaults to the latest revision (the file on disk when there is none)."""
    server = server_of(request)
    current = current_or_404(name, server)
    left_text, left_label, left = _side_or_404(name, server, request.GET.get("a"), current)
    right_id = request.GET.get("b")
    if not right_id:
        latest = saving.latest_revision(name, server)
        right_id = str(latest.pk) if latest is not None else DISK
    right_text, right_label, right = _side_or_404(name, server, right_id, current)
    return render(
        request,
        "repository/config_diff.html",
        {
            "name": name,
            "left": left,
            "right": right,
            "diff": diffing.side_by_side(left_text, right_text),
            "left_label": left_label,
            "right_label": right_label,
            "current_sha": current.sha256,
            "can_edit": not edit_refusal(request, server),
        },
    )


@login_required
@require_POST
def config_restore(request: HttpRequest, name: str, revision_id: int) -> HttpResponse:
    server = server_of(request)
    if refused := edit_refusal(request, server):
        return refuse(request, refused, 403)
    current_or_404(name, server)
    back = reverse(
        "config_editor" if request.POST.get("next") == "editor" else "config_history", args=[name]
    )
    try:
        old = saving.get_revision(name, revision_id, server)
    except ConfigRevision.DoesNotExist as exc:
        raise Http404(f"no revision {revision_id} of {name}") from exc
    shown = f"revision #{old.number}"
    try:
        result = saving.restore_revision(
            name,
            revision_id,
            server=server,
            base_sha256=request.POST.get("base_sha", ""),
            author_id=request.user.pk,
        )
    except ConfigRevision.DoesNotExist as exc:
        raise Http404(f"no revision {revision_id} of {name}") from exc
    except saving.InvalidConfig as exc:
        first = next(f for f in exc.findings if f.is_error)
        messages.error(request, f"{shown.capitalize()} has errors, not restored: {first.message}")
        return redirect(back)
    except saving.CodeChangeRefused as exc:
        messages.error(request, f"{shown.capitalize()} not restored: {exc.message}")
        return redirect(back)
    except saving.SaveConflict:
        messages.error(
            request,
            "config.pbtxt changed since this page was opened (recorded in the history): "
            "nothing was restored; look at the latest revision and try again.",
        )
        return redirect(back)
    except saving.SaveError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    if result.revision is None:
        messages.info(request, f"The file already has the content of {shown}.")
    else:
        messages.success(request, f"Restored {shown} as new revision #{result.revision.number}.")
    return redirect(back)
