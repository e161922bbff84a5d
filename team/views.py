"""Users and roles (admins) with their roles narrowed per Triton server or label, the audit
trail (everyone signed in; rows about servers hidden from the reader are left out), its CSV
export, and API tokens (your own; admins revoke anyone's)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.csv_cells import csv_cell

from . import accounts, audit, narrowing_admin, tokens
from .forms import (
    ActiveForm,
    AdminSetPasswordForm,
    AuditFilterForm,
    NarrowingForm,
    NewUserForm,
    RoleForm,
)
from .models import AuditEvent, ServerRole
from .narrowing import LABEL, NARROWED_ROLES, hidden_concerns, known_servers
from .roles import ROLES, role_of

MANAGE_USERS = "team.manage_users"
CANNOT_MANAGE = "your role cannot manage users (Admins can)"


def manages_users(action: str | None = None) -> Callable[..., Any]:
    """Admins only (team.manage_users); the 403 page says so. With `action`, a refused
    POST is audited as "denied" (a GET only shows the page)."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(MANAGE_USERS):
                if action and request.method == "POST":
                    target = get_user_model().objects.filter(pk=kwargs.get("user_id")).first()
                    audit.record(request.user, action, outcome="denied", detail=CANNOT_MANAGE,
                                 target=target.get_username() if target else "")  # fmt: skip
                raise PermissionDenied(CANNOT_MANAGE)
            return view(request, *args, **kwargs)

        return login_required(wrapper)

    return decorate


def filtered_events(params, reader) -> tuple[AuditFilterForm, QuerySet[AuditEvent]]:  # type: ignore[no-untyped-def]
    """The events ``params`` filter for, without those about servers hidden from ``reader``."""
    form = AuditFilterForm(params)
    events = audit.visible_events(AuditEvent.objects.all(), hidden_concerns(reader))
    if form.is_valid():
        if form.cleaned_data["user"]:
            events = events.filter(username=form.cleaned_data["user"])
        if form.cleaned_data["model"]:
            events = events.filter(model_name=form.cleaned_data["model"])
        if form.cleaned_data["action"]:
            events = events.filter(action=form.cleaned_data["action"])
    return form, events


