"""What the dashboard remembers about the repository: file digests and the desired load set."""

from __future__ import annotations

import uuid
from typing import Any

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
    """One saved (or found-on-disk) content of a model's config.pbtxt: the editor's history.

    ``number`` counts each model's revisions from 1 (what pages, messages and the API show);
    the primary key stays internal (URLs). It is assigned on the first save, under the model
    lock of the save path; the unique constraint refuses a duplicate instead of showing two
    revisions with one number.
    """

    class Source(models.TextChoices):
        FORM = "form", "form editor"
        TEXT = "text", "text editor"
        API = "api", "API"
        DISK = "disk", "changed on disk"
        RESTORE = "restore", "restored"

    model = models.CharField(max_length=255, db_index=True)
    number = models.PositiveIntegerField(default=0)
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
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="configrev_model_number")
        ]

    def __str__(self) -> str:
        return f"{self.model} #{self.number} {self.source} {self.sha256[:12]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.number:
            latest = ConfigRevision.objects.filter(model=self.model).aggregate(
                top=models.Max("number")
            )["top"]
            self.number = (latest or 0) + 1
        super().save(*args, **kwargs)


class Upload(models.Model):
    """One chunked, resumable upload of a model file or archive (repository_app/uploads/).

    The bytes live in the staging folder (``uploads.staging.upload_dir``) until the upload is
    published as a version folder; the staged file's size is the authoritative offset.
    """

    class State(models.TextChoices):
        RECEIVING = "receiving", "receiving"
        PROCESSING = "processing", "verifying and publishing"
        PUBLISHED = "published", "published"
        FAILED = "failed", "failed"
        ABORTED = "aborted", "aborted"
        EXPIRED = "expired", "expired"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    model = models.CharField(max_length=255, db_index=True)
    new_model = models.BooleanField(default=False)
    backend = models.CharField(max_length=64)
    # None: the next free version number, chosen when publishing.
    requested_version = models.PositiveBigIntegerField(null=True, blank=True)
    version = models.PositiveBigIntegerField(null=True, blank=True)
    filename = models.CharField(max_length=255)
    is_archive = models.BooleanField(default=False)
    is_code = models.BooleanField(default=False)
    size = models.BigIntegerField()
    received = models.BigIntegerField(default=0)
    client_sha256 = models.CharField(max_length=64, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=12, choices=State.choices, default=State.RECEIVING)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"upload {self.id} {self.model} {self.filename} {self.state}"


# --- Metrics history (repository_app/history.py) -------------------------------------------
# Times are whole epoch seconds (UTC), the start of each row's interval: bucketing for the
# charts is then integer division, the same SQL on SQLite and PostgreSQL.


class ModelMetricPoint(models.Model):
    """One model's figures over ``resolution_s`` seconds from ``ts`` (10 s, 1, 5 or 30 min)."""

    ts = models.BigIntegerField()
    resolution_s = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=255)
    requests_per_s = models.FloatField(null=True)
    failures_per_s = models.FloatField(null=True)
    # Averages per request (Triton's cumulative µs over its success count); None when idle.
    request_us = models.FloatField(null=True)
    queue_us = models.FloatField(null=True)
    compute_us = models.FloatField(null=True)
    # From Triton's latency summaries (--metrics-config summary_latencies=true); else None.
    p50_us = models.FloatField(null=True)
    p99_us = models.FloatField(null=True)
    # Inferences per execution, as the model page and Triton's docs define batch size.
    batch_size = models.FloatField(null=True)
    pending = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resolution_s", "model", "ts"], name="modelpoint_unique"
            )
        ]
        indexes = [models.Index(fields=["resolution_s", "ts"], name="modelpoint_range")]

    def __str__(self) -> str:
        return f"{self.model} @{self.ts} ({self.resolution_s} s)"


class ServerMetricPoint(models.Model):
    """Server-wide CPU figures (Triton's nv_cpu_* metrics, Linux only) over one interval."""

    ts = models.BigIntegerField()
    resolution_s = models.PositiveSmallIntegerField()
    cpu_utilization = models.FloatField(null=True)  # 0..1
    cpu_memory_used_bytes = models.FloatField(null=True)
    cpu_memory_total_bytes = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resolution_s", "ts"], name="serverpoint_unique")
        ]

    def __str__(self) -> str:
        return f"server @{self.ts} ({self.resolution_s} s)"


class GpuMetricPoint(models.Model):
    """One GPU's figures (Triton's DCGM GPU metrics, see triton/gpus.py; absent on CPU-only servers)."""

    ts = models.BigIntegerField()
    resolution_s = models.PositiveSmallIntegerField()
    gpu = models.CharField(max_length=128)  # Triton's gpu_uuid label
    utilization = models.FloatField(null=True)  # 0..1
    memory_used_bytes = models.FloatField(null=True)
    memory_total_bytes = models.FloatField(null=True)
    power_w = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resolution_s", "gpu", "ts"], name="gpupoint_unique")
        ]
        indexes = [models.Index(fields=["resolution_s", "ts"], name="gpupoint_range")]

    def __str__(self) -> str:
        return f"{self.gpu} @{self.ts} ({self.resolution_s} s)"
