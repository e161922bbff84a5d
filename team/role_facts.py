"""What a user's role checks read (their permissions, their groups and their narrowings),
read as columns of a row that a step of a long action reads anyway (an upload chunk's
upload: repository_app.uploads.chunks), then remembered where the checks look for them:
ModelBackend's permission cache on the user, and the step's memo (common.request_memo).

One query instead of three; the checks themselves are unchanged, and each step still reads
the facts afresh, so a role changed or narrowed meanwhile holds from the next step.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import Group

from common.json_rows import JSONRows, decode
from common.request_memo import remember

from .backends import permissions_of
from .models import ServerRole
from .narrowing import NARROWINGS_MEMO
from .roles import GROUPS_MEMO

PERMISSIONS, GROUPS, NARROWINGS = "role_permissions", "role_groups", "role_narrowings"


def columns(user: Any) -> dict[str, JSONRows]:
    """Annotations for any queryset: the user's role facts, each as a JSON array."""
    return {
        PERMISSIONS: JSONRows(
            permissions_of(user), {"app": "content_type__app_label", "code": "codename"}
        ),
        GROUPS: JSONRows(Group.objects.filter(user=user.pk).order_by(), {"name": "name"}),
        NARROWINGS: JSONRows(
            ServerRole.objects.filter(user_id=user.pk).order_by(),
            [f.attname for f in ServerRole._meta.concrete_fields],
        ),
    }


def remember_read(user: Any, row: Any) -> None:
    """Remember the facts ``row`` carries (annotated with ``columns(user)``) for ``user``,
    inside a memo (``remembering``); ModelBackend's cache holds them for this user object."""
    if user.is_active and not user.is_anonymous:  # all_permissions' own rule
        pairs = json.loads(getattr(row, PERMISSIONS))
        user._perm_cache = {f"{p['app']}.{p['code']}" for p in pairs}
    remember((GROUPS_MEMO, user.pk), {g["name"] for g in json.loads(getattr(row, GROUPS))})
    narrowings = sorted(decode(ServerRole, getattr(row, NARROWINGS)), key=lambda n: n.pk)
    remember((NARROWINGS_MEMO, user.pk), narrowings)
