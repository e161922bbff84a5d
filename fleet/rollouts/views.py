"""Rollout pages: the form (which servers the choice resolves to, before anything starts),
the start, one rollout live, and the list. Thin: ``choose`` resolves, ``runner`` runs."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from registry import server_access, servers
from registry.server_context import server_of
from repository_app import control, repository
from repository_app.control import CANNOT_CONTROL
from repository_app.naming import unsafe_name_reason
from team import audit

from ..models import Rollout
from . import runner
from .choose import KINDS, Choice, ChoiceError, by_label, by_repository, hand_picked

CHOOSE_ONE = "choose the servers: every server on a repository, a label, or a hand-picked list"


def choice_from(data: Any, user: Any) -> Choice:
    """The form's choice (``choice`` says which of its fields counts), of the servers
    `user` may see."""
    kind = data.get("choice", "")
    if kind == "repository":
        return by_repository(data.get("repository_of", ""), user)
    if kind == "label":
        return by_label(data.get("label", ""), user)
    if kind == "servers":
        return hand_picked(data.getlist("servers"), user)
    raise ChoiceError("choice", CHOOSE_ONE)


def _on_disk(server: servers.Server, model: str) -> bool:
    try:
        repository.model_folder(model, server.repository)
        return True
    except repository.RepositoryError:
        return False


def _preview(request: HttpRequest, model: str, choice: Choice) -> list[dict[str, Any]]:
    """Each server the choice resolves to, with what is already known to stop it (from the
    disk and the roles: no Triton call, so the preview is quick)."""
    return [
        {
            "server": s,
            "permitted": request.user.has_perm(runner.CONTROL_PERMISSION, s),
            "on_disk": _on_disk(s, model),
        }
        for s in choice.servers
    ]


def _form_page(
    request: HttpRequest, data: Any, *, error: str = "", field: str | None = None, status: int = 200
) -> HttpResponse:
    model = str(data.get("model", ""))
    if unsafe_name_reason(model):
        if error:  # a start refused for its model: say so, nothing to show a form for
            return render(request, "request_error.html", {"message": error}, status=status)
        raise Http404(f"no model {model!r}: {unsafe_name_reason(model)}")
    current = server_of(request)
    kind = data.get("choice") or "repository"
    values = {
        "action": data.get("action") if data.get("action") in control.ACTIONS else "load",
        "choice": kind if kind in KINDS else "repository",
        "repository_of": data.get("repository_of") or current.name,
        "label": data.get("label", ""),
        "servers": data.getlist("servers") or [current.name],
        "note": data.get("note", ""),
    }
    choice, rows = None, []
    try:
        choice = choice_from(_Values(values), request.user)
        rows = _preview(request, model, choice)
    except ChoiceError as exc:
        if not error:
            error, field = exc.message, exc.field
    # The choices: only the servers the reader may see, and only their labels.
    every = server_access.visible_servers(request.user)
    labels = sorted({f"{k}={v}" for s in every for k, v in s.labels.items()})
    return render(
        request,
        "repository/rollout_new.html",
        {
            "model": model,
            "values": values,
            "actions": control.ACTIONS,
            "every_server": every,
            "labels": labels,
            "choice": choice,
            "rows": rows,
            "permitted_count": sum(1 for r in rows if r["permitted"]),
            "error": error,
            "error_field": field,
        },
        status=status,
    )


class _Values:
    """The form's values as the choice reads them (``get`` and ``getlist``)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def getlist(self, key: str) -> list[str]:
        value = self.values.get(key)
        return list(value) if isinstance(value, list) else []


@login_required
@require_GET
def rollout_new(request: HttpRequest) -> HttpResponse:
    return _form_page(request, request.GET)


@login_required
@require_http_methods(["GET", "POST"])
def rollouts(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        listed = runner.seen_by(request.user)
        model = request.GET.get("model", "")
        if model:
            listed = listed.filter(model=model)
        return render(
            request, "repository/rollout_list.html", {"rollouts": listed[:100], "model": model}
        )
    data = request.POST
    try:
        runner.check_request(data.get("action"), data.get("model"))
        choice = choice_from(data, request.user)
    except runner.RolloutRefused as exc:
        return _form_page(request, data, error=exc.message, field=exc.field, status=400)
    except ChoiceError as exc:
        code = 404 if exc.unknown else 400
        return _form_page(request, data, error=exc.message, field=exc.field, status=code)
    expected = [n for n in data.get("expect", "").split(",") if n]
    if expected and expected != choice.names:
        # The page listed other servers than the choice names now (one added, relabelled):
        # start nothing the user did not see.
        return _form_page(
            request,
            data,
            error=f"this choice now means {', '.join(choice.names)}, not "
            f"{', '.join(expected)} as listed: look at the list again, then start",
            status=409,
        )
    try:
        rollout = runner.create(
            data.get("action"), data.get("model"), choice, request.user, note=data.get("note", "")
        )
    except runner.RolloutRefused as exc:
        return _form_page(request, data, error=exc.message, field=exc.field, status=exc.status)
    runner.launch(rollout)
    return redirect("rollout_detail", pk=rollout.pk)


@login_required
@require_GET
def rollout_detail(request: HttpRequest, pk: int) -> HttpResponse:
    data = runner.snapshot_for(request.user, pk)
    if data is None:
        raise Http404(f"no rollout #{pk}")
    record = Rollout.objects.get(pk=pk)
    may_act = server_access.allowed_somewhere(request.user, runner.CONTROL_PERMISSION)
    return render(
        request,
        "repository/rollout_detail.html",
        {"rollout": data, "record": record, "may_act": may_act},
    )


@login_required
@require_POST
def rollout_act(request: HttpRequest, pk: int, what: str) -> HttpResponse:
    """Cancel or resume, from the rollout's page."""
    if not server_access.allowed_somewhere(request.user, runner.CONTROL_PERMISSION):
        audit.record(
            request.user, f"rollout {what}", target=f"rollout #{pk}", outcome="denied",
            detail=CANNOT_CONTROL,
        )  # fmt: skip
        raise PermissionDenied(CANNOT_CONTROL)
    rollout = runner.seen_by(request.user).filter(pk=pk).first()
    if rollout is None:
        raise Http404(f"no rollout #{pk}")
    try:
        messages.success(request, f"Rollout #{pk}: {runner.act_on(rollout, what, request.user)}.")
    except runner.RolloutRefused as exc:
        if exc.status == 403:
            raise PermissionDenied(exc.message) from None
        messages.error(request, f"Rollout #{pk}: {exc.message}.")
    return redirect("rollout_detail", pk=pk)
