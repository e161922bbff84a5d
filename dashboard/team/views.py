"""Users and roles (admins), the audit trail (everyone signed in), its CSV export, and
API tokens (your own; admins revoke anyone's)."""

from __future__ import annotations

import csv

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from . import audit, tokens
from .forms import AuditFilterForm, NewUserForm, RoleForm
from .models import AuditEvent
from .roles import ROLES, role_of, set_role

MANAGE_USERS = "team.manage_users"


def filtered_events(params) -> tuple[AuditFilterForm, QuerySet[AuditEvent]]:  # type: ignore[no-untyped-def]
    form = AuditFilterForm(params)
    events = AuditEvent.objects.all()
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
    form, events = filtered_events(request.GET)
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
]


# A cell starting with one of these is a formula to Excel, LibreOffice and Sheets
# (=HYPERLINK(...) in a failed login's username): prefix a quote, as OWASP advises.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


@login_required
@require_GET
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    _, events = filtered_events(request.GET)
    writer = csv.writer(_Echo())

    def rows():  # type: ignore[no-untyped-def]
        yield writer.writerow(CSV_COLUMNS)
        for e in events.iterator():
            cells = [e.at.isoformat(), e.username, e.action, e.model_name, e.target, e.outcome,
                     e.detail, e.before_sha256, e.after_sha256]  # fmt: skip
            yield writer.writerow([csv_cell(c) for c in cells])

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="audit.csv"'
    return response


@login_required
@permission_required(MANAGE_USERS, raise_exception=True)
def users(request: HttpRequest) -> HttpResponse:
    form = NewUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = get_user_model().objects.create_user(
            form.cleaned_data["username"], password=form.cleaned_data["password"]
        )
        set_role(user, form.cleaned_data["role"])
        messages.info(request, f"User {user.username} created as {form.cleaned_data['role']}.")
        return redirect("team_users")
    people = get_user_model().objects.order_by("username").prefetch_related("groups")
    token_since = tokens.created_by_user()
    return render(
        request,
        "team/users.html",
        {
            "form": form,
            "people": [(u, role_of(u), token_since.get(u.pk)) for u in people],
            "roles": ROLES,
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
@permission_required(MANAGE_USERS, raise_exception=True)
@require_POST
def change_user(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "choose a role: " + ", ".join(ROLES))
    elif user == request.user and form.cleaned_data["role"] != role_of(user):
        messages.error(request, "you cannot change your own role")
    else:
        set_role(user, form.cleaned_data["role"])
        if user.is_active != form.cleaned_data["active"] and user != request.user:
            user.is_active = form.cleaned_data["active"]
            user.save(update_fields=["is_active"])
        messages.info(request, f"{user.username}: {form.cleaned_data['role']}")
    return redirect("team_users")


@login_required
@permission_required(MANAGE_USERS, raise_exception=True)
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
