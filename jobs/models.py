"""What every job row holds, whatever its kind: the fields the one lifecycle reads and
writes (`jobs.lifecycle`). A kind's own model inherits them; nothing is stored here."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.INTERRUPTED)
RESUMABLE = (JobState.FAILED, JobState.CANCELLED, JobState.INTERRUPTED)


class JobRow(models.Model):
    """A job's life: queued, claimed by one worker (recorded with its host and queue),
    beating a heartbeat while it runs, cancellable, ended once, resumable."""

    state = models.CharField(
        max_length=12, choices=JobState.choices, default=JobState.QUEUED, db_index=True
    )
    cancel_requested = models.BooleanField(default=False)
    queued_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # Where its task went and why (the server's own queue, or the default one), and which
    # worker claimed it, on which host.
    queue = models.CharField(max_length=255, blank=True)
    routing = models.TextField(blank=True)
    waiting_for_worker = models.BooleanField(default=False)
    worker = models.CharField(max_length=255, blank=True)
    worker_host = models.CharField(max_length=255, blank=True)

    class Meta:
        abstract = True
