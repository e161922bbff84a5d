"""The audit trail, and the permissions that make up the roles."""

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
