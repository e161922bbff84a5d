"""`user.has_perm(PERMISSION, server)`: a permission on one Triton server is the user's
role's permission (ModelBackend alone answers no permission for an object)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from registry import servers
from team.roles import OPERATOR, VIEWER, ensure_roles, set_role

pytestmark = pytest.mark.django_db
CONTROL = "repository_app.control_models"


def _user(name: str, role: str) -> User:
    ensure_roles()
    user = User.objects.create_user(name, password="pw-server-perm-1")
    set_role(user, role)
    return User.objects.get(pk=user.pk)  # a fresh permission cache


def test_a_permission_on_a_server_is_the_roles_permission():
    server = servers.default()
    assert _user("olga", OPERATOR).has_perm(CONTROL, server)
    assert not _user("vera", VIEWER).has_perm(CONTROL, server)


def test_an_object_that_is_not_a_server_grants_nothing():
    assert not _user("otto", OPERATOR).has_perm(CONTROL, object())


def test_the_server_backend_authenticates_no_one(client):
    _user("olga", OPERATOR)
    from django.contrib.auth import authenticate

    user = authenticate(username="olga", password="pw-server-perm-1")
    assert user is not None and user.backend == "django.contrib.auth.backends.ModelBackend"


def test_the_permissions_are_read_in_one_query_with_modelbackends_answer(
    django_assert_num_queries,
):
    from django.contrib.auth.backends import ModelBackend
    from django.contrib.auth.models import Permission

    from team.backends import all_permissions

    olga = _user("olga", OPERATOR)
    olga.user_permissions.add(Permission.objects.get(codename="view_user"))  # one of her own
    admin = User.objects.create_superuser("root", password="pw-server-perm-1")
    gone = _user("ghost", OPERATOR)
    User.objects.filter(pk=gone.pk).update(is_active=False)
    for user in (olga, admin, gone):
        fresh = User.objects.get(pk=user.pk)
        expected = ModelBackend().get_all_permissions(User.objects.get(pk=user.pk))
        with django_assert_num_queries(1 if fresh.is_active else 0):
            assert all_permissions(fresh) == expected
        with django_assert_num_queries(0):  # cached on the user, where ModelBackend looks
            assert ModelBackend().get_all_permissions(fresh) == expected
    assert "auth.view_user" in all_permissions(User.objects.get(pk=olga.pk))
