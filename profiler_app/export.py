"""A stored sweep as perf_analyzer's CSV or as JSON, and config diffs between sweeps."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from . import sweeps
from .engine import stats
from .engine.loadgen import LevelResult, ServerBreakdown, SweepResult
from .engine.perf_analyzer import export_csv
from .models import Sweep, SweepPoint


def _latency(p: SweepPoint) -> stats.LatencySummary | None:
    if p.avg_us is None or p.p50_us is None:
        return None
    return stats.LatencySummary(
        count=p.requests,
        avg_us=p.avg_us,
        std_us=0.0,
        p50_us=p.p50_us,
        p90_us=p.p90_us or 0.0,
        p95_us=p.p95_us or 0.0,
        p99_us=p.p99_us or 0.0,
    )


def _server(p: SweepPoint) -> ServerBreakdown | None:
    if p.server_request_us is None:
        return None
    return ServerBreakdown(
        request_count=p.requests,
        inference_count=p.requests,
        execution_count=p.requests,
        request_us=p.server_request_us,
        queue_us=p.queue_us or 0.0,
        compute_input_us=p.compute_input_us or 0.0,
        compute_infer_us=p.compute_infer_us or 0.0,
        compute_output_us=p.compute_output_us or 0.0,
    )


def sweep_result(sweep: Sweep) -> SweepResult:
    """The stored level rows as the engine's SweepResult (levels only, no raw windows)."""
    levels = [
        LevelResult(
            level=p.level,
            windows=[],
            stable=bool(p.stable),
            throughput=p.throughput,
            latency=_latency(p),
            server=_server(p),
            throughput_spread=p.extra.get("throughput_spread") or 0.0,
            latency_spread=p.extra.get("latency_spread") or 0.0,
            errors=p.errors,
            client_cpu_us=p.extra.get("client_cpu_us") or 0.0,
            over_threshold=bool(p.extra.get("over_threshold")),
            cancelled=bool(p.extra.get("cancelled")),
        )
        for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL)
    ]
    return SweepResult(sweeps.params_of(sweep), levels, cancelled=sweep.state == "cancelled")


def to_csv(sweep: Sweep) -> str:
    """perf_analyzer's --verbose-csv columns, µs, sorted by level."""
    return export_csv(sweep_result(sweep))


def to_json(sweep: Sweep) -> dict[str, Any]:
    data = sweeps.snapshot(sweep.pk) or {}
    data.pop("group", None)
    data.pop("seq", None)
    data["sweep"]["config_text"] = sweep.config_text
    return data


def config_diff(base: Sweep, other: Sweep) -> str:
    """Unified diff of the config.pbtxt each sweep started with ('' when identical)."""
    return "".join(
        difflib.unified_diff(
            base.config_text.splitlines(keepends=True),
            other.config_text.splitlines(keepends=True),
            fromfile=f"sweep #{base.pk} config.pbtxt ({base.config_sha256[:12]})",
            tofile=f"sweep #{other.pk} config.pbtxt ({other.config_sha256[:12]})",
        )
    )


def compare(sweep_list: Sequence[Sweep]) -> dict[str, Any]:
    """Level rows of each sweep plus the config diff of each against the first."""
    base = sweep_list[0]
    return {
        "sweeps": [
            {
                "sweep": sweeps.sweep_json(s),
                "levels": [
                    sweeps.point_json(p)
                    for p in SweepPoint.objects.filter(sweep=s, window=SweepPoint.LEVEL)
                ],
                "diff": config_diff(base, s) if s.pk != base.pk else "",
            }
            for s in sweep_list
        ]
    }


def summary_text(sweep: Sweep) -> str:
    """perf_analyzer-style summary for the command line."""
    params = sweeps.params_of(sweep)
    label = "Concurrency" if params.mode == "concurrency" else "Request Rate"
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {params.batch_size}",
        f"  Measurement window: {params.measurement_window_ms} msec",
        f"  Stabilizing using {params.latency_label} latency",
        "",
    ]
    for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL):
        name = "Request concurrency" if params.mode == "concurrency" else "Request Rate"
        lines.append(f"{name}: {p.level:g}")
        lines.append("  Client: ")
        lines.append(f"    Request count: {p.requests}")
        lines.append(f"    Throughput: {p.throughput:.2f} infer/sec")
        if (p.extra or {}).get("behind_schedule"):
            # perf_analyzer's wording for the same condition ("delayed" requests).
            lines.append(
                f"    WARNING: requests were delayed: sent {p.extra['send_rate']:.1f}/sec of "
                f"{p.level:g}/sec (every load thread was waiting for a reply)"
            )
        if p.avg_us is not None:
            lines.append(f"    Avg latency: {p.avg_us:.0f} usec")
        for pct in (50, 90, 95, 99):
            value = getattr(p, f"p{pct}_us")
            if value is not None:
                lines.append(f"    p{pct} latency: {value:.0f} usec")
        if p.server_request_us is not None:
            lines.append("  Server: ")
            lines.append(
                f"    Avg request latency: {p.server_request_us:.0f} usec (queue "
                f"{p.queue_us or 0:.0f} usec + compute input {p.compute_input_us or 0:.0f} usec "
                f"+ compute infer {p.compute_infer_us or 0:.0f} usec + compute output "
                f"{p.compute_output_us or 0:.0f} usec)"
            )
        if not p.stable:
            lines.append("  (not stable within the window limit)")
        lines.append("")
    kind = "Average" if params.percentile == "avg" else params.latency_label
    lines.append(f"Inferences/Second vs. Client {kind} Batch Latency")
    for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL):
        lat = sweeps.latency_value(p, params.percentile)
        lat_text = f"{lat:.0f} usec" if lat is not None else "n/a"
        lines.append(
            f"{label}: {p.level:g}, throughput: {p.throughput:.2f} infer/sec, latency {lat_text}"
        )
    summary = sweep.summary or sweeps.knee_summary(sweep)
    lines.append("")
    lines.append(summary.get("recommendation", ""))
    return "\n".join(lines) + "\n"
