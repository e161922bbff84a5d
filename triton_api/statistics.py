"""Summaries of Triton's statistics extension and of its Prometheus metrics.

The statistics extension is flattened in one place (`flatten`): the model pages and the API
summarise one version in µs, the load engine adds the versions up and diffs them per window.
"""

from __future__ import annotations

from typing import Any

from . import gpus
from .prometheus import MetricSample

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")
# The durations of inference_stats that are read: request totals, then the stages.
DURATIONS = ("success", "fail", *STAGES)


def flatten(entry: dict[str, Any]) -> dict[str, int]:
    """One entry of model_stats as flat cumulative counters: inference_count,
    execution_count, and <duration>_count / <duration>_ns for each of DURATIONS.

    The gRPC client's JSON gives 64-bit numbers as strings and leaves zeros out."""
    inference = entry.get("inference_stats", {})
    flat = {
        "inference_count": int(entry.get("inference_count") or 0),
        "execution_count": int(entry.get("execution_count") or 0),
    }
    for key in DURATIONS:
        item = inference.get(key, {})
        flat[f"{key}_count"] = int(item.get("count") or 0)
        flat[f"{key}_ns"] = int(item.get("ns") or 0)
    return flat


def totals(model_stats: list[dict[str, Any]], version: str = "") -> dict[str, int]:
    """`flatten` added up over the loaded versions (only `version`, when given); empty
    when there is no entry."""
    if version:
        model_stats = [m for m in model_stats if str(m.get("version")) == str(version)]
    summed: dict[str, int] = {}
    for entry in model_stats:
        for key, value in flatten(entry).items():
            summed[key] = summed.get(key, 0) + value
    return summed


def summarize_model_stats(entry: dict[str, Any]) -> dict[str, Any]:
    """One model version's statistics, in the units users read (counts, µs)."""
    flat = flatten(entry)
    inference_count, execution_count = flat["inference_count"], flat["execution_count"]
    summary: dict[str, Any] = {
        "version": entry.get("version", ""),
        "inference_count": inference_count,
        "execution_count": execution_count,
        # Average batch size as Triton's docs define it: inferences per execution.
        "avg_batch_size": round(inference_count / execution_count, 2) if execution_count else None,
        "success_count": flat["success_count"],
        "fail_count": flat["fail_count"],
    }
    for stage in STAGES:
        count, ns = flat[f"{stage}_count"], flat[f"{stage}_ns"]
        summary[f"avg_{stage}_us"] = round(ns / count / 1000, 1) if count else None
    return summary


