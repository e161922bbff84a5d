"""Perf sweeps as database rows: the sweep, its points, and one slot per Triton server."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from jobs.models import FINISHED, RESUMABLE, JobRow, JobState
from repository_app import events


class Sweep(JobRow):
    """One job of the benchmark queue (`profiler_app.jobs`, on the one lifecycle's fields,
    `jobs.models.JobRow`) on one Triton server: a perf sweep (kind "sweep"), or the queue's
    side of a config search (kind "search", whose `Search` row holds the rest)."""

    class Kind(models.TextChoices):
        SWEEP = "sweep", "perf sweep"
        SEARCH = "search", "config search"

    State = JobState

    class Engine(models.TextChoices):
        BUILTIN = "builtin", "built-in"
        PERF_ANALYZER = "perf_analyzer", "perf_analyzer"

    FINISHED = FINISHED
    RESUMABLE = RESUMABLE

    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.SWEEP, db_index=True)
    model = models.CharField(max_length=255, db_index=True)
    version = models.CharField(max_length=32, blank=True)
    # The Triton server's name (registry.servers): at most one job runs per server at
    # a time.
    server = models.CharField(max_length=255)
    # What the server was when the job last started (repository_app.server_facts.
    # describe: Triton version, GPU count and uuids), so sweeps can be compared later.
    server_facts = models.JSONField(default=dict, blank=True)
    config_sha256 = models.CharField(max_length=64, blank=True)
    config_text = models.TextField(blank=True)
    params = models.JSONField(default=dict)
    engine = models.CharField(max_length=16, choices=Engine.choices, default=Engine.BUILTIN)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    command = models.TextField(blank=True)  # perf_analyzer's exact command line
    levels_total = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    name = models.CharField(max_length=120, blank=True)  # optional, e.g. "after the fp16 change"
    note = models.TextField(blank=True)
    # The model's kind when the sweep was created (`ModelKind.label`, e.g. "sequence
    # (direct)", from the config Triton served); "" where it was not read.
    model_kind = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-id"]
        permissions = [("run_sweeps", "Can run and cancel perf sweeps")]
        indexes = [models.Index(fields=["server", "state"])]

    def __str__(self) -> str:
        return f"sweep #{self.pk} {self.model} ({self.state})"

    @property
    def group(self) -> str:
        return events.sweep_group(self.pk)

    @property
    def finished(self) -> bool:
        return self.state in self.FINISHED

    @property
    def mode(self) -> str:
        return str(self.params.get("mode", "concurrency"))

    @property
    def range_text(self) -> str:
        p: dict[str, Any] = self.params
        return f"{p.get('start', 1):g}:{p.get('end', 1):g}:{p.get('step', 1):g}"

    @property
    def level_label(self) -> str:
        """What a level is, for axes and table heads."""
        return "request rate (infer/s)" if self.mode == "request_rate" else "concurrency"

    @property
    def rounds(self) -> int:
        return max(1, int(self.params.get("rounds") or 1))

    @property
    def sequence(self) -> bool:
        """Whether the model was a sequence model (a stored `model_kind`)."""
        return self.model_kind.startswith("sequence")

    @property
    def title(self) -> str:
        """'#12 after the fp16 change' or '#12'."""
        return f"#{self.pk} {self.name}" if self.name else f"#{self.pk}"

    @property
    def input_data_text(self) -> str:
        """ "random", "zeros" or "JSON, N samples" (the document itself is stored)."""
        data = self.params.get("input_data", "random")
        if isinstance(data, dict):
            samples = data.get("data")
            return f"JSON, {len(samples) if isinstance(samples, list) else 0} samples"
        return str(data)


class SweepPoint(models.Model):
    """A measurement window (window >= 0) or a level's summary (window = LEVEL)."""

    LEVEL = -1

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="points")
    level = models.FloatField()
    window = models.IntegerField()
    throughput = models.FloatField(default=0.0)  # infer/s
    requests = models.IntegerField(default=0)
    errors = models.IntegerField(default=0)
    duration_s = models.FloatField(default=0.0)
    avg_us = models.FloatField(null=True, blank=True)
    p50_us = models.FloatField(null=True, blank=True)
    p90_us = models.FloatField(null=True, blank=True)
    p95_us = models.FloatField(null=True, blank=True)
    p99_us = models.FloatField(null=True, blank=True)
    server_request_us = models.FloatField(null=True, blank=True)
    queue_us = models.FloatField(null=True, blank=True)
    compute_input_us = models.FloatField(null=True, blank=True)
    compute_infer_us = models.FloatField(null=True, blank=True)
    compute_output_us = models.FloatField(null=True, blank=True)
    stable = models.BooleanField(null=True, blank=True)  # level rows only
    extra = models.JSONField(default=dict, blank=True)
    recorded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["level", "window"]
        constraints = [
            models.UniqueConstraint(
                fields=["sweep", "level", "window"], name="sweep_point_unique_level_window"
            )
        ]

    def __str__(self) -> str:
        return f"sweep #{self.sweep_id} level {self.level:g} window {self.window}"


