"""In a real browser: an admin deactivates, reactivates, resets the password of and deletes
a user on the Users page; the user's own browser is signed out when deactivated."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from team.models import AuditEvent
from team.roles import OPERATOR, set_role

from .conftest import login

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_manages_a_user_from_the_users_page(browser, web_server, admin_credentials):
    User = get_user_model()
    bob = User.objects.create_user("bob", password="pw-bob-12345")
    set_role(bob, OPERATOR)
    Token.objects.create(user=bob)
    admin_ctx, bob_ctx = browser.new_context(), browser.new_context()
    try:
        page, bob_page = admin_ctx.new_page(), bob_ctx.new_page()
        login(bob_page, web_server.url, "bob", "pw-bob-12345")
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/team/users/")
        row = "tr[data-user=bob]"
        # The admin's own row offers no deactivate or delete.
        assert page.locator("tr[data-user=alice] [data-k=toggle-active]").count() == 0
        assert page.locator("tr[data-user=alice] [data-k=delete]").count() == 0

        page.click(f"{row} [data-k=toggle-active]")
        page.wait_for_selector(f"{row}.inactive")
        assert "bob is deactivated" in page.text_content(".messages")
        assert page.text_content(f"{row} [data-k=toggle-active]").strip() == "Reactivate"
        assert User.objects.get(username="bob").is_active is False
        bob_page.goto(f"{web_server.url}/models/")
        assert "/accounts/login/" in bob_page.url  # the session stopped working

        page.click(f"{row} [data-k=toggle-active]")
        page.wait_for_selector(f"{row}:not(.inactive)")
        assert "bob is active again" in page.text_content(".messages")
        assert User.objects.get(username="bob").is_active is True

        page.click(f"{row} [data-k=reset-password]")
        page.wait_for_selector("#password-form")
        page.fill("#id_new_password1", "short")
        page.fill("#id_new_password2", "short")
        page.click("#password-form button[type=submit]")
        assert "too short" in page.text_content("#password-form")
        page.fill("#id_new_password1", "Fresh-pass-4471")
        page.fill("#id_new_password2", "Fresh-pass-4471")
        page.click("#password-form button[type=submit]")
        page.wait_for_selector("#users")
        assert "New password set for bob" in page.text_content(".messages")
        assert "API token was revoked" in page.text_content(".messages")
        assert User.objects.get(username="bob").check_password("Fresh-pass-4471")
        assert not Token.objects.filter(user__username="bob").exists()
        assert page.text_content(f"{row} td:nth-child(4)").strip() == "none"

        page.click(f"{row} [data-k=delete]")
        page.wait_for_selector("#delete-effects")
        effects = page.text_content("#delete-effects")
        assert "audit row" in effects and "keeps the sweeps" in effects
        page.click("#delete-confirm")
        page.wait_for_selector("#users")
        assert "User bob deleted" in page.text_content(".messages")
        assert page.locator(row).count() == 0
        assert not User.objects.filter(username="bob").exists()
        actions = list(
            AuditEvent.objects.filter(target="bob", username="alice")
            .order_by("id")
            .values_list("action", flat=True)
        )
        assert actions == [
            "user.deactivate",
            "user.activate",
            "token.revoke",
            "user.password",
            "user.delete",
        ]
        assert AuditEvent.objects.filter(username="bob", action="login").exists()  # kept
    finally:
        admin_ctx.close()
        bob_ctx.close()
