"""Roles, the audit trail and user management."""

import csv
import io

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from team import audit
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, role_of, set_role

pytestmark = pytest.mark.django_db


def _user(name: str, role: str | None) -> Client:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345")
    if role:
        set_role(user, role)
    client = Client()
    client.force_login(user)
    return client


def test_roles_exist_with_the_right_permissions():
    viewer = get_user_model().objects.create_user("v")
    set_role(viewer, VIEWER)
    operator = get_user_model().objects.create_user("o")
    set_role(operator, OPERATOR)
    admin = get_user_model().objects.create_user("a")
    set_role(admin, ADMIN)
    assert not viewer.has_perm("repository_app.control_models")
    assert operator.has_perm("repository_app.control_models")
    assert operator.has_perm("team.upload_models") and not operator.has_perm("team.upload_code")
    assert admin.has_perm("team.upload_code") and admin.has_perm("team.delete_versions")
    assert admin.has_perm("team.manage_users") and not operator.has_perm("team.manage_users")
    assert [role_of(u) for u in (viewer, operator, admin)] == [VIEWER, OPERATOR, ADMIN]


CODENAMES = ("control_models", "run_sweeps", "upload_models", "upload_code", "delete_versions",
             "manage_users", "manage_servers")  # fmt: skip


def test_refusals_name_the_roles_that_can_never_a_permission_codename():
    from django.core.management import CommandError

    from registry import servers
    from repository_app.editor.rights import CANNOT_EDIT
    from repository_app.modelconfig import code_loading
    from repository_app.uploads import staging
    from team.cli import acting_user
    from team.roles import ADMIN_PERMISSIONS, OPERATOR_PERMISSIONS, who_can

    assert who_can("repository_app.control_models") == "Operators and Admins can"
    assert who_can("team.upload_code", capital=True) == "Only Admins can"
    for permission in ADMIN_PERMISSIONS - OPERATOR_PERMISSIONS:
        assert who_can(permission) == "only Admins can"
    viewer = get_user_model().objects.create_user("vic")
    set_role(viewer, VIEWER)
    operator = get_user_model().objects.create_user("otis")
    set_role(operator, OPERATOR)
    shown = [CANNOT_EDIT, code_loading.refusal(["backend 'python' → 'onnxruntime'"])]
    for user, is_code in ((viewer, False), (operator, True)):
        with pytest.raises(staging.UploadError) as refused:
            staging.check_may_upload(user, is_code=is_code, server=servers.default())
        shown.append(refused.value.message)
    with pytest.raises(CommandError) as denied:
        acting_user("vic", "repository_app.control_models")
    shown.append(str(denied.value))
    assert shown[0] == "your role cannot change model configs (Operators and Admins can)"
    assert shown[2] == "your role cannot upload models (Operators and Admins can)"
    assert shown[3].startswith("Only Admins can upload code")
    assert shown[4].endswith("is not allowed to do this (Operators and Admins can)")
    for message in shown:
        assert not any(name in message for name in CODENAMES), message


def test_setting_a_role_replaces_the_previous_one():
    user = get_user_model().objects.create_user("u")
    set_role(user, ADMIN)
    set_role(user, VIEWER)
    assert list(user.groups.values_list("name", flat=True)) == [VIEWER]
    with pytest.raises(ValueError, match="unknown role"):
        set_role(user, "Overlord")


def test_audit_events_are_append_only():
    event = audit.record("someone", "load", model_name="m")
    event.detail = "changed"
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(ValueError, match="append-only"):
        event.delete()
    assert AuditEvent.objects.get().detail == ""


def test_user_and_role_changes_are_audited_with_the_acting_admin():
    admin = _user("root", ADMIN)
    response = admin.post(
        "/team/users/", {"username": "newbie", "password": "a-long-pass-99", "role": OPERATOR}
    )
    assert response.status_code == 302
    newbie = get_user_model().objects.get(username="newbie")
    assert role_of(newbie) == OPERATOR
    created = AuditEvent.objects.filter(action="user.create", target="newbie").get()
    assert created.username == "root"
    # One row for a creation, naming the role (no separate "user.role" row).
    assert created.detail == "role Operator"
    assert not AuditEvent.objects.filter(action="user.role", target="newbie").exists()
    response = admin.post(f"/team/users/{newbie.pk}/", {"role": VIEWER})
    assert response.status_code == 302
    newbie.refresh_from_db()
    # Deactivating is its own button now: saving a role leaves the account active.
    assert role_of(newbie) == VIEWER and newbie.is_active is True
    role_event = AuditEvent.objects.get(action="user.role", target="newbie")
    assert role_event.username == "root" and role_event.detail == "Operator → Viewer"


def test_bad_new_users_get_a_message_and_nothing_is_created():
    admin = _user("root", ADMIN)
    samples = [
        ({"username": "", "password": "a-long-pass-99", "role": VIEWER}, "This field is required"),
        ({"username": "root", "password": "a-long-pass-99", "role": VIEWER}, "already exists"),
        ({"username": "x", "password": "short", "role": VIEWER}, "too short"),
        ({"username": "y", "password": "a-long-pass-99", "role": "God"}, "Select a valid choice"),
    ]
    before = get_user_model().objects.count()
    for data, message in samples:
        response = admin.post("/team/users/", data)
        assert response.status_code == 400, data
        assert message in response.content.decode(), data
    assert get_user_model().objects.count() == before


def test_only_admins_manage_users_and_nothing_changes_when_denied():
    operator = _user("op", OPERATOR)
    victim = get_user_model().objects.create_user("victim")
    assert operator.get("/team/users/").status_code == 403
    response = operator.post(f"/team/users/{victim.pk}/", {"role": ADMIN, "active": "on"})
    assert response.status_code == 403
    assert role_of(victim) == VIEWER


def test_the_audit_page_filters_and_exports_csv():
    viewer = _user("watcher", VIEWER)
    audit.record("alice", "load", model_name="m1", detail="m1 loaded: READY")
    audit.record("bob", "unload", model_name="m2", outcome="failed", detail='nope, "quoted"')
    html = viewer.get("/audit/", {"user": "bob"}).content.decode()
    assert "nope" in html and "m1 loaded" not in html
    response = viewer.get("/audit.csv", {"model": "m2"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == [
        "time",
        "user",
        "action",
        "model",
        "target",
        "outcome",
        "detail",
        "before_sha256",
        "after_sha256",
        "server",
    ]
    assert len(rows) == 2 and rows[1][1:7] == [
        "bob",
        "unload",
        "m2",
        "",
        "failed",
        'nope, "quoted"',
    ]


def test_password_change_works():
    client = _user("pat", VIEWER)
    response = client.post(
        "/accounts/password/",
        {
            "old_password": "pw-pat-12345",
            "new_password1": "brand-new-pass-77",
            "new_password2": "brand-new-pass-77",
        },
    )
    assert response.status_code == 302
    assert get_user_model().objects.get(username="pat").check_password("brand-new-pass-77")


def test_issue_token_prints_a_working_token(capsys):
    from django.core.management import call_command

    get_user_model().objects.create_user("robot")
    call_command("issue_token", "robot")
    token = capsys.readouterr().out.strip()
    assert len(token) == 40
    response = Client().get("/api/v1/audit/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no user 'ghost'"):
        call_command("issue_token", "ghost")
