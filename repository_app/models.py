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
