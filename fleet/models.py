"""Rollouts: one load, unload or reload of a model on a set of servers (fleet/rollouts/)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from jobs.models import JobRow


class Rollout(models.Model):
    """One load, unload or reload of a model on a set of servers, chosen in one of three
    ways (``chosen`` says which, in words); one RolloutTarget per server, run at once.
    Ends "succeeded", "partial" or "failed" (``summary``: "partial: 3 loaded, 1 failed");
    nothing is retried unless a user resumes it."""

    class State(models.TextChoices):
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "succeeded"
        PARTIAL = "partial", "partial"
        FAILED = "failed", "failed"

    action = models.CharField(max_length=10)  # control.ACTIONS
    model = models.CharField(max_length=255)
    # How the servers were chosen: "every server on repository /models", "label env=prod",
    # "hand-picked: a, b".
    chosen = models.CharField(max_length=500)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    summary = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "repository_app_rollout"  # its name before it moved to the fleet app
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"rollout #{self.pk} {self.action} {self.model}: {self.state}"


class RolloutTarget(JobRow):
    """One server of a rollout, a job of the one lifecycle (`jobs.lifecycle`, run by
    `rollouts.target_job`): its state, and why it failed (``reason`` in a word:
    "unreachable", "not permitted", "no model", "not explicit", "busy", "refused",
    "failed", "cancelled", "interrupted"; ``message``: Triton's or the dashboard's text)."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="targets")
    server = models.CharField(max_length=40)
    # The server's labels when the rollout chose it, one "key=value" a line between newlines
    # ("\nenv=prod\ngpu=h200\n"): a narrowing to none on a label keeps hiding the rollout
    # once the server is removed (and its labels with it).
    labels = models.TextField(blank=True, default="")
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        db_table = "repository_app_rollouttarget"  # its name before it moved here
        ordering = ["rollout", "server"]
        constraints = [
            models.UniqueConstraint(fields=["rollout", "server"], name="rollouttarget_server")
        ]

    def __str__(self) -> str:
        return f"rollout #{self.rollout_id} on {self.server}: {self.state}"
