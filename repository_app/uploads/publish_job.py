"""An upload's verification and publish, started without ``?wait`` (the upload page), as a
job of the one lifecycle.

`publish.start_complete` marks the upload PROCESSING and queues a `PublishJob` on the
upload's server's queue; a Celery worker there (it sees the staging folder beside the
repository) claims it and runs `publish.complete`, which records the outcome on the upload
row and in the audit trail. A worker that dies mid-publish leaves a job that any worker's
watchdog declares interrupted; the upload is then settled as the startup reconciler would:
published when its version folder reached the repository, else failed.
"""

from __future__ import annotations

import contextlib

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from jobs import lifecycle
from jobs.lifecycle import Heartbeat, Outcome
from jobs.models import JobState
from jobs.queues import Route
from registry import servers

from ..models import PublishJob, Upload
from . import publish, reconcile
from .staging import UploadError


class PublishKind(lifecycle.BaseKind):
    """The lifecycle's view of a `PublishJob` (the upload's own lock is taken by the
    publish; the upload's page follows the upload row, which `publish.complete` keeps)."""

    name = "publish"
    noun = "upload publish"
    resume_hint = "is not offered: upload again"
    model = PublishJob

    def rows(self) -> QuerySet[PublishJob]:
        return PublishJob.objects.select_related("upload")

    def route(self, job: PublishJob) -> Route:
        return servers.job_route(job.upload.server)

    def time_limits(self, job: PublishJob) -> tuple[int, int]:
        # Hashing and extracting scale with the size: a minute per GiB, and a floor.
        soft = 300 + int(job.upload.size / 1024**3 * 60)
        return soft, soft + 60

    def run(self, job: PublishJob, heartbeat: Heartbeat) -> Outcome:
        user = get_user_model().objects.filter(pk=job.user_id).first() if job.user_id else None
        try:
            publish.complete(job.upload, user, already_marked=True)
        except UploadError as exc:  # recorded on the upload row and in the audit trail
            return Outcome(JobState.FAILED, exc.message)
        return Outcome(JobState.SUCCEEDED)

    def ended(self, job: PublishJob, *, by_worker: bool) -> None:
        if by_worker:
            return
        upload = Upload.objects.filter(pk=job.upload_id, state=Upload.State.PROCESSING).first()
        if upload is not None:
            with contextlib.suppress(UploadError, OSError):
                reconcile.settle_processing(upload)


KIND = lifecycle.register(PublishKind())
