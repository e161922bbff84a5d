"""The Users page: create, change role, deactivate, reset a password, delete; one audit row
per action, refusals audited as "denied", and the stored state checked after each.

Actors: Ada the Admin, Olga the Operator, Vic the Viewer."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.test import Client
from rest_framework.authtoken.models import Token

from team import audit, tokens
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, role_of, set_role

pytestmark = pytest.mark.django_db

User = get_user_model()


def _person(name: str, role: str) -> tuple[User, Client]:  # type: ignore[valid-type]
    user = User.objects.create_user(name, password=f"pw-{name}-12345")
    set_role(user, role)
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture()
def ada():  # type: ignore[no-untyped-def]
    return _person("ada", ADMIN)


@pytest.fixture()
def olga():  # type: ignore[no-untyped-def]
    return _person("olga", OPERATOR)


@pytest.fixture()
def vic():  # type: ignore[no-untyped-def]
    return _person("vic", VIEWER)


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    """The messages a redirect carries, read (and so consumed) from the page it leads to."""
    assert response.status_code == 302, response.status_code
    page = response.client.get(response.url)
    return [str(m) for m in page.context["messages"]]


def _rows(action: str, target: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, target=target).order_by("id"))


def test_creating_a_user_writes_one_audit_row_naming_the_role(ada):
    _, client = ada
    before = AuditEvent.objects.count()
    response = client.post(
        "/team/users/", {"username": "newbie", "password": "a-long-pass-99", "role": OPERATOR}
    )
    assert response.status_code == 302
    assert _messages(response) == ["User newbie created as Operator."]
    assert role_of(User.objects.get(username="newbie")) == OPERATOR
    new_rows = list(AuditEvent.objects.order_by("id")[before:])
    assert [(e.action, e.username, e.target, e.detail) for e in new_rows] == [
        ("user.create", "ada", "newbie", "role Operator")
    ]


def test_a_role_change_writes_one_row_from_the_old_role_to_the_new(ada, olga):
    _, client = ada
    target, _ = olga
    response = client.post(f"/team/users/{target.pk}/", {"role": ADMIN})
    assert response.status_code == 302
    assert _messages(response) == ["olga: Operator → Admin"]
    assert role_of(User.objects.get(pk=target.pk)) == ADMIN
    assert [(e.username, e.detail) for e in _rows("user.role", "olga")] == [
        ("ada", "Operator → Admin")
    ]
    # The same role again changes nothing and writes nothing.
    again = client.post(f"/team/users/{target.pk}/", {"role": ADMIN})
    assert _messages(again) == ["olga is already Admin"]
    assert len(_rows("user.role", "olga")) == 1
    # A role save leaves the account active (the role form has no activity checkbox).
    assert User.objects.get(pk=target.pk).is_active


def test_a_role_change_elsewhere_in_one_transaction_is_one_row(
    olga, django_capture_on_commit_callbacks
):
    """The Django admin's groups.set() removes Operator, then adds Admin: one row."""
    target = User.objects.get(username=olga[0].username)  # as the admin loads it
    before = AuditEvent.objects.filter(action="user.role").count()
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        target.groups.set([Group.objects.get(name=ADMIN)])
    rows = list(AuditEvent.objects.filter(action="user.role").order_by("id")[before:])
    assert [(e.target, e.detail) for e in rows] == [("olga", "Operator → Admin")]