def summarize_all(model_stats: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for entry in model_stats:
        result.setdefault(entry.get("name", ""), []).append(summarize_model_stats(entry))
    return result


# --- Prometheus metrics, as rates between two scrapes --------------------------------------
# One derivation for the live charts (between two 2 s scrapes) and the stored history
# (repository_app/history.py, over 10 s): both call model_counters, model_rates and gauges.

# Cumulative per-model counters (summed over versions and failure reasons).
COUNTERS: dict[str, tuple[str, ...]] = {
    "success": ("nv_inference_request_success",),
    "failure": ("nv_inference_request_failure",),
    "inferences": ("nv_inference_count",),
    "executions": ("nv_inference_exec_count",),
    "request_us": ("nv_inference_request_duration_us",),
    "queue_us": ("nv_inference_queue_duration_us",),
    "compute_us": (
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ),
}
# Latency quantiles exist only with --metrics-config summary_latencies=true (a sliding
# window kept by Triton); 2.51's only histogram, nv_inference_first_response_histogram_ms,
# is for decoupled models and measures the first response, so it is not used here.
REQUEST_SUMMARY = "nv_inference_request_summary_us"
QUANTILES = {"p50_us": "0.5", "p99_us": "0.99"}
CPU_GAUGES = {
    "nv_cpu_utilization": "cpu_utilization",
    "nv_cpu_memory_used_bytes": "cpu_memory_used_bytes",
    "nv_cpu_memory_total_bytes": "cpu_memory_total_bytes",
}
RATE_FIELDS = (
    "requests_per_s",
    "failures_per_s",
    "request_us",
    "queue_us",
    "compute_us",
    "batch_size",
)

_COUNTER_OF = {name: key for key, names in COUNTERS.items() for name in names}


def model_counters(samples: list[MetricSample]) -> dict[str, dict[str, float]]:
    """Per model, each counter of COUNTERS summed over its series."""
    totals: dict[str, dict[str, float]] = {}
    for s in samples:
        key = _COUNTER_OF.get(s.name)
        if key is not None and "model" in s.labels:
            row = totals.setdefault(s.labels["model"], dict.fromkeys(COUNTERS, 0.0))
            row[key] += s.value
    return totals


def model_gauges(samples: list[MetricSample]) -> dict[str, dict[str, float]]:
    """Per model: pending requests (summed over versions) and, where Triton exports its
    request summary, p50/p99 (the slowest version's)."""
    gauges: dict[str, dict[str, float]] = {}
    wanted = {q: field for field, q in QUANTILES.items()}
    for s in samples:
        model = s.labels.get("model")
        if model is None:
            continue
        if s.name == "nv_inference_pending_request_count":
            row = gauges.setdefault(model, {})
            row["pending"] = row.get("pending", 0.0) + s.value
        elif s.name == REQUEST_SUMMARY and s.labels.get("quantile") in wanted:
            row = gauges.setdefault(model, {})
            field = wanted[s.labels["quantile"]]
            row[field] = max(row.get(field, s.value), s.value)
    return gauges


def counters_before(
    before: dict[str, dict[str, float]] | None, name: str
) -> dict[str, float] | None:
    """A model's counters at the previous scrape. A model absent from it was loaded since,
    and Triton's counters for it started at 0 then; no previous scrape: unknown (None)."""
    if before is None:
        return None
    return before.get(name) or dict.fromkeys(COUNTERS, 0.0)


def model_rates(
    before: dict[str, float] | None, after: dict[str, float], seconds: float
) -> dict[str, float | None]:
    """One model's rates and per-request averages between two counter snapshots.

    A counter lower than before means Triton restarted (or reloaded the model): as
    Prometheus' rate() does, the new value is taken as the increase. Times are divided by
    successful requests: Triton accumulates them per request (its summaries' _count
    matches nv_inference_request_success). Idle intervals give None, not 0, for times."""
    if before is None or seconds <= 0:
        return dict.fromkeys(RATE_FIELDS)
    delta = {
        k: after[k] - before.get(k, 0.0) if after[k] >= before.get(k, 0.0) else after[k]
        for k in COUNTERS
    }
    success = delta["success"]

    def per_request(key: str) -> float | None:
        return round(delta[key] / success, 1) if success > 0 else None

    return {
        "requests_per_s": round((success + delta["failure"]) / seconds, 3),
        "failures_per_s": round(delta["failure"] / seconds, 3),
        "request_us": per_request("request_us"),
        "queue_us": per_request("queue_us"),
        "compute_us": per_request("compute_us"),
        "batch_size": (
            round(delta["inferences"] / delta["executions"], 2) if delta["executions"] > 0 else None
        ),
    }


def server_gauges(
    samples: list[MetricSample],
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Server-wide CPU figures and per-GPU figures (keyed by gpu_uuid); each may be empty:
    CPU metrics exist on Linux only, GPU metrics need DCGM and a GPU."""
    cpu = {CPU_GAUGES[s.name]: s.value for s in samples if s.name in CPU_GAUGES}
    return cpu, gpus.per_gpu(samples)


def derive_server_metrics(
    previous: list[MetricSample] | None, current: list[MetricSample], seconds: float
) -> dict[str, Any]:
    """Per model: rates, per-request times, batch size, pending, p50/p99; CPU and GPUs."""
    now = model_counters(current)
    before = model_counters(previous) if previous is not None else None
    gauges = model_gauges(current)
    models: dict[str, dict[str, float | None]] = {}
    for name in set(now) | set(gauges):
        row: dict[str, float | None] = {"pending": 0.0, "p50_us": None, "p99_us": None}
        row.update(gauges.get(name, {}))
        if name in now:
            row.update(model_rates(counters_before(before, name), now[name], seconds))
        else:
            row.update(dict.fromkeys(RATE_FIELDS))
        models[name] = row
    cpu, per_gpu = server_gauges(current)
    return {
        "models": models,
        "cpu": cpu,
        "cpu_metrics_present": bool(cpu),
        "gpus": per_gpu,
        "gpu_metrics_present": bool(per_gpu),
    }
