"""Checks: a tried request kept with its answer, run again after a change (a reload, a
rollout) or on demand, on each server that serves the model, as jobs (`check_job`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from jobs.models import JobRow


class Check(models.Model):
    """A named request to a model and the outputs it must answer with, each within its
    tolerance (``{"OUTPUT0": {"atol": 1e-6, "rtol": 1e-5}}``; integers, booleans and
    strings exactly). The request is kept in Triton's own JSON shape, random inputs as
    they were sent, so every run sends the same tensors."""

    model = models.CharField(max_length=255)
    name = models.CharField(max_length=120)
    request = models.JSONField()  # {"inputs": [{"name", "shape", "datatype", "data"}], ...}
    expected = models.JSONField()  # {output: {"datatype", "shape", "data"}}
    tolerance = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="check_model_name")]

    def __str__(self) -> str:
        return f"check {self.name!r} of {self.model}"


class CheckRun(JobRow):
    """One check run on one server: passed or not, the worst difference found, and why in
    words (``message``)."""

    # "check" would hide Model.check (the system checks).
    saved_check = models.ForeignKey(Check, on_delete=models.CASCADE, related_name="runs")
    server = models.CharField(max_length=40)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    trigger = models.CharField(max_length=120)  # "on demand", "after reload", "rollout #3"
    passed = models.BooleanField(null=True)
    worst = models.FloatField(null=True, blank=True)
    message = models.TextField(blank=True)
    # The config revision before the current one of the model's repository when the run was
    # queued (repository_app.ConfigRevision's number): what a failure offers to restore.
    restorable = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["saved_check", "server", "-id"], name="checkrun_latest")]

    def __str__(self) -> str:
        return f"{self.saved_check} on {self.server}: {self.state}"


class TraceSession(JobRow):
    """Triton's tracing turned on for one model on one server, for its next ``count``
    requests, at most until ``expires_at``: a job (`trace_job`) turns it on from the
    server's queue; Triton stops by itself after ``count`` traces; the page's Stop or the
    time limit (any worker's watchdog) turns it off. ``ended_why`` says which."""

    model = models.CharField(max_length=255)
    server = models.CharField(max_length=40)
    count = models.PositiveIntegerField()
    expires_at = models.DateTimeField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_why = models.CharField(max_length=120, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"trace of {self.model} on {self.server} ({self.count})"