@login_required
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    form, events = filtered_events(request.GET, request.user)
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "team/audit.html",
        {
            "form": form,
            "page": page,
            "actions": audit.ACTIONS,
            "users": AuditEvent.objects.values_list("username", flat=True)
            .distinct()
            .order_by("username"),
            "query": request.GET.urlencode(),
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


CSV_COLUMNS = [
    "time",
    "user",
    "action",
    "model",
    "target",
    "outcome",
    "detail",
    "before_sha256",
    "after_sha256",
    "server",  # last: the columns before it keep their places
]


@login_required
@require_GET
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    _, events = filtered_events(request.GET, request.user)
    writer = csv.writer(_Echo())

    def rows():  # type: ignore[no-untyped-def]
        yield writer.writerow(CSV_COLUMNS)
        for e in events.iterator():
            cells = [e.at.isoformat(), e.username, e.action, e.model_name, e.target, e.outcome,
                     e.detail, e.before_sha256, e.after_sha256, e.server]  # fmt: skip
            yield writer.writerow([csv_cell(c) for c in cells])

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="audit.csv"'
    return response


@manages_users("user.create")
def users(request: HttpRequest) -> HttpResponse:
    form = NewUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        user = accounts.create_user(request.user, data["username"], data["password"], data["role"])
        messages.info(request, f"User {user.username} created as {data['role']}.")
        return redirect("team_users")
    people = get_user_model().objects.order_by("username").prefetch_related("groups")
    token_since = tokens.created_by_user()
    narrowed = _narrowings_by_user()
    return render(
        request,
        "team/users.html",
        {
            "form": form,
            "people": [
                (u, role_of(u), token_since.get(u.pk), narrowed.get(u.pk, [])) for u in people
            ],
            "roles": ROLES,
            "narrowed_roles": NARROWED_ROLES,
            "selectors": _selectors(),
        },
        status=400 if request.method == "POST" else 200,
    )


def _narrowings_by_user() -> dict[int, list[tuple[ServerRole, list[str]]]]:
    """Each user's narrowings, with the servers each matches now."""
    found: dict[int, list[tuple[ServerRole, list[str]]]] = {}
    for row in ServerRole.objects.order_by("kind", "value"):
        found.setdefault(row.user_id, []).append((row, narrowing_admin.matched(row)))
    return found


def _selectors() -> list[str]:
    """What the selector field suggests: every server's name and label."""
    names, labels = [], set()
    for server in known_servers():
        names.append(server.name)
        labels |= {f"{k}={v}" for k, v in server.labels.items()}
    return [*names, *sorted(labels)]


@manages_users("user.narrow")
@require_POST
def narrow_user(request: HttpRequest, user_id: int) -> HttpResponse:
    """Narrow a user's role on one server or label (to viewer or none); audited."""
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = NarrowingForm(request.POST)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        messages.error(request, f"{field}: {errors[0]}")
        return redirect("team_users")
    try:
        row = narrowing_admin.narrow(
            request.user, user, **form.selector_fields(), role=form.cleaned_data["role"]
        )
    except narrowing_admin.NarrowingRefused as exc:
        messages.error(request, exc.message)
    else:
        where = ", ".join(narrowing_admin.matched(row)) or "no server now"
        messages.info(
            request,
            f"{user.username} is narrowed to {row.role.lower()} on {row.selector} (matches: "
            f"{where}).",
        )
    return redirect("team_users")


@manages_users("user.unnarrow")
@require_POST
def unnarrow_user(request: HttpRequest, user_id: int, narrowing_id: int) -> HttpResponse:
    """Remove one narrowing; audited."""
    user = get_object_or_404(get_user_model(), pk=user_id)
    row = get_object_or_404(ServerRole, pk=narrowing_id, user=user)
    selector = {"label" if row.kind == LABEL else "server": row.value}
    try:
        narrowing_admin.unnarrow(request.user, user, **selector)
    except narrowing_admin.NarrowingRefused as exc:
        messages.error(request, exc.message)
    else:
        messages.info(request, f"{user.username}: the narrowing on {row.selector} is removed.")
    return redirect("team_users")


def _done(request: HttpRequest, act: Callable[[], str]) -> HttpResponse:
    """Run one account action: its message on the Users page, refusals as errors."""
    try:
        messages.info(request, act())
    except accounts.AccountRefused as exc:
        messages.error(request, exc.message)
    return redirect("team_users")


@manages_users("user.role")
@require_POST
def change_user(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "choose a role: " + ", ".join(ROLES))
        return redirect("team_users")
    return _done(
        request, lambda: accounts.change_role(request.user, user, form.cleaned_data["role"])
    )


@manages_users("user.deactivate")
@require_POST
def set_user_active(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = ActiveForm(request.POST)
    if not form.is_valid():
        messages.error(request, "send active=1 or active=0")
        return redirect("team_users")
    active = bool(form.cleaned_data["active"])
    return _done(request, lambda: accounts.set_active(request.user, user, active))


@manages_users("user.password")
@require_http_methods(["GET", "POST"])
def reset_user_password(request: HttpRequest, user_id: int) -> HttpResponse:
    """GET: the form; POST: set the new password (validated by Django's validators)."""
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = AdminSetPasswordForm(user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        password = form.cleaned_data["new_password1"]
        return _done(request, lambda: accounts.reset_password(request.user, user, password))
    return render(
        request,
        "team/user_password.html",
        {"person": user, "form": form, "own": user.pk == request.user.pk},
        status=400 if request.method == "POST" else 200,
    )


@manages_users("user.delete")
@require_http_methods(["GET", "POST"])
def delete_user(request: HttpRequest, user_id: int) -> HttpResponse:
    """GET: the confirmation page (what goes, what stays); POST: delete."""
    user = get_object_or_404(get_user_model(), pk=user_id)
    if request.method == "POST":
        return _done(request, lambda: accounts.delete_user(request.user, user))
    name = user.get_username()
    return render(
        request,
        "team/user_delete.html",
        {
            "person": user,
            "role": role_of(user),
            "own": user.pk == request.user.pk,
            "audit_rows": AuditEvent.objects.filter(Q(user=user) | Q(username=name)).count(),
            "token": tokens.token_of(user),
        },
    )


@manages_users()
@require_POST
def revoke_user_token(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    if tokens.revoke(user, request.user, reason="revoked by an admin"):
        messages.info(request, f"{user.username}: API token revoked.")
    else:
        messages.info(request, f"{user.username} has no API token.")
    return redirect("team_users")


@login_required
def own_token(request: HttpRequest) -> HttpResponse:
    """Your API token: whether you have one and since when; create (key shown once) or revoke."""
    key = None
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "create":
            # Answered here, not after a redirect: the key must not be stored anywhere to be
            # shown later (messages would put it into a cookie).
            key = tokens.create(request.user, request.user).key
        elif action == "revoke":
            if tokens.revoke(request.user, request.user, reason="revoked by its owner"):
                messages.info(request, "Your API token was revoked.")
            else:
                messages.info(request, "You have no API token.")
            return redirect("own_token")
        else:
            messages.error(request, "choose create or revoke")
            return redirect("own_token")
    return render(request, "team/token.html", {"token": tokens.token_of(request.user), "key": key})