def test_an_admin_deactivates_and_reactivates_a_user(ada, olga):
    _, client = ada
    target, olga_client = olga
    key = tokens.create(target, target).key
    response = client.post(f"/team/users/{target.pk}/active", {"active": "0"})
    assert response.status_code == 302
    assert _messages(response) == [
        "olga is deactivated: it can no longer sign in or use its API token"
    ]
    assert User.objects.get(pk=target.pk).is_active is False
    [row] = _rows("user.deactivate", "olga")
    assert row.username == "ada" and row.outcome == "ok" and "role Operator" in row.detail
    # Their session and their token stop working; the password no longer logs in.
    assert olga_client.get("/").status_code == 302
    assert Client().get("/api/v1/audit/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401
    assert not Client().login(username="olga", password="pw-olga-12345")
    users_page = client.get("/team/users/").content.decode()
    assert 'data-user="olga" class="inactive"' in users_page and "Reactivate" in users_page

    response = client.post(f"/team/users/{target.pk}/active", {"active": "1"})
    assert _messages(response) == ["olga is active again"]
    assert User.objects.get(pk=target.pk).is_active is True
    assert len(_rows("user.activate", "olga")) == 1
    assert Client().login(username="olga", password="pw-olga-12345")
    # No stray "user.change" rows from the signals for these saves.
    assert not _rows("user.change", "olga")


def test_admins_cannot_deactivate_delete_or_reset_themselves(ada):
    me, client = ada
    for url, data, action in (
        (f"/team/users/{me.pk}/active", {"active": "0"}, "user.deactivate"),
        (f"/team/users/{me.pk}/delete/", {}, "user.delete"),
        (
            f"/team/users/{me.pk}/password/",
            {"new_password1": "Fresh-pass-4471", "new_password2": "Fresh-pass-4471"},
            "user.password",
        ),
    ):
        response = client.post(url, data)
        assert response.status_code == 302, url
        [message] = _messages(response)
        assert "your own account" in message, url
        [row] = _rows(action, "ada")
        assert row.outcome == "denied"
    me.refresh_from_db()
    assert me.is_active and me.check_password("pw-ada-12345")


def test_deleting_a_user_keeps_their_audit_rows_under_their_name(ada, olga):
    _, client = ada
    target, _ = olga
    tokens.create(target, target)
    audit.record(target, "load", model_name="add_sub", detail="add_sub loaded: READY")
    page = client.get(f"/team/users/{target.pk}/delete/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "keeps its 2 audit rows" in html and "API token" in html

    response = client.post(f"/team/users/{target.pk}/delete/")
    assert response.status_code == 302
    assert _messages(response) == [
        "User olga deleted; their 2 audit rows stay under the name olga."
    ]
    assert not User.objects.filter(username="olga").exists()
    assert not Token.objects.filter(user_id=target.pk).exists()
    load = AuditEvent.objects.get(action="load", model_name="add_sub")
    assert load.username == "olga" and load.user_id is None
    [row] = _rows("user.delete", "olga")
    assert row.username == "ada" and "role Operator" in row.detail
    assert "API token deleted" in row.detail
    # The audit page still filters by the deleted user's name.
    assert "add_sub loaded" in client.get("/audit/", {"user": "olga"}).content.decode()


def test_the_last_active_admin_cannot_be_deleted_deactivated_or_demoted():
    """Someone allowed to manage users without the Admin role (a direct permission)
    cannot take away the only Admin."""
    only_admin, _ = _person("ada", ADMIN)
    manager, client = _person("max", VIEWER)
    manager.user_permissions.add(Permission.objects.get(codename="manage_users"))
    for url, data, action in (
        (f"/team/users/{only_admin.pk}/delete/", {}, "user.delete"),
        (f"/team/users/{only_admin.pk}/active", {"active": "0"}, "user.deactivate"),
        (f"/team/users/{only_admin.pk}/", {"role": OPERATOR}, "user.role"),
    ):
        response = client.post(url, data)
        assert response.status_code == 302, url
        [message] = _messages(response)
        assert "ada is the last active Admin" in message, url
        [row] = _rows(action, "ada")
        assert row.outcome == "denied" and row.username == "max"
    only_admin.refresh_from_db()
    assert only_admin.is_active and role_of(only_admin) == ADMIN

    # With a second active Admin, the first may go.
    _person("bea", ADMIN)
    response = client.post(f"/team/users/{only_admin.pk}/delete/")
    assert _messages(response) == ["User ada deleted; their 0 audit rows stay under the name ada."]
    assert not User.objects.filter(username="ada").exists()


def test_a_superuser_is_managed_by_superusers_only(ada):
    _, client = ada
    root = User.objects.create_superuser("root", "", "pw-root-12345")
    for url, data in (
        (f"/team/users/{root.pk}/delete/", {}),
        (f"/team/users/{root.pk}/active", {"active": "0"}),
        (
            f"/team/users/{root.pk}/password/",
            {"new_password1": "Fresh-pass-4471", "new_password2": "Fresh-pass-4471"},
        ),
    ):
        [message] = _messages(client.post(url, data))
        assert "root is a superuser: only a superuser may" in message, url
    root.refresh_from_db()
    assert root.is_active and root.check_password("pw-root-12345")


BAD_PASSWORDS = [
    ({"new_password1": "short", "new_password2": "short"}, "too short"),
    ({"new_password1": "password123", "new_password2": "password123"}, "too common"),
    ({"new_password1": "olga.petrova", "new_password2": "olga.petrova"}, "too similar"),
    ({"new_password1": "Fresh-pass-4471", "new_password2": "Fresh-pass-4472"}, "didn’t match"),
    ({"new_password1": "", "new_password2": ""}, "This field is required"),
]


def test_an_admin_resets_a_password_checked_by_djangos_validators(ada, olga):
    _, client = ada
    target, olga_client = olga
    User.objects.filter(pk=target.pk).update(email="olga.petrova@example.com")  # no signal
    tokens.create(target, target)
    assert client.get(f"/team/users/{target.pk}/password/").status_code == 200
    for data, message in BAD_PASSWORDS:
        response = client.post(f"/team/users/{target.pk}/password/", data)
        assert response.status_code == 400, data
        assert message in response.content.decode(), data
    target.refresh_from_db()
    assert target.check_password("pw-olga-12345")
    assert Token.objects.filter(user=target).exists() and not _rows("user.password", "olga")

    response = client.post(
        f"/team/users/{target.pk}/password/",
        {"new_password1": "Fresh-pass-4471", "new_password2": "Fresh-pass-4471"},
    )
    assert response.status_code == 302
    assert _messages(response) == [
        "New password set for olga; their sessions ended and their API token was revoked."
    ]
    target.refresh_from_db()
    assert target.check_password("Fresh-pass-4471")
    # The password-change signal revoked the token, in the admin's name.
    assert not Token.objects.filter(user=target).exists()
    [revoked] = _rows("token.revoke", "olga")
    assert revoked.username == "ada" and revoked.detail == "password changed"
    [row] = _rows("user.password", "olga")
    assert row.username == "ada" and "API token revoked" in row.detail
    assert not _rows("user.change", "olga")
    assert olga_client.get("/").status_code == 302  # the old session is over


def test_operators_get_the_styled_403_and_the_refusal_is_audited(olga, vic):
    _, client = olga
    victim, _ = vic
    for url, data, action in (
        (f"/team/users/{victim.pk}/delete/", {}, "user.delete"),
        (f"/team/users/{victim.pk}/active", {"active": "0"}, "user.deactivate"),
        (
            f"/team/users/{victim.pk}/password/",
            {"new_password1": "Fresh-pass-4471", "new_password2": "Fresh-pass-4471"},
            "user.password",
        ),
        (f"/team/users/{victim.pk}/", {"role": ADMIN}, "user.role"),
    ):
        response = client.post(url, data)
        assert response.status_code == 403, url
        html = response.content.decode()
        assert 'id="http-error"' in html and "Your role cannot manage users (Admins can)" in html
        [row] = _rows(action, "vic")
        assert row.outcome == "denied" and row.username == "olga"
    victim.refresh_from_db()
    assert victim.is_active and role_of(victim) == VIEWER
    assert victim.check_password("pw-vic-12345")
    page = client.get("/team/users/")
    assert page.status_code == 403 and "Your role cannot manage users" in page.content.decode()


def test_the_audit_filter_offers_every_action_the_code_records():
    from team.audit import ACTIONS

    for action in ("search.start", "search.cancel", "search.resume", "search.apply",
                   "token.create", "token.revoke", "model.delete", "user.activate",
                   "user.deactivate", "user.password", "user.delete"):  # fmt: skip
        assert action in ACTIONS, action
