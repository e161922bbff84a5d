"""The audit trail, the permissions that make up the roles, and the roles narrowed per
Triton server or label (ServerRole; the rule is team.narrowing)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class TeamPermission(models.Model):
    """No table: a holder for permissions that belong to no single model."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("upload_models", "Can upload data-only model files (ONNX, TensorRT, ...)"),
            ("upload_code", "Can upload Python-backend code (runs on the Triton host)"),
            ("delete_versions", "Can delete model versions and models"),
            ("manage_users", "Can manage users and their roles"),
            ("manage_servers", "Can add, edit and remove Triton servers"),
        ]

    def __str__(self) -> str:
        return "team permissions"


class AuditEvent(models.Model):
    """One change made through the dashboard. Append-only: rows are never edited or removed."""

    class Outcome(models.TextChoices):
        OK = "ok", "ok"
        FAILED = "failed", "failed"
        DENIED = "denied", "denied"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Kept as text too: the trail must still say who when the account is gone.
    username = models.CharField(max_length=150, db_index=True)
    action = models.CharField(max_length=40, db_index=True)
    model_name = models.CharField(max_length=255, blank=True, db_index=True)
    # The Triton server the action concerned ("" for account and login events).
    server = models.CharField(max_length=40, blank=True, db_index=True)
    target = models.CharField(max_length=255, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    detail = models.TextField(blank=True)
    before_sha256 = models.CharField(max_length=64, blank=True)
    after_sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.model_name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("audit events are append-only")


class AuditConcern(models.Model):
    """One server (``server:NAME``) or label (``label:KEY=VALUE``) an audit event concerns,
    as data: what a reader's narrowing to none hides is filtered on these, not on the prose
    of ``detail`` ("reload on default, t2"). Labels are the servers' labels when recorded, so
    a row stays hidden by label once its server is removed."""

    event = models.ForeignKey(AuditEvent, on_delete=models.CASCADE, related_name="concerns")
    token = models.CharField(max_length=140, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "token"], name="audit_concern_once")
        ]

    def __str__(self) -> str:
        return self.token


class ServerRole(models.Model):
    """A user's role narrowed on one Triton server (by name) or on every server with a label
    (``key=value``): to Viewer (reads only) or to none (the server does not exist for the
    user). It never widens a role: ``team.narrowing.effective`` takes the lowest."""

    class Kind(models.TextChoices):
        SERVER = "server", "server"
        LABEL = "label", "label"

    class Role(models.TextChoices):
        VIEWER = "Viewer", "viewer"
        NONE = "none", "none"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="server_roles"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # The server's name, or "key=value" of a label (checked by registry.server_rules).
    value = models.CharField(max_length=130)
    role = models.CharField(max_length=10, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["user_id", "kind", "value"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "kind", "value"], name="team_serverrole_one_per_selector"
            )
        ]

    def __str__(self) -> str:
        return f"{self.selector} → {self.role}"

    @property
    def selector(self) -> str:
        """As people write it: a server's name, or ``key=value``."""
        return self.value
