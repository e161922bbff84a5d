"""Role facts and the registry read as JSON columns of another query's row (team.role_facts,
servers.all_column, common.json_rows): what they remember must equal what the checks read
on their own, on SQLite and PostgreSQL alike (datetimes, JSON labels, booleans included)."""

from __future__ import annotations

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission, User

from common.request_memo import recall, remembering
from registry import servers
from registry.models import TritonServer
from team import role_facts
from team.models import ServerRole
from team.narrowing import NARROWINGS_MEMO, effective
from team.roles import GROUPS_MEMO, OPERATOR, ensure_roles, set_role

pytestmark = pytest.mark.django_db
UPLOAD = "team.upload_models"


def _fields(narrowing: ServerRole) -> tuple:
    return tuple(getattr(narrowing, f.attname) for f in ServerRole._meta.concrete_fields)


def _server(name: str, **extra: object) -> TritonServer:
    return TritonServer.objects.create(
        name=name, grpc_url=f"{name}:8001", http_url=f"http://{name}:8000",
        metrics_url=f"http://{name}:8002/metrics", repository=f"/srv/{name}/models", **extra,
    )  # fmt: skip


def test_the_role_facts_read_with_a_row_are_those_the_checks_read_alone(
    django_assert_num_queries,
):
    ensure_roles()
    olga = User.objects.create_user("olga")
    set_role(olga, OPERATOR)
    olga.user_permissions.add(Permission.objects.get(codename="view_user"))
    ServerRole.objects.create(user=olga, kind="server", value="prod-1", role="Viewer")
    ServerRole.objects.create(user=olga, kind="label", value="env=prod", role="none")
    root = User.objects.create_superuser("root")
    ghost = User.objects.create_user("ghost", is_active=False)
    bare = User.objects.create_user("bare")  # no group, no narrowing
    prod = servers.Server.from_row(_server("prod-1", labels={"env": "dev"}))
    lab = servers.Server.from_row(_server("lab", labels={"env": "lab"}))

    for user in (olga, root, ghost, bare):
        fresh = User.objects.get(pk=user.pk)
        row = User.objects.annotate(**role_facts.columns(fresh)).get(pk=user.pk)
        expected_perms = ModelBackend().get_all_permissions(User.objects.get(pk=user.pk))
        expected_groups = set(user.groups.values_list("name", flat=True))
        expected_narrowings = [_fields(n) for n in ServerRole.objects.filter(user=user).order_by("id")]  # fmt: skip
        with remembering():
            role_facts.remember_read(fresh, row)
            assert getattr(fresh, "_perm_cache", set()) == expected_perms
            assert recall((GROUPS_MEMO, user.pk)) == expected_groups
            assert [_fields(n) for n in recall((NARROWINGS_MEMO, user.pk))] == expected_narrowings
            with django_assert_num_queries(0):  # the checks read what was remembered
                allowed = {s.name: fresh.has_perm(UPLOAD, s) for s in (prod, lab)}
                found = effective(fresh, prod)
        # olga is an Operator narrowed to Viewer on prod-1; bare has no role (a Viewer)
        assert allowed == {"prod-1": user == root, "lab": user in (olga, root)}
        if user == olga:
            assert (found.role, found.by.value) == ("Viewer", "prod-1")
            assert found.by.created_at.tzinfo is not None


def test_the_registry_read_as_a_column_is_the_registry(django_assert_num_queries):
    _server("gpu-a", labels={"env": "prod", "zone": "b"}, api_key="k-1", require_local_worker=True)
    _server("cpu-b")
    anyone = User.objects.create_user("anyone")
    expected = servers.all()  # read alone, outside a memo
    row = User.objects.annotate(registry=servers.all_column()).get(pk=anyone.pk)
    with remembering():
        servers.remember_all(row.registry)
        with django_assert_num_queries(0):
            assert servers.all() == expected
            assert servers.get("gpu-a") == expected[2]
            assert servers.get("gpu-a").labels == {"env": "prod", "zone": "b"}
            assert servers.get("gpu-a").require_local_worker is True
            with pytest.raises(servers.UnknownServer):
                servers.get("gone")
    assert [s.name for s in expected] == ["default", "cpu-b", "gpu-a"]
