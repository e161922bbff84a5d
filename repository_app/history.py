"""Stored metrics history: what the Server page shows of the past.

Each server's poller hands every metrics scrape (every 2 s) to its `HistoryRecorder`, which
writes one row per model, one server row and one row per GPU for each closed 10 s interval;
every row names its server, and rolling up, pruning and reading keep to one server. Once a
minute `maintain()` rolls every complete minute of 10 s rows into 1-minute rows, then
deletes 10 s rows older than HISTORY_FINE_RETENTION_H and every other row older than
HISTORY_RETENTION_DAYS, so the tables stay bounded.

1-minute rows are written as soon as a minute is complete, not only once its 10 s rows
expire, and are rolled up again into 5- and 30-minute rows (kept as long): the 24 h chart
reads 288 rows per model and the 7 / 14 day charts 336 and 672, where grouping 1-minute
rows would read 1,440 / 10,080 / 20,160 per model (50 models' 14 days: a million rows per
request). The extra rows cost a quarter more than the 1-minute rows alone.

Times are epoch seconds, the start of each row's interval. Aggregating rows into a coarser
interval (and into a chart's buckets) is one SQL GROUP BY: means of the per-interval
figures over the intervals that have them (idle intervals have no queue time, and do not
pull the mean to 0), and the maximum for p99.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from itertools import groupby
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db import connections, models
from django.db.models import Avg, F, Max, Min, Q
from django.db.models.functions import Round
from django.urls import reverse

from registry.servers import Server, with_server
from triton_api.prometheus import MetricSample
from triton_api.statistics import (
    counters_before,
    model_counters,
    model_gauges,
    model_rates,
    server_gauges,
)

from .models import ConfigRevision, GpuMetricPoint, ModelMetricPoint, ServerMetricPoint

log = logging.getLogger(__name__)

FINE_S = 10
COARSE_S = 60
# (source, target) resolutions, rolled in this order; each target divides the next.
ROLLUPS = ((FINE_S, COARSE_S), (COARSE_S, 300), (300, 1800))
TIERS = (FINE_S, COARSE_S, 300, 1800)
# A minute is rolled up once its last 10 s interval has surely been written (the recorder
# closes an interval at the first scrape after it, 2 s later with the default poll).
SETTLE_S = 30
MAINTAIN_EVERY_S = 60

MODEL_FIELDS = (
    "requests_per_s",
    "failures_per_s",
    "request_us",
    "queue_us",
    "compute_us",
    "p50_us",
    "p99_us",
    "batch_size",
    "pending",
)
SERVER_FIELDS = ("cpu_utilization", "cpu_memory_used_bytes", "cpu_memory_total_bytes")
GPU_FIELDS = ("utilization", "memory_used_bytes", "memory_total_bytes", "power_w")
# The worst interval's p99 stands for a longer one; everything else is a mean.
MAX_FIELDS = {"p99_us"}


@dataclass(frozen=True)
class Series:
    """One stored table: its model, the column that names a series, its value columns."""

    model: type[models.Model]
    key: str | None
    fields: tuple[str, ...]


MODEL_SERIES = Series(ModelMetricPoint, "model", MODEL_FIELDS)
SERVER_SERIES = Series(ServerMetricPoint, None, SERVER_FIELDS)
GPU_SERIES = Series(GpuMetricPoint, "gpu", GPU_FIELDS)
ALL_SERIES = (MODEL_SERIES, SERVER_SERIES, GPU_SERIES)


# --- Recording ---------------------------------------------------------------------------


@dataclass
class _Scrape:
    time: float
    counters: dict[str, dict[str, float]]


@dataclass
class _Means:
    """Running sums of gauges within the open interval: key -> field -> (sum, count)."""

    sums: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, key: str, values: dict[str, float]) -> None:
        row = self.sums.setdefault(key, {})
        for name, value in values.items():
            acc = row.setdefault(name, [0.0, 0.0])
            acc[0] += value
            acc[1] += 1

    def get(self, key: str) -> dict[str, float]:
        return {n: s / c for n, (s, c) in self.sums.get(key, {}).items() if c}


class HistoryRecorder:
    """Turns scrapes into 10 s rows. Counter rates span from the last scrape of the previous
    interval to the last scrape of this one, so no increment is lost between intervals;
    gauges are the mean of the interval's scrapes."""

    def __init__(self, server: str, resolution_s: int = FINE_S) -> None:
        self.server = server
        self.resolution_s = resolution_s
        self.bucket: int | None = None
        self.base: _Scrape | None = None  # the last scrape before the open interval
        self.last: _Scrape | None = None  # the open interval's latest scrape
        self._reset_gauges()

    def _reset_gauges(self) -> None:
        self.model_gauges = _Means()
        self.cpu = _Means()
        self.gpus = _Means()

    def observe(self, now: float, samples: list[MetricSample]) -> int:
        """Take one scrape made at `now` (epoch seconds); returns the rows written."""
        bucket = int(now // self.resolution_s) * self.resolution_s
        written = 0
        if self.bucket is not None and bucket != self.bucket:
            written = self._close()
            # After a gap (poller or Triton down), the counters' increase belongs to no
            # interval in particular: start again from this scrape.
            skipped = bucket - self.bucket > self.resolution_s
            self.base = None if skipped else self.last
            self._reset_gauges()
        scrape = _Scrape(now, model_counters(samples))
        if self.base is None:
            self.base = scrape
        self.bucket, self.last = bucket, scrape
        for name, values in model_gauges(samples).items():
            self.model_gauges.add(name, values)
        cpu, gpus = server_gauges(samples)
        if cpu:
            self.cpu.add("", cpu)
        for gpu, values in gpus.items():
            self.gpus.add(gpu, values)
        return written

    def _close(self) -> int:
        assert self.bucket is not None and self.base is not None and self.last is not None
        ts, res, server = self.bucket, self.resolution_s, self.server
        span = self.last.time - self.base.time
        rows: list[ModelMetricPoint] = []
        for name in sorted(set(self.last.counters) | set(self.model_gauges.sums)):
            figures: dict[str, Any] = dict.fromkeys(MODEL_FIELDS)
            if name in self.last.counters:
                before = counters_before(self.base.counters, name)
                figures.update(model_rates(before, self.last.counters[name], span))
            figures.update(self.model_gauges.get(name))
            rows.append(
                ModelMetricPoint(server=server, ts=ts, resolution_s=res, model=name, **figures)
            )
        ModelMetricPoint.objects.bulk_create(rows, ignore_conflicts=True)
        written = len(rows)
        cpu = self.cpu.get("")
        if cpu:
            ServerMetricPoint.objects.bulk_create(
                [ServerMetricPoint(server=server, ts=ts, resolution_s=res, **cpu)],
                ignore_conflicts=True,
            )
            written += 1
        gpu_rows = []
        for gpu in sorted(self.gpus.sums):
            values: dict[str, float | None] = dict(self.gpus.get(gpu))
            values["power_w"] = values.pop("power_usage", None)  # Triton reports watts
            gpu_rows.append(
                GpuMetricPoint(server=server, ts=ts, resolution_s=res, gpu=gpu, **values)
            )
        # Two pollers overlapping for one interval (a lock hand-over) write it once.
        GpuMetricPoint.objects.bulk_create(gpu_rows, ignore_conflicts=True)
        return written + len(gpu_rows)


# --- Roll-up and pruning -------------------------------------------------------------------


def _aggregated(
    series: Series, server: str, resolution_s: int, since: int, until: int, step: int
) -> Iterable[dict[str, Any]]:
    """Rows of one server and resolution in [since, until), grouped into `step`-second
    buckets."""
    keys = [series.key] if series.key else []
    aggregates = {name: (Max(name) if name in MAX_FIELDS else Avg(name)) for name in series.fields}
    return (
        series.model.objects.filter(
            server=server, resolution_s=resolution_s, ts__gte=since, ts__lt=until
        )
        .annotate(bucket=F("ts") / step * step)
        .values(*keys, "bucket")
        .annotate(**aggregates)
        .order_by(*keys, "bucket")
    )


def roll_up(now: float, server: str) -> int:
    """Roll every complete interval of each tier of one server into the next (10 s -> 1 min
    -> 5 min -> 30 min) where not rolled up yet; returns how many rows it wrote."""
    end = int(now - SETTLE_S) // COARSE_S * COARSE_S
    written = 0
    for source, target in ROLLUPS:
        # A target interval is complete once every source row in it is written.
        end = end // target * target
        oldest = end - settings.HISTORY_RETENTION_DAYS * 86400
        for series in ALL_SERIES:
            written += _roll(series, server, source, target, max(oldest, 0), end)
    return written


def _roll(series: Series, server: str, source: int, target: int, oldest: int, end: int) -> int:
    manager = series.model.objects
    last = manager.filter(server=server, resolution_s=target).aggregate(t=Max("ts"))["t"]
    if last is not None:
        start = last + target
    else:
        first = manager.filter(server=server, resolution_s=source).aggregate(t=Min("ts"))["t"]
        if first is None:
            return 0
        start = first // target * target
    start = max(start, oldest)
    if start >= end:
        return 0
    rows = [
        series.model(
            server=server,
            ts=row.pop("bucket"),
            resolution_s=target,
            **({series.key: row.pop(series.key)} if series.key else {}),
            **row,
        )
        for row in _aggregated(series, server, source, start, end, target)
    ]
    manager.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    return len(rows)


def prune(now: float, server: str) -> int:
    """Delete one server's 10 s rows past HISTORY_FINE_RETENTION_H and its coarser rows
    past HISTORY_RETENTION_DAYS; returns how many. (A removed server's rows are pruned only
    while a server of that name is polled.)"""
    fine_cutoff = int(now) - settings.HISTORY_FINE_RETENTION_H * 3600
    coarse_cutoff = int(now) - settings.HISTORY_RETENTION_DAYS * 86400
    deleted = 0
    for series in ALL_SERIES:
        deleted += (
            series.model.objects.filter(server=server)
            .filter(
                Q(resolution_s=FINE_S, ts__lt=fine_cutoff)
                | Q(resolution_s__gt=FINE_S, ts__lt=coarse_cutoff)
            )
            .delete()[0]
        )
    return deleted


def maintain(now: float, server: str) -> tuple[int, int]:
    """Roll up, then prune (in that order: a 10 s row is rolled up before it may go)."""
    return roll_up(now, server), prune(now, server)


# --- Reading, for the Server page ----------------------------------------------------------

# Range -> seconds shown. Each is drawn with about 360 points per series.
RANGES = {
    "live": 15 * 60,
    "1h": 3600,
    "6h": 6 * 3600,
    "24h": 24 * 3600,
    "7d": 7 * 86400,
    "14d": 14 * 86400,
}
POINTS = 360
_STEPS = (10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)


def step_for(span_s: int) -> int:
    """The chart bucket for a range: the smallest round step giving at most POINTS points."""
    return next((s for s in _STEPS if span_s / s <= POINTS), _STEPS[-1])


def _read(
    series: Series, server: str, resolution_s: int, since: int, until: int, step: int
) -> list[tuple[Any, ...]]:
    """(key, bucket, *fields) tuples (no key for the server table), ordered by key and time,
    values rounded in SQL. Read through the cursor: Django's per-value converters and row
    dicts cost more than the query at 18,000 rows (50 models x 360 points)."""
    keys = [series.key] if series.key else []
    rows = series.model.objects.filter(
        server=server, resolution_s=resolution_s, ts__gte=since, ts__lt=until
    )
    if step == resolution_s:  # one row per point: no grouping
        query = rows.order_by(*keys, "ts").values_list(
            *keys, "ts", *(Round(name, 3) for name in series.fields)
        )
    else:
        aggregates = {
            name: Round(Max(name) if name in MAX_FIELDS else Avg(name), 3) for name in series.fields
        }
        query = (
            rows.annotate(bucket=F("ts") / step * step)
            .values(*keys, "bucket")
            .annotate(**aggregates)
            .order_by(*keys, "bucket")
            .values_list(*keys, "bucket", *series.fields)
        )
    sql, params = query.query.sql_with_params()
    with connections[query.db].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _columns(
    rows: list[tuple[Any, ...]], keyed: bool, fields: tuple[str, ...], step: int
) -> dict[str, dict[str, list[Any]]]:
    """Rows -> {series: {"t": [...], field: [...]}}, with a None point in each gap longer
    than a step (Plotly then breaks the line instead of drawing across the gap), and
    fields that have no value at all left out (p50/p99 without summaries, power)."""
    if not rows:
        return {}
    groups = groupby(rows, key=itemgetter(0)) if keyed else [("", iter(rows))]
    out: dict[str, dict[str, list[Any]]] = {}
    for name, group in groups:
        columns = list(zip(*group, strict=True))[1 if keyed else 0 :]
        t = [int(v) for v in columns[0]]
        values = [list(c) for c in columns[1:]]
        gaps = [i for i in range(1, len(t)) if t[i] - t[i - 1] > step]
        for i in reversed(gaps):
            t.insert(i, t[i - 1] + step)
            for column in values:
                column.insert(i, None)
        col: dict[str, list[Any]] = {"t": t}
        for field_name, column in zip(fields, values, strict=True):
            first = next((v for v in column if v is not None), None)
            if first is None:
                continue
            if isinstance(first, Decimal):  # PostgreSQL rounds as numeric
                column = [None if v is None else float(v) for v in column]
            col[field_name] = column
        out[name] = col
    return out


def epoch(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


# What other apps add to a server's history (profiler_app: its sweeps, start to end); the
# repository app knows none of them. A source gets the range, the server and a row limit.
MarkerSource = Callable[[datetime, datetime, Server, int], list[dict[str, Any]]]
marker_sources: list[MarkerSource] = []


def markers(since: float, until: float, server: Server, limit: int = 200) -> list[dict[str, Any]]:
    """The marks on the server's history in the range: the config changes of its
    repository, and what ``marker_sources`` add (its sweeps)."""
    from registry.servers import repository_key

    start = datetime.fromtimestamp(since, UTC)
    end = datetime.fromtimestamp(until, UTC)
    out = [mark for source in marker_sources for mark in source(start, end, server, limit)]
    # The file as first read (on opening the editor, or before the first save) is no
    # change: no marker (the save right after it has its own).
    revisions = ConfigRevision.objects.filter(
        repository=repository_key(server), created_at__gte=start, created_at__lte=end
    ).exclude(source=ConfigRevision.Source.DISK, parent_sha256="")
    for rev in revisions.order_by("-created_at")[:limit]:
        out.append(
            {
                "kind": "config",
                "t": epoch(rev.created_at),
                "end": None,
                "model": rev.model,
                "label": f"{rev.model} config #{rev.number} ({rev.source_label})",
                "url": with_server(reverse("config_history", args=[rev.model]), server),
            }
        )
    out.sort(key=lambda m: m["t"] or 0)
    return out


def history_json(range_key: str, now: float, server: Server) -> dict[str, Any]:
    """One server's stored history of one range (a key of RANGES) up to `now`, column by
    column."""
    span = RANGES[range_key]
    step = step_for(span)
    until = int(now)
    since = until - span
    # The coarsest stored tier that fits the step (10 s rows only within their retention).
    fine_kept = span <= settings.HISTORY_FINE_RETENTION_H * 3600
    resolution = max(
        (t for t in TIERS if step % t == 0 and (t != FINE_S or fine_kept)), default=COARSE_S
    )
    step = max(step, resolution)
    since = since // step * step

    def read(series: Series) -> dict[str, dict[str, list[Any]]]:
        rows = _read(series, server.name, resolution, since, until + step, step)
        return _columns(rows, series.key is not None, series.fields, step)

    cpu = read(SERVER_SERIES).get("", {"t": []})
    gpus = read(GPU_SERIES)
    return {
        "range": range_key,
        "since": since,
        "until": until,
        "step_s": step,
        "resolution_s": resolution,
        "models": read(MODEL_SERIES),
        "server": cpu,
        "cpu_metrics_present": len(cpu) > 1,
        "gpus": gpus,
        "gpu_metrics_present": bool(gpus),
        "markers": markers(since, now, server),
    }
