"""What the dashboard remembers about the repository: file digests and the desired load set."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class FileDigest(models.Model):
    """sha256 of a model file, computed once and reused while size and mtime are unchanged."""

    path = models.CharField(max_length=1024, unique=True)
    size = models.BigIntegerField()
    mtime_ns = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    computed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.path} {self.sha256[:12]}"


class ModelIntent(models.Model):
    """Whether a user last asked for a model to be loaded: Triton in explicit mode forgets
    runtime loads when it restarts, and this is the set "restore previous loads" brings back."""

    name = models.CharField(max_length=255, unique=True)
    loaded = models.BooleanField()
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        permissions = [("control_models", "Can load, unload and reload models on Triton")]

    def __str__(self) -> str:
        return f"{self.name}: {'loaded' if self.loaded else 'unloaded'}"


class ConfigRevision(models.Model):
    """One saved (or found-on-disk) content of a model's config.pbtxt: the editor's history."""

    class Source(models.TextChoices):
        FORM = "form", "form editor"
        TEXT = "text", "text editor"
        API = "api", "API"
        DISK = "disk", "changed on disk"
        RESTORE = "restore", "restored"

    model = models.CharField(max_length=255, db_index=True)
    text = models.TextField()
    sha256 = models.CharField(max_length=64)
    # The sha256 of the file this revision replaced ("" for the first one seen).
    parent_sha256 = models.CharField(max_length=64, blank=True, default="")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    message = models.CharField(max_length=500, blank=True, default="")
    source = models.CharField(max_length=10, choices=Source.choices)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["model", "-id"], name="configrev_model_latest")]

    def __str__(self) -> str:
        return f"{self.model} #{self.pk} {self.source} {self.sha256[:12]}"