class SweepSlot(models.Model):
    """The one running job of a Triton server (by name); claimed and released by conditional
    UPDATEs."""

    server = models.CharField(max_length=255, unique=True)
    sweep = models.ForeignKey(Sweep, null=True, blank=True, on_delete=models.SET_NULL)
    claimed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.server}: {self.sweep_id or 'free'}"


class Search(models.Model):
    """A config search ("Find best config"): candidates loaded as overrides and measured.

    It runs as ONE job of the queue (`profiler_app.jobs`): `sweep` is its job row, of kind
    "search" (queued order, the server's `SweepSlot`, heartbeat, cancel flag, watchdog).
    The search's state is that job's state.
    """

    class Mode(models.TextChoices):
        GRID = "grid", "exhaustive grid"
        QUICK = "quick", "quick (hill climbing)"

    class Objective(models.TextChoices):
        MAX_THROUGHPUT = "max_throughput", "max throughput within the budget"
        MIN_LATENCY = "min_latency", "min latency at a throughput floor"
        # Decoupled models (over gRPC streams): responses/s, or tokens/s with a token output.
        MAX_RESPONSE_THROUGHPUT = "max_response_throughput", "max response throughput"
        # The requests/s that met every goodput objective (AIPerf's goodput).
        MAX_GOODPUT = "max_goodput", "max goodput"

    sweep = models.OneToOneField(Sweep, on_delete=models.CASCADE, related_name="search")
    model = models.CharField(max_length=255, db_index=True)
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.QUICK)
    objective = models.CharField(
        max_length=32, choices=Objective.choices, default=Objective.MAX_THROUGHPUT
    )
    space = models.JSONField(default=dict)
    constraints = models.JSONField(default=dict)
    baseline = models.JSONField(default=dict)  # the current config's knobs
    max_runs = models.PositiveIntegerField(null=True, blank=True)  # quick mode's budget
    was_loaded = models.BooleanField(default=True)  # restore: reload the saved config or unload
    restore_pending = models.BooleanField(default=False)
    restore_message = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)  # ranking and recommendation
    # The Triton that ran it (name, version, address, GPUs), recorded when the search starts.
    environment = models.JSONField(default=dict, blank=True)
    applied_key = models.CharField(max_length=255, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"search #{self.pk} {self.model}"


class SearchCandidate(models.Model):
    """One candidate config of a search and what was measured for it."""

    class State(models.TextChoices):
        MEASURING = "measuring"
        MEASURED = "measured"
        FAILED = "failed"  # Triton refused the config, or requests failed

    search = models.ForeignKey(Search, on_delete=models.CASCADE, related_name="candidates")
    key = models.CharField(max_length=255)
    seq = models.PositiveIntegerField(default=0)  # order of measurement, from 1
    knobs = models.JSONField(default=dict)
    baseline = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.MEASURING)
    levels = models.JSONField(default=list)  # per concurrency: throughput, latencies
    # Re-measurements side by side with the other top candidates, one entry per round:
    # {"round": n, "levels": [...], "gpu_memory_bytes": ...} (see runner.confirm).
    rounds = models.JSONField(default=list, blank=True)
    gpu_memory_bytes = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    measured_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["seq", "id"]
        constraints = [
            models.UniqueConstraint(fields=["search", "key"], name="search_candidate_unique_key")
        ]

    def __str__(self) -> str:
        return f"search #{self.search_id} {self.key} ({self.state})"
