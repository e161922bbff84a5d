"""What the repository app remembers: file digests, the desired load set per server, model
actions, config history per repository, uploads and their publishes, and the metrics
history. The servers themselves are the registry's (registry.models)."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from jobs.models import JobRow

DEFAULT_SERVER = "default"  # the server the TRITON_* settings define (registry.servers)


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
    """Whether a user last asked for a model to be loaded on a server: Triton in explicit mode
    forgets runtime loads when it restarts, and this is the set "restore previous loads"
    brings back, per server."""

    server = models.CharField(max_length=40, default=DEFAULT_SERVER)
    name = models.CharField(max_length=255)
    loaded = models.BooleanField()
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        permissions = [("control_models", "Can load, unload and reload models on Triton")]
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="modelintent_server_name")
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.name}: {'loaded' if self.loaded else 'unloaded'}"


class ControlAction(JobRow):
    """One load, unload or reload that a page, the API (without ``?wait``) or "restore
    previous loads" started: a job of the one lifecycle (`jobs.lifecycle`, run by
    `repository_app.control_job` on a worker of the server's queue). The model's claim is
    taken when it is asked for (``claim_token``: the Redis key's value, so that the worker
    that ends it gives it back)."""

    server = models.CharField(max_length=40)
    model = models.CharField(max_length=255)
    action = models.CharField(max_length=10)  # control.ACTIONS
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    claim_token = models.CharField(max_length=300, blank=True)
    ok = models.BooleanField(null=True)  # None until Triton answered
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.action} of {self.model} on {self.server}: {self.state}"


class ConfigRevision(models.Model):
    """One saved (or found-on-disk) content of a model's config.pbtxt: the editor's history.

    History is per model of a repository: ``repository`` is ``servers.repository_key`` ("" for
    the environment's MODEL_REPOSITORY), so servers sharing a repository share its history.
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

    repository = models.CharField(max_length=1024, blank=True, default="")
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
        indexes = [
            models.Index(fields=["repository", "model", "-id"], name="configrev_repo_model_latest")
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["repository", "model", "number"], name="configrev_repo_model_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model} #{self.number} {self.source} {self.sha256[:12]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.number:
            latest = ConfigRevision.objects.filter(
                repository=self.repository, model=self.model
            ).aggregate(top=models.Max("number"))["top"]
            self.number = (latest or 0) + 1
        super().save(*args, **kwargs)

    @property
    def first_seen(self) -> bool:
        """The file as the dashboard first read it (on opening the editor, or just before
        the first save): a starting point, not a change made on disk."""
        return self.source == self.Source.DISK and not self.parent_sha256

    @property
    def source_label(self) -> str:
        return "first seen" if self.first_seen else str(self.get_source_display())


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
    # The server whose repository the upload goes to (its staging folder is beside it).
    server = models.CharField(max_length=40, default=DEFAULT_SERVER)
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


class PublishJob(JobRow):
    """The verification and publish of a fully received upload, started without ``?wait``
    (the upload page): a job of the one lifecycle (`jobs.lifecycle`, run by
    `uploads.publish_job` on a worker of the upload's server's queue, which sees the
    staging folder beside the repository)."""

    upload = models.ForeignKey(Upload, on_delete=models.CASCADE, related_name="publishes")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"publish of upload {self.upload_id}: {self.state}"


class MetricPoint(models.Model):
    """What every metrics-history row has: its server and its interval, ``resolution_s``
    seconds from ``ts`` (10 s, 1, 5 or 30 min)."""

    server = models.CharField(max_length=40, default=DEFAULT_SERVER)
    ts = models.BigIntegerField()
    resolution_s = models.PositiveSmallIntegerField()

    class Meta:
        abstract = True


class ModelMetricPoint(MetricPoint):
    """One model's figures over one interval."""

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
                fields=["server", "resolution_s", "model", "ts"], name="modelpoint_server_unique"
            )
        ]
        indexes = [
            models.Index(fields=["server", "resolution_s", "ts"], name="modelpoint_server_range")
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.model} @{self.ts} ({self.resolution_s} s)"


class ServerMetricPoint(MetricPoint):
    """Server-wide CPU figures (Triton's nv_cpu_* metrics, Linux only) over one interval."""

    cpu_utilization = models.FloatField(null=True)  # 0..1
    cpu_memory_used_bytes = models.FloatField(null=True)
    cpu_memory_total_bytes = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["server", "resolution_s", "ts"], name="serverpoint_server_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.server} @{self.ts} ({self.resolution_s} s)"


class GpuMetricPoint(MetricPoint):
    """One GPU's figures (Triton's DCGM GPU metrics, see triton/gpus.py; absent on CPU-only servers)."""

    gpu = models.CharField(max_length=128)  # Triton's gpu_uuid label
    utilization = models.FloatField(null=True)  # 0..1
    memory_used_bytes = models.FloatField(null=True)
    memory_total_bytes = models.FloatField(null=True)
    power_w = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["server", "resolution_s", "gpu", "ts"], name="gpupoint_server_unique"
            )
        ]
        indexes = [
            models.Index(fields=["server", "resolution_s", "ts"], name="gpupoint_server_range")
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.gpu} @{self.ts} ({self.resolution_s} s)"
